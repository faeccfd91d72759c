#!/usr/bin/env bash
# dgc_real.sh: the long runs behind perf/RESULTS.md's "Deep Gradient Compression on a
# communication-bound model": perf/train_real.py's wordlm (12.8M parameters, 51 MB of gradient)
# on a lab of 4 hosts whose links are shaped to 1 Gbit/s, with dense, DGC at CF 1000 and 100 with
# every rule of the seed (momentum correction, local clipping, momentum factor masking, warm-up of
# the sparsity and of the learning rate), static top-k at CF 1000, and GraVAC with the seed's
# settings, the same seeds for all.
#
#   perf/dgc_real.sh [-b BUILD] [-o OUTDIR] [-s STEPS] [-l LATENCY] [-R ROUNDS] [-r FIRST_ROUND]
#                    [-S "SPEC ..."]
#
# -S replaces the specs below (e.g. GraVAC against static top-k at several CFs:
# -S "gravac topk:ratio=0.1 topk:ratio=0.025 topk:ratio=0.00625 topk:ratio=0.001").
#
# Every run has the learning rate's linear warm-up over the first WARMUP steps (the same
# schedule for every spec); DGC's sparsity warms up over the same steps (its warmup key: density
# 25%, 6.25%, 1.5625%, 0.39% in four equal stages, then its ratio) and clips each rank's gradient
# to clip/sqrt(4) before it enters the momentum: clip 2 (1 per rank) binds on spikes only, as a
# rank's gradient norm is about 0.8 here (clip 1, 0.5 per rank, which scales every step's
# gradient by about 0.6, ended at the same perplexity: 128.0 against 129.2 after 200 steps).
# Odd rounds run the specs in the order below, even rounds backwards (a drift in this shared
# machine's speed must not favour the specs run first). Writes OUTDIR/wordlm-rN.json (round N's
# traces), OUTDIR/wordlm.png (round 1's CF and perplexity against training time) and prints
# perf/train_real_report.py's table (medians over the rounds). The pay-off guard is off
# (SQZ_CODEC_AUTO_DENSE=0) so that every call runs the codec it names. Needs root (the lab),
# python3-torch, git's documentation (Debian's git package) and a build with the Python package
# (BUILD/python) and sqz-netprobe. About 35 minutes a round on 2 shared cores.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=perf/lab_rounds.sh
source "$here/lab_rounds.sh"
build=$repo/build outdir=$repo/perf/results/dgc-real latency=20ms steps=200 rounds=3 first=1
warmup=40

chosen=""
while getopts "b:o:s:l:R:r:S:h" opt; do
  case $opt in
    b) build=$(cd "$OPTARG" && pwd) ;;
    o) outdir=$OPTARG ;;
    s) steps=$OPTARG ;;
    l) latency=$OPTARG ;;
    R) rounds=$OPTARG ;;
    r) first=$OPTARG ;;
    S) chosen=$OPTARG ;;
    *) sed -n '2,27p' "$0"; exit 2 ;;
  esac
done
require_python_package dgc_real.sh "$build"
mkdir -p "$outdir"

specs=(dense "dgc:ratio=0.001,momentum=0.9,clip=2,warmup=$warmup"
       "dgc:ratio=0.01,momentum=0.9,clip=2,warmup=$warmup" topk:ratio=0.001 gravac)
if [ -n "$chosen" ]; then read -r -a specs <<< "$chosen"; fi

export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH} SQZ_CODEC_AUTO_DENSE=0
export SQZ_NETPROBE=${SQZ_NETPROBE:-$build/tests/netlab/sqz-netprobe}
netlab=$repo/tests/netlab/netlab.sh
lab=(--name sqzdgc -n 4)
"$netlab" up "${lab[@]}" -r 1gbit -l "$latency"
trap '"$netlab" down "${lab[@]}"' EXIT
for ((round = first; round < first + rounds; round++)); do
  spec_args "$round" "${specs[@]}"
  "$netlab" run "${lab[@]}" --timeout 5400 -- /usr/bin/python3 "$here/train_real.py" -m wordlm \
    -s "$steps" -E 20 --probe-every 0 --lr-warmup "$warmup" "${spec_args[@]}" \
    -J "$outdir/wordlm-r$round.json"
  if ((round == 1)); then
    /usr/bin/python3 "$here/plot_train.py" -o "$outdir/wordlm.png" "$outdir/wordlm-r1.json"
  fi
done
/usr/bin/python3 "$here/train_real_report.py" "$outdir"/wordlm-r*.json
