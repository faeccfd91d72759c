#!/bin/bash
# The compression benchmark of docs/compression.md: at 4 ranks over tcp and over shm, float32
# sum at 16 MiB and 256 MiB, every codec through sqz-allreduce-perf -z (busbw is the logical,
# dense busbw as nccl-tests defines it; wire/rank, ratio and relerr come from the codec), then
# sqz-codec-bench's single-core throughput with the top-k selection row.
# Usage: scripts/compression-table.sh   (about 10 minutes on 2 cores; run it on an idle machine)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/perf/sqz-codec-bench ] || scripts/build.sh
export SQZ_SOCKET_IFNAME=lo
specs=(dense fp16 bf16 int8 qsgd onebit terngrad topk:ratio=0.001 randk:ratio=0.001
       threshold:threshold=1.5 dgc:ratio=0.001 powersgd:rank=4)
zargs=()
for s in "${specs[@]}"; do zargs+=(-z "$s"); done
for t in tcp shm; do
  echo "## $t, 4 ranks: sqz-allreduce-perf -b 16M -e 256M -f 16 -n 3 -w 1 ${zargs[*]}"
  echo "| codec | size | time (us) | busbw (GB/s) | algo | wire/rank (B) | ratio | relerr |"
  echo "|---|---|---|---|---|---|---|---|"
  SQZ_TRANSPORT=$t timeout 1200 build/src/launcher/sqzrun -n 4 build/perf/sqz-allreduce-perf \
    -b 16M -e 256M -f 16 -n 3 -w 1 "${zargs[@]}" 2>&1 |
    awk '/^ +[0-9]/ {printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $15, $1, $6, $8, $14, $16, $17, $18}'
  echo
done
echo "## sqz-codec-bench -s 128K -S (one core, GB/s of float32 input)"
build/perf/sqz-codec-bench -s 128K -S "${zargs[@]}"
