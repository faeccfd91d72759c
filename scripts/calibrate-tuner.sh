#!/bin/bash
# Measures every all-reduce algorithm (direct over shm only) and the tuner's own pick ("auto") over shm and tcp at
# several rank counts and sizes (out-of-place time of the perf binary, REPS runs each), then
# (scripts/fit_tuner.py) prints the table of the tuner's pick against the fastest algorithm per
# cell (medians) and writes a tuner file: the efficiency rows fit to these measurements over all
# rank counts at once, which SQZ_TUNER_FILE=<file> loads in place of algorithms/calibration.cc's.
#
# Usage: scripts/calibrate-tuner.sh [REPS] [TRANSPORTS] [RANKS] [SIZES]
#   REPS        runs per cell (default 3; the table and the fit use medians)
#   TRANSPORTS  default "tcp shm"
#   RANKS       rank counts (default "3 4 6 8")
#   SIZES       bytes per rank, K/M suffixes (default "8 64K 1M 16M")
# Environment: BUILD (default build) is the build directory with sqzrun and sqz-allreduce-perf;
# OUT (default $BUILD/calibrate-tuner.txt) keeps the raw measurements, one line per run:
#   transport ranks algo bytes time_us algo_that_ran
# plus, from each "auto" run, what init-time calibration measured (SQZ_DEBUG=INFO's line):
#   #model transport ranks transport=T alpha_us=A beta_gbps=B gamma_gbps=G ms=M ...
# whose medians become the tuner file's reference. The tuner file goes to $BUILD/tuner.txt
# (TUNER_FILE overrides). About 15 minutes per 5 REPS on 2 cores with the defaults. Run it on an
# idle machine: anything else running skews the timings (and re-run the cells that look wrong:
# fit_tuner.py reads several raw files at once, and takes the medians over all of them).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-3}
TRANSPORTS=${2:-tcp shm}
RANKS=${3:-3 4 6 8}
SIZES=${4:-8 64K 1M 16M}
BUILD=${BUILD:-build}
SQZRUN=$BUILD/src/launcher/sqzrun
PERF=$BUILD/perf/sqz-allreduce-perf
if [ ! -x "$PERF" ] || [ ! -x "$SQZRUN" ]; then
  if [ "$BUILD" = build ]; then
    scripts/build.sh
  else
    echo "calibrate-tuner.sh: $PERF or $SQZRUN is missing; build $BUILD first" >&2
    exit 1
  fi
fi
export SQZ_SOCKET_IFNAME=lo
out=${OUT:-$BUILD/calibrate-tuner.txt}
tuner_file=${TUNER_FILE:-$BUILD/tuner.txt}
: >"$out"

# Timed and warm-up iterations per size: small sizes are noisy, so they get many of both (the
# first ~64 calls at 64 KiB over shm used to take 3x longer, faulting in the rings' pages, which
# are now mapped at init); large ones few.
iterations() {
  local bytes
  bytes=$(numfmt --from=iec "$1")
  if [ "$bytes" -le 65536 ]; then echo "50 50"
  elif [ "$bytes" -le 1048576 ]; then echo "20 10"
  elif [ "$bytes" -le 16777216 ]; then echo "5 2"
  else echo "3 1"
  fi
}

# The algorithms of one cell (transport, ranks, size) run back to back, so a change in the
# machine's load between cells shifts them alike and the comparison within a cell holds.
for rep in $(seq 1 "$REPS"); do
  for t in $TRANSPORTS; do
    for p in $RANKS; do
      for size in $SIZES; do
        read -r iters warm <<<"$(iterations "$size")"
        algos="auto naive ps ring rhd tree"
        [ "$t" = shm ] && algos="$algos direct"  # no row to fit; measured for the verdict
        for a in $algos; do
          args=()
          [ "$a" != auto ] && args=(-a "$a")
          SQZ_TRANSPORT=$t SQZ_DEBUG=INFO SQZ_DEBUG_SUBSYS=TUNING timeout 300 "$SQZRUN" -n "$p" \
            "$PERF" -b "$size" -e "$size" -n "$iters" -w "$warm" -c 0 "${args[@]}" 2>&1 |
            awk -v t="$t" -v p="$p" -v a="$a" '
              /^ +[0-9]/ {print t, p, a, $1, $6, $NF}
              /tuner calibration:/ && !seen++ {
                sub(/.*tuner calibration: /, ""); print "#model", t, p, $0
              }' >>"$out"
        done
      done
    done
  done
done
/usr/bin/python3 scripts/fit_tuner.py --write "$tuner_file" "$out"
