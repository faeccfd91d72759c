#!/usr/bin/env bash
# compare.sh: Squeeze's dense all-reduce and its peers side by side, in one run: sqz-allreduce-perf
# (default transports, then SQZ_TRANSPORT=tcp), Gloo's three algorithms (gloo-allreduce-perf),
# Open MPI's MPI_Allreduce (shared memory: btl self,vader; then btl self,tcp) and PyTorch's gloo
# backend (torch_allreduce_perf.py), all float32 sum on the same ranks and sizes. Each run writes
# its table (NAME.log) and -J JSON (NAME.json) into the output directory; then one Markdown table
# (also table.md there) lists, size by size, every library's in-place time and busbw and how far
# it is from the fastest. In-place, because Gloo and torch have no out-of-place all-reduce.
# With -R N every run is repeated N times, round by round (each round runs every library once, so
# a slow spell of the machine touches all of them alike), and the table gives each row's median
# time and busbw over the rounds.
#
# Launching is pluggable: every run goes through `launch_ranks LIBRARY CMD...` (LIBRARY is
# squeeze, gloo, torch or mpi), which calls launch_LIBRARY NRANKS CMD.... The defaults below run
# on this host over loopback (sqzrun for squeeze, gloo and torch: it only sets SQZ_RANK and
# friends and starts the processes; mpirun for MPI). `-L FILE` sources FILE after them, so a lab
# mode can redefine launch_ranks or any launch_LIBRARY (and may read NRANKS, TIMEOUT, SQZRUN,
# MPIRUN). Every launch is bounded by -t seconds, so the whole run is bounded too.
#
#   perf/compare/compare.sh -B build -o build/compare                  # 16M and 256M, 4 ranks
#   perf/compare/compare.sh -B build -b 1M -e 16M -f 4 -r gloo,torch   # a subset

# The launch_LIBRARY functions are called indirectly, through launch_ranks:
# shellcheck disable=SC2317
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=/usr/bin/python3  # Debian's, where torch lives

usage() {
  cat <<EOF
Usage: $0 [options]
  -B DIR      meson build directory with sqzrun and the drivers (default: build)
  -o DIR      output directory for NAME.json, NAME.log and table.md (default: BUILD/compare)
  -n N        ranks (default 4)
  -b SIZE     smallest size (default 16M)
  -e SIZE     largest size (default 256M)
  -f N        size step factor (default 16)
  -i N        timed iterations per size (default 5)
  -w N        warm-up iterations (default 2)
  -c N        checked calls per size (default 1; 0 skips the checks)
  -t SECONDS  limit of each launch (default 600)
  -R N        rounds: repeat every run N times; the table gives medians (default 1)
  -r LIST     runs, comma-separated (default all): squeeze,squeeze-tcp,gloo,mpi,mpi-tcp,torch
  -L FILE     source FILE after the default launch_ranks/launch_LIBRARY functions (lab mode)
  -h          this text
EOF
}

BUILD=build OUT='' NRANKS=4 MINB=16M MAXB=256M FACTOR=16 ITERS=5 WARMUP=2 CHECK=1 TIMEOUT=600
RUNS=squeeze,squeeze-tcp,gloo,mpi,mpi-tcp,torch LAUNCHER_FILE= ROUNDS=1
while getopts ":B:o:n:b:e:f:i:w:c:t:r:L:R:h" opt; do
  case "$opt" in
    B) BUILD=$OPTARG ;;
    o) OUT=$OPTARG ;;
    n) NRANKS=$OPTARG ;;
    b) MINB=$OPTARG ;;
    e) MAXB=$OPTARG ;;
    f) FACTOR=$OPTARG ;;
    i) ITERS=$OPTARG ;;
    w) WARMUP=$OPTARG ;;
    c) CHECK=$OPTARG ;;
    t) TIMEOUT=$OPTARG ;;
    r) RUNS=$OPTARG ;;
    L) LAUNCHER_FILE=$OPTARG ;;
    R) ROUNDS=$OPTARG ;;
    h)
      usage
      exit 0
      ;;
    :)
      echo "compare.sh: -$OPTARG needs a value" >&2
      usage >&2
      exit 2
      ;;
    *)
      echo "compare.sh: unknown option -$OPTARG" >&2
      usage >&2
      exit 2
      ;;
  esac
