#!/usr/bin/env bash
# scripts/gpu-figures.py (issue 47's figures from a GPU bundle's logs) on logs made up here, whose
# numbers put each goal on a known side: the arithmetic (bytes read + written, the ratios), the
# parsing of each log, and "not measured" for what a run lacks. A GPU run's 15 minutes end in
# this script's table, so a parser that misreads a log must fail here, not there.
# Usage: gpu_figures_test.sh SCRIPT
set -euo pipefail
script=${1:?usage: gpu_figures_test.sh SCRIPT}
py=/usr/bin/python3
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
fail() { echo "FAIL: $*"; echo "--- output"; cat "$logs/out"; exit 1; }

# 64M floats = 268435456 B dense. Copy 1000 GB/s. int8 (payload 67108864: a quarter):
# encode 800 GB/s of input -> 800 x 1.25 = 1000 GB/s of traffic, 100%; combine 250 -> 250 x 2.25
# = 562.5, 56%. fp16 (half): encode 400 -> 600, 60%; combine 320 -> 800, 80%. Feedback: int8
# 700 / 800 = 0.88x; fp16 100 / 400 = 0.25x.
cat >"$logs/codec-bench.log" <<'EOF'
# sqz-codec-bench: CUDA kernels on cuda:0 NVIDIA H200, 262144 float32 values per chunk (1048576 B dense), gradient-like data
# device copy bandwidth: 1000.0 GB/s (cudaMemcpyAsync device to device of 256 MiB, bytes read + written over the time)
# codec                       payload     ratio    encode  encodeFB   combine    decode    memcpy   FB/copy
int8                           262144      4.00      1.00      1.00      1.00      1.00         -         -
# sqz-codec-bench: CUDA kernels on cuda:0 NVIDIA H200, 67108864 float32 values per chunk (268435456 B dense), gradient-like data
# codec                       payload     ratio    encode  encodeFB   combine    decode    memcpy   FB/copy
#                                 (B)              (GB/s)    (GB/s)    (GB/s)    (GB/s)    (GB/s)
int8                         67108864      4.00    800.00    700.00    250.00    900.00         -         -
#   encodeFB: 1 launches, 0 host waits, 2 copies (0 to the host, 0 pageable)
fp16                        134217728      2.00    400.00    100.00    320.00    900.00         -         -
powersgd                       262144   1024.00         -      0.00         -      0.00         -         -  composite
#
# selection on the GPU: top-k of 67108864 float32 values, one chunk, median of 3 runs
#   topk:ratio=0.001,sample=1 encode (select + gather)       0.50 ms  (k = 67109, payload 536880 B, DGC's mode)
#   topk:ratio=0.001,sample=0 encode (select + gather)       1.00 ms  (k = 67109, payload 536880 B)
#   topk:ratio=0.01,sample=0 encode (select + gather)        2.00 ms  (k = 671089, payload 5368720 B)
EOF
cat >"$logs/torch-topk.log" <<'EOF'
ratio 0.001 k 67109: topk(abs, sorted=False) 4.00 ms; topk(x, sorted=False) 3.00 ms; kthvalue-threshold 9.00 ms
ratio 0.01 k 671089: topk(abs, sorted=False) 5.00 ms; topk(x, sorted=False) 4.00 ms; kthvalue-threshold 9.00 ms
EOF
row() {  # row SIZE INPLACE TIME_US BUSBW
  printf '{"size": %s, "inplace": %s, "time_us": %s, "busbw": %s}' "$@"
}
printf '{"rows": [%s, %s, %s]}\n' "$(row 1024 true 6.0 0)" "$(row 1024 false 12.5 0)" \
  "$(row 4096 false 9.0 0)" >"$logs/allreduce-default-n1-dense-256M.json"
printf '{"rows": [%s, %s]}\n' "$(row 268435456 false 1 300.0)" "$(row 268435456 true 1 260.0)" \
  >"$logs/allreduce-default-n2-dense-256M.json"
echo '# HBM-traffic limit: 2 rank(s) on one GPU read each input and write each output once (2 N S bytes a call): algbw <= 500.00 GB/s, busbw <= 500.00 GB/s' \
  >"$logs/allreduce-default-n2-dense-256M.log"

"$py" "$script" "$logs" >"$logs/out" || fail "exit $?"
expect() {  # expect TEXT: a line of the output holds it
  grep -qF -- "$1" "$logs/out" || fail "no line with: $1"
}
expect "Device: cuda:0 NVIDIA H200."
expect "| int8 encode, 64M floats | >= 70% of copy (read + written) | 1000 GB/s, 100% of 1000 | yes |"
expect "| int8 decode-add, 64M floats | >= 70% of copy (read + written) | 562 GB/s, 56% of 1000 | **NO** |"
expect "| fp16 encode, 64M floats | >= 70% of copy (read + written) | 600 GB/s, 60% of 1000 | **NO** |"
expect "| fp16 decode-add, 64M floats | >= 70% of copy (read + written) | 800 GB/s, 80% of 1000 | yes |"
expect "| int8 encode with feedback, 64M floats | >= 0.8x plain encode | 700 / 800 GB/s = 0.88x | yes |"
expect "| fp16 encode with feedback, 64M floats | >= 0.8x plain encode | 100 / 400 GB/s = 0.25x | **NO** |"
expect "| qsgd encode, 64M floats | >= 70% of copy (read + written) | not measured: "
expect "| top-k, k = 0.001 n, 64M floats | >= 3x faster than torch.topk | 1.00 ms, torch 4.00 ms: 4.00x | yes |"
expect "| top-k, k = 0.01 n, 64M floats | >= 3x faster than torch.topk | 2.00 ms, torch 5.00 ms: 2.50x | **NO** |"
expect "| 1-rank device all-reduce, 1024 B | <= 10 us | 12.5 us | **NO** |"
expect "| 2 ranks on one GPU, 256 MiB | >= half the HBM-traffic limit | busbw 300.0 GB/s, 60% of 500.0 | yes |"
# 5 goals met of 10 measured; the other 13 of the 23 rows are absent from the made-up logs.
expect "## Issue 47's figures: 5 of 10 measured meet their goal (13 not measured)"
grep -q "stand-in" "$logs/out" && fail "an H200's run called a dry run"

# A run with no logs at all: every row "not measured", and still exit 0.
rm -f "$logs"/*.log "$logs"/*.json
"$py" "$script" "$logs" >"$logs/out" || fail "exit $? without logs"
expect "## Issue 47's figures: 0 of 0 measured meet their goal (23 not measured)"
echo "PASS: gpu-figures"
