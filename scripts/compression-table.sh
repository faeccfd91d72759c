#!/bin/bash
# The compression benchmark of docs/compression.md: at 4 ranks over tcp and over shm, float32
# sum at 16 MiB and 256 MiB, every codec through sqz-allreduce-perf -z (busbw is the logical,
# dense busbw as nccl-tests defines it; wire/rank, ratio and relerr come from the codec), then
# sqz-codec-bench's single-core throughput with the top-k selection row.
# 256 MiB runs without the relerr check (-c 0; the check computes every rank's input on every
# rank, which costs more than the calls at this size): its relerr is the 16 MiB one's.
# Every lossy codec runs twice: "SPEC,auto_dense=0" is the codec alone, "SPEC,auto_dense=1" has
# the pay-off guard on (sqz-allreduce-perf -z turns it off unless the spec or --guard asks for
# it); -w 5 lets the guard's four measuring calls (compressed, dense,
# compressed, dense) pass before the timed calls.
# Usage: scripts/compression-table.sh   (about 30 minutes on 2 cores; run it on an idle machine)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/perf/sqz-codec-bench ] || scripts/build.sh
export SQZ_SOCKET_IFNAME=lo
specs=(dense fp16 bf16 int8 qsgd onebit terngrad topk:ratio=0.001 randk:ratio=0.001
       threshold:threshold=1.5 dgc:ratio=0.001 powersgd:rank=4)
# SPEC with key=value added ("fp16" -> "fp16:auto_dense=0", "topk:ratio=0.001" -> "...,auto_dense=0")
withKey() { case "$1" in *:*) echo "$1,$2" ;; *) echo "$1:$2" ;; esac; }
runs=()
for s in "${specs[@]}"; do
  if [ "$s" = dense ]; then
    runs+=("$s")
  else
    runs+=("$(withKey "$s" auto_dense=1)" "$(withKey "$s" auto_dense=0)")
  fi
done
zargs=()
for s in "${runs[@]}"; do zargs+=(-z "$s"); done
row='/^ +[0-9]/ {printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $15, $1, $6, $8, $14, $16, $17, $18}'
for t in tcp shm; do
  echo "## $t, 4 ranks: sqz-allreduce-perf -b 16M -e 16M -n 3 -w 5, then -b 256M -e 256M -n 2 -w 5 -c 0 (-w 1 without the guard)"
  echo "| codec | size | time (us) | busbw (GB/s) | algo | wire/rank (B) | ratio | relerr |"
  echo "|---|---|---|---|---|---|---|---|"
  SQZ_TRANSPORT=$t timeout 600 build/src/launcher/sqzrun -n 4 build/perf/sqz-allreduce-perf \
    -b 16M -e 16M -n 3 -w 5 "${zargs[@]}" 2>&1 | awk "$row"
  for s in "${runs[@]}"; do
    w=1
    case "$s" in *auto_dense=1) w=5 ;; esac  # the guard's measuring calls pass first
    SQZ_TRANSPORT=$t timeout 600 build/src/launcher/sqzrun -n 4 build/perf/sqz-allreduce-perf \
      -b 256M -e 256M -n 2 -w $w -c 0 -z "$s" 2>&1 | awk "$row"
  done
  echo
done
echo "## sqz-codec-bench -s 128K -S (one core, GB/s of float32 input)"
zargs=()
for s in "${specs[@]}"; do zargs+=(-z "$s"); done
build/perf/sqz-codec-bench -s 128K -S "${zargs[@]}"
