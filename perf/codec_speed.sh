#!/usr/bin/env bash
# codec_speed.sh: issue 46's codec-speed measure in one go: sqz-codec-bench -s 16M of every chunk
# codec, each codec's encode with error feedback as GB/s of float32 input and as a share of one
# core's memcpy, the memcpy sqz-machine-limits times (256 MiB buffers) run between the codec's
# own timed runs by the bench (its memcpy and FB/copy columns: a shared machine's memory speed
# drifts by a third within a minute, so a memcpy timed apart from the codec misleads). The
# separate sqz-machine-limits figure of each round is printed too. Several builds alternate,
# round after round, so that a slow minute touches them alike.
#
#   perf/codec_speed.sh [-R ROUNDS] BUILD [BUILD...]     (ROUNDS default 2)
set -euo pipefail
rounds=2
while getopts "R:h" opt; do
  case $opt in
    R) rounds=$OPTARG ;;
    *) sed -n '2,10p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,10p' "$0"; exit 2; }
codecs=(dense fp16 bf16 int8 qsgd onebit terngrad topk randk threshold:threshold=1.5 dgc)
args=()
for c in "${codecs[@]}"; do args+=(-z "$c"); done
printf "%-6s %-28s %-24s %9s %9s %9s %8s\n" round build codec limits encodeFB memcpy share
for r in $(seq "$rounds"); do
  for b in "$@"; do
    limits=$("$b/perf/sqz-machine-limits" | awk '/^memcpy/ {print $(NF-1)}')
    "$b/perf/sqz-codec-bench" -s 16M -r 7 "${args[@]}" |
      awk -v r="$r" -v b="$b" -v l="$limits" '!/^#/ && NF >= 9 {
        printf "%-6s %-28s %-24s %9.2f %9.2f %9.2f %8s\n", r, b, $1, l, $5, $8, $9 }'
  done
done
