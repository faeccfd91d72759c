#!/usr/bin/env bash
# codec_speed.sh: issue 46's codec-speed measure in one go: sqz-machine-limits's one-core memcpy,
# then sqz-codec-bench -s 16M of every chunk codec, and each codec's encode with error feedback
# as GB/s of float32 input and as a share of that memcpy. Several builds alternate, round after
# round, so that a slow minute of a shared machine touches them alike.
#
#   perf/codec_speed.sh [-R ROUNDS] BUILD [BUILD...]     (ROUNDS default 2)
set -euo pipefail
rounds=2
while getopts "R:h" opt; do
  case $opt in
    R) rounds=$OPTARG ;;
    *) sed -n '2,7p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,7p' "$0"; exit 2; }
codecs=(dense fp16 bf16 int8 qsgd onebit terngrad topk randk threshold:threshold=1.5 dgc)
args=()
for c in "${codecs[@]}"; do args+=(-z "$c"); done
printf "%-6s %-28s %-24s %9s %9s %8s\n" round build codec memcpy encodeFB share
for r in $(seq "$rounds"); do
  for b in "$@"; do
    memcpy=$("$b/perf/sqz-machine-limits" | awk '/^memcpy/ {print $(NF-1)}')
    "$b/perf/sqz-codec-bench" -s 16M -r 7 "${args[@]}" |
      awk -v r="$r" -v b="$b" -v m="$memcpy" '!/^#/ && NF >= 7 {
        printf "%-6s %-28s %-24s %9.2f %9.2f %7.0f%%\n", r, b, $1, m, $5, 100 * $5 / m }'
  done
done
