#!/usr/bin/env bash
# adaptive_real.sh: the long runs behind perf/RESULTS.md's "Adaptive compression on real
# models": each model of perf/train_real.py (mlp, cnn, transformer) on a lab of 4 hosts whose links are
# shaped to 1 Gbit/s, with dense, static top-k at CF 10 to 1000 (GraVAC's candidates and 1000),
# Accordion, and GraVAC with the seed's settings at eps 0.7 and 0.9, the same seeds for all.
#
#   perf/adaptive_real.sh [-b BUILD] [-o OUTDIR] [-m "mlp cnn transformer"] [-l LATENCY]
#                         [-R ROUNDS] [-r FIRST_ROUND]
#
# Each round runs every spec once; odd rounds in the order above, even rounds backwards, so that
# a drift in this shared machine's speed does not favour the specs run first. Writes
# OUTDIR/MODEL-rN.json (train_real's traces of round N), OUTDIR/MODEL.png (round 1's CF and metric
# against training time) and prints perf/train_real_report.py's tables (medians over the rounds).
# The pay-off guard is off (SQZ_CODEC_AUTO_DENSE=0) so that every call runs the codec it names.
# Needs root (the lab), python3-torch, python3-sklearn and a build with the Python package
# (BUILD/python). About 25 minutes a round on 2 cores (ROUNDS default 2; -r 2 -R 1 runs round 2
# alone).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=perf/lab_rounds.sh
source "$here/lab_rounds.sh"
build=$repo/build outdir=$repo/perf/results/adaptive-real models="mlp cnn transformer" latency=20ms
rounds=2 first=1

while getopts "b:o:m:l:R:r:h" opt; do
  case $opt in
    b) build=$(cd "$OPTARG" && pwd) ;;
    o) outdir=$OPTARG ;;
    m) models=$OPTARG ;;
    l) latency=$OPTARG ;;
    R) rounds=$OPTARG ;;
    r) first=$OPTARG ;;
    *) sed -n '2,19p' "$0"; exit 2 ;;
  esac
done
require_python_package adaptive_real.sh "$build"
mkdir -p "$outdir"

specs=(dense)
for ratio in 0.1 0.05 0.025 0.0125 0.00625 0.003125 0.0015625 0.001; do
  specs+=("topk:ratio=$ratio")
done
specs+=(accordion gravac gravac:eps=0.9)

export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH} SQZ_CODEC_AUTO_DENSE=0
netlab=$repo/tests/netlab/netlab.sh
"$netlab" up -n 4 -r 1gbit -l "$latency"
trap '"$netlab" down' EXIT
for ((round = first; round < first + rounds; round++)); do
  spec_args "$round" "${specs[@]}"
  for model in $models; do
    "$netlab" run -- /usr/bin/python3 "$here/train_real.py" -m "$model" "${spec_args[@]}" \
      -J "$outdir/$model-r$round.json"
    if ((round == 1)); then
      /usr/bin/python3 "$here/plot_train.py" -o "$outdir/$model.png" "$outdir/$model-r1.json"
    fi
  done
done
for model in $models; do
  /usr/bin/python3 "$here/train_real_report.py" "$outdir/$model"-r*.json
done