done
shift $((OPTIND - 1))
if (($# > 0)); then
  echo "compare.sh: unexpected argument '$1'" >&2
  usage >&2
  exit 2
fi
for pair in "n:$NRANKS" "f:$FACTOR" "i:$ITERS" "t:$TIMEOUT" "w:$WARMUP" "c:$CHECK" "R:$ROUNDS"; do
  flag=${pair%%:*} value=${pair#*:}
  if ! [[ $value =~ ^[0-9]+$ ]] || { [[ $flag =~ ^[nfitR]$ ]] && ((value < 1)); }; then
    echo "compare.sh: -$flag $value: need a whole number$([[ $flag =~ ^[nfitR]$ ]] && echo ' >= 1')" >&2
    exit 2
  fi
done
for run in ${RUNS//,/ }; do
  case "$run" in
    squeeze | squeeze-tcp | gloo | mpi | mpi-tcp | torch) ;;
    *)
      echo "compare.sh: -r: unknown run '$run' (squeeze, squeeze-tcp, gloo, mpi, mpi-tcp, torch)" >&2
      exit 2
      ;;
  esac
done
SQZRUN=$BUILD/src/launcher/sqzrun
if [ ! -x "$SQZRUN" ]; then
  echo "compare.sh: $SQZRUN not found: build first (meson setup $BUILD && ninja -C $BUILD), or pass -B DIR" >&2
  exit 2
fi
OUT=${OUT:-$BUILD/compare}
mkdir -p "$OUT"
MPIRUN=$(command -v mpirun || true)

# ---- Launching (loopback defaults; -L FILE may redefine any of these) ----------------------------
launch_squeeze() {  # NRANKS CMD...
  local n=$1
  shift
  SQZ_SOCKET_IFNAME=lo "$SQZRUN" --timeout "$TIMEOUT" -n "$n" "$@"
}
launch_gloo() {
  local n=$1
  shift
  GLOO_SOCKET_IFNAME=lo "$SQZRUN" --timeout "$TIMEOUT" -n "$n" "$@"
}
launch_torch() { launch_gloo "$@"; }
launch_mpi() {
  local n=$1
  shift
  "$MPIRUN" --allow-run-as-root --oversubscribe --timeout "$TIMEOUT" \
    --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo -np "$n" "$@"
}
SETTING="one host, loopback"  # the table says where it ran; a -L file describes its own
launch_ranks() {  # LIBRARY CMD...
  local library=$1
  shift
  "launch_$library" "$NRANKS" "$@"
}
if [ -n "$LAUNCHER_FILE" ]; then
  if [ ! -r "$LAUNCHER_FILE" ]; then
    echo "compare.sh: -L $LAUNCHER_FILE: no such readable file" >&2
    exit 2
  fi
  # shellcheck source=/dev/null
  source "$LAUNCHER_FILE"
fi
# SQZ_* settings in the environment reach Squeeze's ranks (and no other library's): the table
# names them, so a row is never read as Squeeze's defaults when it is not.
sqz_settings=$({ env | grep -E '^SQZ_' || true; } | sort | tr '\n' ' ' | sed 's/ $//')
[ -z "$sqz_settings" ] || SETTING="$SETTING; Squeeze ran with $sqz_settings"

# ---- Runs -------------------------------------------------------------------------------------------
store=$(mktemp -d "$OUT/store.XXXXXX")  # rendezvous files of gloo and torch
trap 'rm -rf "$store"' EXIT
load_before=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')  # the runs raise it themselves
manifest=$OUT/manifest.tsv
: >"$manifest"
sizes=(-b "$MINB" -e "$MAXB" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -c "$CHECK")
failed=0

wanted() { [[ ",$RUNS," == *",$1,"* ]]; }

# record NAME LIBRARY TRANSPORT STATUS: one manifest line for the table.
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$OUT/$1.json" "$4" >>"$manifest"; }

# run NAME LIBRARY TRANSPORT LAUNCHER CMD...: one bounded launch, its table into NAME.log.
run() {
  local name=$1 library=$2 transport=$3 launcher=$4
  shift 4
  local json=$OUT/$name.json log=$OUT/$name.log status=0 start=$SECONDS
  rm -f "$json"
  echo "compare.sh: $name: $*" >&2
  launch_ranks "$launcher" "$@" -J "$json" >"$log" 2>&1 || status=$?
  if ((status == 0)) && [ -s "$json" ]; then
    echo "compare.sh: $name: done in $((SECONDS - start)) s" >&2
    record "$name" "$library" "$transport" ok
  else
    ((status != 0)) || status="no JSON"
    echo "compare.sh: $name: FAILED (status $status) after $((SECONDS - start)) s; see $log:" >&2
    tail -n 5 "$log" | sed 's/^/    /' >&2
    record "$name" "$library" "$transport" "FAILED (status $status, see $log)"
    failed=1
  fi
}

skip() {  # NAME LIBRARY TRANSPORT REASON
  echo "compare.sh: $1: skipped: $4" >&2
  record "$1" "$2" "$3" "skipped: $4"
}

# One round: every wanted run once. NAME.json/NAME.log, or NAME.rK.* in round K of several.
run_round() {
sfx=
((ROUNDS == 1)) || sfx=.r$1
# Gloo's file store refuses keys an earlier run left: each round rendezvouses in its own folder.
rstore=$store/round$1
mkdir -p "$rstore"
sqz_perf=$BUILD/perf/sqz-allreduce-perf
sqz_perf_reason=
if [ ! -x "$sqz_perf" ]; then
  sqz_perf_reason="$sqz_perf not built"
# Not `| grep -q`: it exits at the first match, and under pipefail the help's SIGPIPE would
# fail the test (it did, in one round of a lab run).
elif ! "$sqz_perf" -h 2>&1 | grep -- '-J' >/dev/null; then
  sqz_perf_reason="$sqz_perf has no -J (JSON) option"
fi
for variant in squeeze squeeze-tcp; do
  wanted "$variant" || continue
  transport=shm,tcp env=()
  [ "$variant" = squeeze ] || transport=tcp env=(env SQZ_TRANSPORT=tcp)
  if [ -n "$sqz_perf_reason" ]; then
    skip "$variant$sfx" squeeze "$transport" "$sqz_perf_reason"
  else
    run "$variant$sfx" squeeze "$transport" squeeze "${env[@]}" "$sqz_perf" "${sizes[@]}"
  fi
done

if wanted gloo; then
  gloo_perf=$BUILD/perf/compare/gloo-allreduce-perf
  if [ -x "$gloo_perf" ]; then
    run "gloo$sfx" gloo tcp gloo "$gloo_perf" --store "$rstore" -A all "${sizes[@]}"
  else
    skip "gloo$sfx" gloo tcp "$gloo_perf not built (libgloo-dev missing, or -Dcompare=disabled)"
  fi
fi

mpi_perf=$BUILD/perf/compare/mpi-allreduce-perf
for variant in mpi mpi-tcp; do
  wanted "$variant" || continue
  # Named transports, as Squeeze's two runs: shared memory (what Open MPI picks on one host),
  # then TCP, whose listening socket Open MPI binds to every address (traffic stays on lo).
  transport=shm env=(env 'OMPI_MCA_btl=self,vader')
  [ "$variant" = mpi ] || transport=tcp env=(env 'OMPI_MCA_btl=self,tcp')
  if [ ! -x "$mpi_perf" ]; then
    skip "$variant$sfx" openmpi "$transport" "$mpi_perf not built (libopenmpi-dev missing, or -Dcompare=disabled)"
  elif [ -z "$MPIRUN" ]; then
    skip "$variant$sfx" openmpi "$transport" "mpirun not found (openmpi-bin)"
  else
    run "$variant$sfx" openmpi "$transport" mpi "${env[@]}" "$mpi_perf" "${sizes[@]}"
  fi
done

if wanted torch; then
  if "$PY" -c 'import torch.distributed as d; assert d.is_available()' 2>/dev/null; then
    run "torch$sfx" torch-gloo tcp torch "$PY" "$here/torch_allreduce_perf.py" --store "$rstore" "${sizes[@]}"
  else
    skip "torch$sfx" torch-gloo tcp "python3-torch with torch.distributed is not installed for $PY"
  fi
fi

}
for round in $(seq 1 "$ROUNDS"); do
  ((ROUNDS == 1)) || echo "compare.sh: round $round of $ROUNDS" >&2
  run_round "$round"
done

# ---- The combined table -----------------------------------------------------------------------------
if [ ! -x "$PY" ]; then
  echo "compare.sh: $PY is needed for the table; the JSON files are in $OUT" >&2
  exit 1
fi
"$PY" - "$manifest" "$NRANKS" "$OUT/table.md" "$load_before" "$ROUNDS" "$SETTING" <<'EOF'
import json, statistics, sys

manifest, nranks, table_path, load, rounds, setting = sys.argv[1:7]
rounds = int(rounds)

def human(n):  # 16777216 -> 16M, as the sizes are given
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            v = n / scale
            return ("%d" % v if v == int(v) else "%.3g" % v) + unit
    return str(n)

runs, rows, notes = [], [], []
for line in open(manifest):
    name, library, transport, path, status = line.rstrip("\n").split("\t")
    if status != "ok":
        notes.append("- %s (%s, %s): %s" % (name, library, transport, status))
        continue
    try:
        with open(path) as f:
            doc = json.load(f)
        if doc.get("format") != "squeeze-perf/1":
            raise ValueError("format is %r, not squeeze-perf/1" % doc.get("format"))
        got = [r for r in doc["rows"] if r.get("inplace")]
        if not got:
            raise ValueError("no in-place rows")
    except (OSError, ValueError, KeyError, TypeError) as e:
        notes.append("- %s (%s, %s): unreadable JSON %s: %s" % (name, library, transport, path, e))
        continue
    for r in got:
        rows.append({"size": r["size"], "library": library, "transport": transport,
                     "algo": r.get("algo") or "?", "time_us": r["time_us"], "busbw": r["busbw"],
                     "wrong": r.get("wrong")})

# Several rounds: one row per (size, library, transport, algo), the medians over its rounds
# (a row with a wrong element in any round keeps the count). Squeeze's tuner may pick another
# algorithm in another round: its rounds stay one row, whose algo lists every pick.
merged = {}
for r in rows:
    algo = r["algo"] if r["library"] != "squeeze" else ""
    merged.setdefault((r["size"], r["library"], r["transport"], algo), []).append(r)
rows = []
for (size, library, transport, _), group in merged.items():
    wrong = [g["wrong"] for g in group if g["wrong"]]
    algo = "/".join(dict.fromkeys(g["algo"] for g in group))
    rows.append({"size": size, "library": library, "transport": transport, "algo": algo,
                 "time_us": statistics.median(g["time_us"] for g in group),
                 "busbw": statistics.median(g["busbw"] for g in group),
                 "wrong": sum(wrong) if wrong else group[0]["wrong"], "n": len(group)})

out = []
out.append("| size | library | transport | algo | time (us) | busbw (GB/s) | vs best |")
out.append("|---:|---|---|---|---:|---:|---|")
for size in sorted({r["size"] for r in rows}):
    group = sorted((r for r in rows if r["size"] == size), key=lambda r: r["time_us"])
    best = group[0]["time_us"]
    for r in group:
        rel = "**best**" if r["time_us"] == best else "%.2fx time" % (r["time_us"] / best)
        if r["wrong"]:
            rel += ", %d WRONG" % r["wrong"]
        out.append("| %s | %s | %s | %s | %.0f | %.3f | %s |" % (
            human(size), r["library"], r["transport"], r["algo"], r["time_us"], r["busbw"], rel))
out.append("")
out.append("Where: %s." % setting)
out.append("float32 sum, %s ranks, in-place calls (Gloo and torch have no out-of-place all-reduce); "
           "time = mean per call, max over ranks; busbw = algbw * 2(n-1)/n; load average before "
           "the runs: %s." % (nranks, load))
if rounds > 1:
    out.append("Medians of %d rounds (each round runs every library once, in this order: %s)."
               % (rounds, ", ".join(dict.fromkeys(r["library"] for r in rows))))
    short = sorted("%s %s %s" % (human(r["size"]), r["library"], r["algo"]) for r in rows
                   if r["n"] < rounds)
    if short:
        out.append("Fewer rounds (a run failed or was skipped): " + "; ".join(short) + ".")
if notes:
    out.append("")
    out.extend(notes)
text = "\n".join(out) + "\n"
sys.stdout.write(text)
with open(table_path, "w") as f:
    f.write(text)
if not rows:
    sys.exit(1)
EOF
exit "$failed"
