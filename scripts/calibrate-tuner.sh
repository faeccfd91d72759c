#!/bin/bash
# Measures every all-reduce algorithm and the tuner's own pick ("auto") at 4 ranks over shm and
# tcp at 8 B, 64 KiB, 1 MiB, 16 MiB and 256 MiB (out-of-place time, median of REPS runs of the
# perf binary), then prints the table of the tuner's pick against the fastest algorithm and the
# efficiency rows that algorithms/calibration.cc holds, fit to these measurements.
# Usage: scripts/calibrate-tuner.sh [REPS] [TRANSPORTS]   (defaults 3, "tcp shm"; about 5
# minutes on 2 cores). The raw measurements stay in build/calibrate-tuner.txt.
# Run it on an idle machine: anything else running skews the timings.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-3}
TRANSPORTS=${2:-tcp shm}
SQZRUN=build/src/launcher/sqzrun
PERF=build/perf/sqz-allreduce-perf
[ -x "$PERF" ] || scripts/build.sh
export SQZ_SOCKET_IFNAME=lo
out=build/calibrate-tuner.txt
: >"$out"
# size, timed iterations, warm-up iterations: small sizes need many warm-up calls before the
# scheduler settles (the first ~50 calls at 64 KiB over shm take 10x longer).
specs="8:50:50 64K:50:50 1M:20:10 16M:5:2 256M:3:1"
for rep in $(seq 1 "$REPS"); do
  for t in $TRANSPORTS; do
    for a in auto naive ps ring rhd tree; do
      args=()
      [ "$a" != auto ] && args=(-a "$a")
      for spec in $specs; do
        IFS=: read -r size iters warm <<<"$spec"
        SQZ_TRANSPORT=$t timeout 300 "$SQZRUN" -n 4 "$PERF" -b "$size" -e "$size" -n "$iters" \
          -w "$warm" -c 0 "${args[@]}" 2>&1 |
          awk -v t="$t" -v a="$a" '/^ +[0-9]/ {print t, a, $1, $6, $NF}' >>"$out"
      done
    done
  done
done
/usr/bin/python3 scripts/fit_tuner.py "$out"
