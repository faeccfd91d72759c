#!/usr/bin/env bash
# run.sh [OUT_DIR] (in the repository: scripts/gpu-bundle-run.sh, which gpu-bundle.sh copies into
# the bundle as run.sh): Squeeze's GPU checks from a bundle written by scripts/gpu-bundle.sh, on a
# GPU machine that has a driver and a CUDA runtime (a CUDA install's lib64, or PyTorch's
# nvidia/*/lib wheels) but no build tools. OUT_DIR: the first argument, or $OUT, or ./gpu-run.
#
# Runs, each under a time limit and in parallel where independent (16 cores):
#   phase 1 (up to 270 s): every tests/gpu binary (collective_test and compress_test in 4 gtest
#     shards each), twice side by side: with CUDA's default hardware work queues per process
#     (CUDA_DEVICE_MAX_CONNECTIONS unset: 8) and with 32; the NCCL shim's program on device
#     buffers (nccl_shim_test.sh sqzrun and codec 120 s, its ranks started by sqzrun: with the
#     default, 32 and 1; initall 60 s), torch's ProcessGroupNCCL over the shim (LD_PRELOAD;
#     check/ddp_check.py at 2 and 4 ranks, dense and with SQZ_NCCL_CODEC=1M-inf=topk:ratio=0.01,
#     120 s each; dense also with 32) and the squeeze package built against this node's torch
#     (check/build-python-ext.sh into BUNDLE/python, 240 s), then its torch tests on CUDA tensors
#     (SQZ_TEST_DEVICE=cuda: test_torch_backend.py and test_hook.py, 180 s each);
#   phase 2 (up to 120 s + 4 x 60 s + 90 s): sqz-codec-bench -d cuda at 256K, 1M, 16M and 64M
#     floats, alone on the GPU: first every process still alive from an earlier step is stopped (the log
#     and the summary's "leftovers" row say which); then sqz-allreduce-perf -d cuda -b 1K -e 256M
#     alone, at 1 rank and at 2 (the stream all-reduce), and sqz-sendrecv-perf at 2 (the stream
#     sends and receives); torch.topk at 64M floats (check/topk_ref.py, the reference top-k is
#     held to); last, ncu over the codec bench at 16M floats (90 s; a SKIP where the
#     node has no ncu or keeps its counters to administrators);
#   phase 3 (up to 195 s): sqzrun -n N sqz-allreduce-perf -d cuda -b 1K -e 16M -f 4 -c 1 at
#     N = 1, 2, 4 over SQZ_TRANSPORT=cuda_ipc, shm and tcp: seven lanes side by side, each dense
#     (60 s) then -z topk:ratio=0.01, -z int8, -z powersgd:rank=4 (45 s each); beside them one
#     lane for each of CUDA_DEVICE_MAX_CONNECTIONS=32 and =1: dense over cuda_ipc at 2 and 4
#     ranks, shm at 4 and tcp at 4 (45 s each);
#   phase 4: ms per DDP step (check/ddp_check.py --ddp-only, one run at a time, 60 s each):
#     torch's NCCL on 1 rank (a reference), the shim and the squeeze backend on 1, 2 and 4; then
#     torch references (device copy; torch.topk where phase 2 did not run). torch's own numbers
#     are never failures;
#   last, issue 47's figures (check/gpu-figures.py): each goal, what the logs measured and
#     whether it is met, first among summary.md's sections (never a failure).
# RUN_CONNS (default "32 1") lists the CUDA_DEVICE_MAX_CONNECTIONS variants: 1 is used only where
# every rank is a process of its own that sqzrun started (the one-process tests hold several
# ranks' streams, which one queue serializes), the others everywhere above; "" runs none.
# A step past its limit is not just killed: first every thread of every process of the step (its
# session: the ranks, the launcher, the test script) is printed with
# `cuda-gdb -batch -ex 'thread apply all bt' -p PID` (gdb where there is no cuda-gdb), each
# within RUN_BT_TIMEOUT_S (default 25) and the step's all within RUN_BT_TOTAL_S (default 60),
# into logs/<the step's log>.bt; then its processes get SIGTERM, and SIGKILL 10 s later.
# Every step's log is in OUT_DIR/logs/, summary.md has a table of the steps (status and seconds)
# and the benchmark tables, and after every step both are packed into OUT_DIR/gpu-logs.tar.gz, so
# a run stopped from outside still leaves them. The whole run stays within RUN_BUDGET_S seconds
# (default 540): a step that no longer fits is SKIPped. RUN_PHASES (default "1 2 3 4") picks
# phases. RUN_BENCH_SERIAL=1 runs phase 3's lanes one after another (cleaner timings, longer).
# RUN_TEST_LIMIT_S (default 240) is each tests/gpu step's limit. PYTHON names the interpreter for
# the torch steps; SQZ_CUDA_LIB_DIRS (colon-separated) overrides where cudart and cuBLAS are
# looked for. A bundle of a CUDA stand-in build (gpu-bundle.sh --standin) runs the same steps on
# the emulated GPU without nvidia-smi: a dry run of this script on a machine without a GPU.
# Exits 1 when a step failed or timed out (or no GPU was usable), 0 otherwise.
set -uo pipefail
B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BB=$B/build
out=${1:-${OUT:-./gpu-run}}
mkdir -p "$out" || exit 2
O=$(cd "$out" && pwd)
L=$O/logs S=$O/.steps
if [ -d "$L" ] && [ ! -d "$S" ]; then
  echo "run.sh: $L exists and is not from an earlier run.sh: pick another OUT_DIR" >&2
  exit 2
fi
rm -rf "$L" "$S" "$O/summary.md" "$O/gpu-logs.tar.gz"
mkdir -p "$L" "$S" || exit 2
BUDGET=${RUN_BUDGET_S:-540}
PHASES=" ${RUN_PHASES:-1 2 3 4} "
CONNS=${RUN_CONNS-32 1}
TEST_LIMIT=${RUN_TEST_LIMIT_S:-240}
BT_LIMIT=${RUN_BT_TIMEOUT_S:-25} BT_TOTAL=${RUN_BT_TOTAL_S:-60}
T0=$SECONDS
# shellcheck source=/dev/null
. "$B/bundle.env"
ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}

# ---- summary and packing ------------------------------------------------------------------
# Each step leaves $S/KEY.row (its line of the table), maybe KEY.perf (a benchmark table row),
# KEY.sec (a Markdown section) and KEY.bad (it failed); summary.md is rebuilt from them.
write_summary() {
  local f n_bad
  n_bad=$(find "$S" -name '*.bad' | wc -l)
  {
    printf '# Squeeze GPU run (bundle)\n\n'
    printf -- '- date: %s; host: %s; elapsed: %ss of a %ss budget\n' \
      "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(hostname)" $((SECONDS - T0)) "$BUDGET"
    printf -- '- bundle: commit %s, built %s on %s (%s)\n' "$BUNDLE_COMMIT" "$BUNDLE_DATE" \
      "$BUNDLE_HOST" "$BUNDLE_NVCC"
    printf -- '- GPU: %s\n' "$(cat "$S/gpu.txt" 2>/dev/null || echo unknown)"
    printf -- '- CUDA libraries from: %s\n' "$(cat "$S/cudalibs.txt" 2>/dev/null || echo '?')"
    printf -- '- torch: %s\n' "$(cat "$S/torch.txt" 2>/dev/null || echo '?')"
    printf -- '- result: %s\n' "$([ "$n_bad" = 0 ] && echo PASS || echo "FAIL ($n_bad steps)")"
    printf '\n| step | status | s | note |\n|---|---|---|---|\n'
    for f in "$S"/*.row; do [ -e "$f" ] && cat "$f"; done
    if compgen -G "$S/*.perf" >/dev/null; then
      printf '\n## sqz-allreduce-perf -d cuda -b 1K -e 16M (alone: 256M) -f 4 -c 1: the largest size, and the average\n\n'
      printf '| SQZ_TRANSPORT | ranks | codec | busbw out-of-place (GB/s) | busbw in-place (GB/s) |'
      printf ' avg busbw (GB/s) | #wrong | status |\n|---|---|---|---|---|---|---|---|\n'
      cat "$S"/*.perf
      [ "${RUN_BENCH_SERIAL:-0}" = 1 ] ||
        printf '\nThe lanes ran side by side (one GPU, 16 cores): correctness first; timings are rough.\n'
    fi
    if compgen -G "$S/*.ddp" >/dev/null; then
      printf '\n## DDP: ms per step (check/ddp_check.py N 30 --ddp-only: the MLP 1024-2048-1024,'
      printf ' batch 64, all ranks on the one GPU; one run at a time)\n\n'
      printf '| process group | ranks | ms/step (rank 0) | status |\n|---|---|---|---|\n'
      cat "$S"/*.ddp
    fi
    for f in "$S"/*.sec; do [ -e "$f" ] && cat "$f"; done
    printf '\nLogs: logs/ (and gpu-logs.tar.gz).\n'
  } >"$O/.summary.md.$BASHPID"
  mv -f "$O/.summary.md.$BASHPID" "$O/summary.md"
}
pack_now() {
  write_summary
  tar -czf "$O/.gpu-logs.tar.gz.$BASHPID" -C "$O" logs summary.md 2>/dev/null
  mv -f "$O/.gpu-logs.tar.gz.$BASHPID" "$O/gpu-logs.tar.gz"
}
pack() {  # the lanes run side by side: one packer at a time
  if command -v flock >/dev/null; then
    (flock 9 && pack_now) 9>"$O/.lock"
  else
    pack_now
  fi
}
# record KEY NAME STATUS SECONDS NOTE: a line of the table; FAIL and TIMEOUT make the run fail.
record() {
  local note=${5//|/\\|}
  note=${note//$'\n'/ }
  printf '| %s | %s | %s | %s |\n' "$2" "$3" "$4" "${note:0:300}" >"$S/$1.row"
  case $3 in FAIL | TIMEOUT) touch "$S/$1.bad" ;; *) rm -f "$S/$1.bad" ;; esac
  printf '== %-44s %-7s %4ss  %s\n' "$2" "$3" "$4" "${note:0:160}"
  pack
}
# section KEY TITLE LOG [MAXLINES]: a Markdown section with the log's first lines.
section() {
  local max=${4:-80} lines
  lines=$(wc -l <"$3" 2>/dev/null || echo 0)
  {
    printf '\n## %s\n\n```\n' "$2"
    head -n "$max" "$3"
    [ "$lines" -gt "$max" ] && printf '... (%d more lines in logs/%s)\n' $((lines - max)) "${3##*/}"
    printf '```\n'
  } >"$S/$1.sec"
}
# clip LIMIT: prints LIMIT cut to what is left of the budget; fails when under 10 s are left.
clip() {
  local left=$((BUDGET - (SECONDS - T0) - 5))
  [ "$left" -ge 10 ] || return 1
  echo $(($1 < left ? $1 : left))
}
# ---- processes of a step: each step is a session of its own (setsid) ------------------------
SETSID=$(command -v setsid || true)
GDB=$(command -v cuda-gdb || command -v /usr/local/cuda/bin/cuda-gdb || command -v gdb || true)
# proc_table: "PID PPID SESSION" of every live (not zombie) process, from /proc (the node may
# have no ps); the command name in parentheses may hold spaces: the fields after its last ')'.
proc_table() {
  cat /proc/[0-9]*/stat 2>/dev/null |
    awk '{ pid = $1; sub(/^.*\) /, ""); if ($1 != "Z") print pid, $2, $4 }'
}
# step_procs PID...: the live processes of the steps started as PID (their sessions and their
# descendants), one a line, the step's own processes before the others.
step_procs() {
  proc_table | awk -v roots="$*" '
    BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) root[r[i]] = 1 }
    { pid[NR] = $1; ppid[$1] = $2; sid[$1] = $3 }
    END {
      for (i in pid) { p = pid[i]; if ((p in root) || (sid[p] in root)) keep[p] = 1 }
      do {
        more = 0
        for (i in pid) { p = pid[i]; if (!(p in keep) && (ppid[p] in keep)) { keep[p] = 1; more = 1 } }
      } while (more)
      for (p in keep) print p
    }' | sort -n
}
cmdline() { { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null | cut -c1-300; }
# backtraces LOG PID: every thread's backtrace of every process of the step PID (CUDA processes
# first), each by a debugger within BT_LIMIT s, all within BT_TOTAL s and the budget, into LOG.bt.
backtraces() {
  local bt=${1%.log}.bt root=$2 p t0 lim first=1 procs=() cuda=() other=()
  while read -r p; do
    if grep -q 'libcuda\.so\|libsqz-cuda-standin' "/proc/$p/maps" 2>/dev/null; then cuda+=("$p"); else other+=("$p"); fi
  done < <(step_procs "$root")
  procs=("${cuda[@]}" "${other[@]}")
  {
    echo "run.sh: ${#procs[@]} processes of the step at its limit (${#cuda[@]} with CUDA loaded):"
    for p in "${procs[@]}"; do echo "  pid $p: $(cmdline "$p")"; done
    echo "debugger: ${GDB:-none}; ptrace_scope: $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo '?'); uid $(id -u)"
  } >"$bt"
  [ -n "$GDB" ] || { echo "run.sh: no cuda-gdb or gdb on PATH: no backtraces" >>"$bt"; return; }
  t0=$SECONDS  # from the first attach: the first process always gets BT_LIMIT
  for p in "${procs[@]}"; do
    lim=$((BT_TOTAL - (SECONDS - t0)))
    if [ "$lim" -gt "$BT_LIMIT" ] || [ $first = 1 ]; then lim=$BT_LIMIT; fi
    first=0
    [ "$lim" -gt $((BUDGET - (SECONDS - T0) - 15)) ] && lim=$((BUDGET - (SECONDS - T0) - 15))
    if [ "$lim" -lt 2 ]; then
      echo "==== pid $p: not attached: no time left (RUN_BT_TOTAL_S=$BT_TOTAL, or the budget)" >>"$bt"
      continue
    fi
    {
      echo "==== pid $p: $(cmdline "$p")"
      echo "==== $GDB -batch -ex 'thread apply all bt' -p $p (within ${lim}s)"
      timeout -k 5 "$lim" "$GDB" -batch -ex 'thread apply all bt' -p "$p" </dev/null 2>&1
      echo "==== pid $p: debugger exit $?"
    } >>"$bt"
  done
}
# stop_procs PID...: SIGTERM to every process of those steps, SIGKILL to what is left after
# GRACE (default 10) seconds; prints what was killed ("PID term|kill CMDLINE"), one a line.
stop_procs() {
  local p i procs
  mapfile -t procs < <(step_procs "$@")
  [ ${#procs[@]} = 0 ] && return 0
  for p in "${procs[@]}"; do
    echo "$p term $(cmdline "$p")"
    kill -TERM "$p" 2>/dev/null
    kill -CONT "$p" 2>/dev/null  # one a debugger left stopped
  done
  for ((i = 0; i < ${GRACE:-10} * 5; i++)); do
    [ -z "$(step_procs "$@")" ] && return 0
    sleep 0.2
  done
  for p in $(step_procs "$@"); do
    echo "$p kill $(cmdline "$p")"
    kill -KILL "$p" 2>/dev/null
  done
  return 0
}
# watchdog KEY LIMIT LOG PID: when the step PID is still running after LIMIT seconds, writes
# its backtraces, stops it and leaves $S/KEY.timedout ("term", or "kill" when SIGKILL was needed).
watchdog() {
  local key=$1 limit=$2 log=$3 pid=$4 sp
  trap 'kill "$sp" 2>/dev/null; exit 0' TERM
  sleep "$limit" &
  sp=$!
  wait "$sp"
  trap - TERM
  kill -0 "$pid" 2>/dev/null || exit 0
  echo term >"$S/$key.timedout"
  backtraces "$log" "$pid"
  if stop_procs "$pid" | grep -q '^[0-9]* kill '; then echo kill >"$S/$key.timedout"; fi
  echo "(run.sh: stopped after ${limit}s; backtraces of its processes in logs/$(basename "${log%.log}.bt"))" >>"$log"
}
# run KEY NAME LIMIT LOG COMMAND...: runs it as a session of its own under a watchdog (the limit
# clipped to the budget), output to LOG; sets rc (124 when stopped at the limit, 137 when it
# took SIGKILL), secs and lim. Returns 1 (after recording SKIP) when out of time.
run() {
  local key=$1 name=$2 limit=$3 log=$4 t0=$SECONDS wd
  shift 4
  if ! lim=$(clip "$limit"); then
    record "$key" "$name" SKIP 0 "no time left in the ${BUDGET}s budget"
    return 1
  fi
  printf '| %s | RUNNING | | started at %ss, limit %ss |\n' "$name" $((SECONDS - T0)) "$lim" >"$S/$key.row"
  rm -f "$S/$key.timedout"
  if [ -n "$SETSID" ]; then
    "$SETSID" "$@" >"$log" 2>&1 </dev/null &
  else
    "$@" >"$log" 2>&1 </dev/null &
  fi
  local pid=$!
  echo "$pid" >"$S/$key.pid"  # for on_signal
  echo "$pid $key" >>"$S/sessions"  # for the sweep before the codec bench
  watchdog "$key" "$lim" "$log" "$pid" &
  wd=$!
  wait "$pid"
  rc=$?
  if [ -e "$S/$key.timedout" ]; then
    wait "$wd"
    rc=124
    [ "$(cat "$S/$key.timedout")" = kill ] && rc=137
  else
    kill -TERM "$wd" 2>/dev/null
    wait "$wd" 2>/dev/null
  fi
  rm -f "$S/$key.pid"
  secs=$((SECONDS - t0))
  return 0
}
# kill_leftovers KEY: before a step that needs the GPU to itself, stops every process still
# alive from an earlier step, and records which (WARN) or that there were none.
kill_leftovers() {
  local key=$1 name="leftovers of earlier steps" sessions=() keys log=$L/leftovers.log killed
  [ -f "$S/sessions" ] && mapfile -t sessions < <(awk '{print $1}' "$S/sessions")
  {
    echo "run.sh: processes still alive from earlier steps, before the codec bench ($((SECONDS - T0))s):"
    if command -v nvidia-smi >/dev/null; then
      echo "GPU compute processes (nvidia-smi):"
      timeout 20 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1
    fi
  } >"$log"
  killed="" LEFTOVERS="" keys=""
  if [ ${#sessions[@]} -gt 0 ]; then
    # Which steps they belong to (their session's key), before they are gone.
    keys=$(proc_table | awk -v alive=" $(step_procs "${sessions[@]}" | tr '\n' ' ') " '
      NR == FNR { key[$1] = $2; next }
      index(alive, " " $1 " ") && ($3 in key) { print key[$3] }' "$S/sessions" - | sort -u | paste -sd, -)
    killed=$(GRACE=5 stop_procs "${sessions[@]}")
  fi
  if [ -z "$killed" ]; then
    echo "none" >>"$log"
    record "$key" "$name" PASS 0 "none alive before the codec bench"
  else
    echo "$killed" >>"$log"
    LEFTOVERS="killed $(awk '{print $1}' <<<"$killed" | sort -u | wc -l) leftover processes of earlier steps${keys:+ ($keys)}, logs/leftovers.log"
    echo "run.sh: $LEFTOVERS"
    record "$key" "$name" WARN 0 \
      "killed $(awk '{print $1}' <<<"$killed" | sort -u | wc -l) before the codec bench${keys:+ (steps $keys)}: $(awk '{$1 = $1 " (" $2 ")"; $2 = ""; print}' <<<"$killed" | head -4 | paste -sd';' -)"
  fi
}
# Stopped from outside: no new steps, the running ones stopped (each step's whole session), and
# what there is packed.
on_signal() {
  trap - TERM INT
  local f pids=()
  # shellcheck disable=SC2046
  kill $(jobs -p) 2>/dev/null
  for f in "$S"/*.pid; do [ -e "$f" ] && pids+=("$(cat "$f")"); done
  [ ${#pids[@]} = 0 ] || GRACE=3 stop_procs "${pids[@]}" >/dev/null
  for f in "$S"/*.row; do
    if grep -q '| RUNNING |' "$f"; then
      sed -i 's/| RUNNING |/| STOPPED |/' "$f"
      touch "${f%.row}.bad"
    fi
  done
  pack
  exit 143
}
trap on_signal TERM INT

# ---- probe: the GPU, the CUDA libraries, python with torch ------------------------------------
probe=$L/probe.log
{
  echo "run.sh in $B, output in $O"
  date -u; uname -a; nproc; free -g 2>/dev/null; grep PRETTY /etc/os-release 2>/dev/null
  echo "bundle: $BUNDLE_COMMIT, $BUNDLE_DATE, $BUNDLE_NVCC; needs $BUNDLE_CUDA_LIBS"
} >"$probe" 2>&1
gpu_ok=0
if [ "${BUNDLE_STANDIN:-0}" = 1 ]; then  # gpu-bundle.sh --standin: a dry run, no GPU
  echo "the CUDA stand-in (emulated GPU; a dry run)" >"$S/gpu.txt"
  record 00-gpu gpu PASS 0 "the CUDA stand-in: an emulated GPU, a dry run of run.sh"
  gpu_ok=1
elif smi=$(timeout 30 nvidia-smi -L 2>&1) && [ -n "$smi" ]; then
  gpu_desc=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
    --format=csv,noheader 2>/dev/null | head -1)
  printf '%s\n' "${gpu_desc:-$smi}" >"$S/gpu.txt"
  { echo "$smi"; timeout 30 nvidia-smi; } >>"$probe" 2>&1
  record 00-gpu gpu PASS 0 "${gpu_desc:-$smi}"
  gpu_ok=1
else
  why=${smi:-nvidia-smi -L listed nothing}
  echo "no GPU: $why" >>"$probe"
  echo "none ($why)" >"$S/gpu.txt"
  record 00-gpu gpu FAIL 0 "no usable GPU: $(tail -1 <<<"$why")"
fi

# Where cudart and cuBLAS are: SQZ_CUDA_LIB_DIRS, then the nvidia/*/lib wheels of any python3
# (PyTorch's: what torch itself loads on this machine), then a CUDA install.
pythons=()
for p in "${PYTHON:-}" python3 /opt/*/.venv/bin/python3 /opt/*/venv/bin/python3 /opt/*/bin/python3 \
  /opt/conda/bin/python3 /usr/local/bin/python3 /usr/bin/python3 "$HOME"/.venv/bin/python3; do
  if [ -z "$p" ] || ! command -v "$p" >/dev/null 2>&1; then continue; fi
  p=$(command -v "$p")
  [[ " ${pythons[*]} " == *" $p "* ]] || pythons+=("$p")
done
cand=()
IFS=: read -r -a cand <<<"${SQZ_CUDA_LIB_DIRS:-}"
sites=$(for p in "${pythons[@]}"; do
  timeout 30 "$p" -c 'import site
print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null
done; ls -d /opt/*/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages 2>/dev/null)
while IFS= read -r sp; do
  for d in "$sp"/nvidia/*/lib; do [ -d "$d" ] && cand+=("$d"); done
done <<<"$sites"
for d in ${CUDA_HOME:+"$CUDA_HOME"/lib64} /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 \
  /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/targets/x86_64-linux/lib; do
  [ -d "$d" ] && cand+=("$d")
done
cuda_dirs=() missing=()
for so in $BUNDLE_CUDA_LIBS; do
  found=""
  for d in "${cand[@]}"; do
    if [ -e "$d/$so" ]; then found=$d; break; fi
  done
  if [ -z "$found" ]; then missing+=("$so"); continue; fi
  [[ " ${cuda_dirs[*]} " == *" $found "* ]] || cuda_dirs+=("$found")
done
# The driver's libcuda.so.1 where a container puts it beside the system's.
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/wsl/lib; do
  [ -e "$d/libcuda.so.1" ] && cuda_dirs+=("$d")
done
printf '%s\n' "${cuda_dirs[*]:-none}" >"$S/cudalibs.txt"
ldpath=$B/lib
for d in "${cuda_dirs[@]}"; do ldpath+=":$d"; done
export LD_LIBRARY_PATH=$ldpath${ORIG_LD_LIBRARY_PATH:+:$ORIG_LD_LIBRARY_PATH}
export SQZ_SOCKET_IFNAME=lo SQZ_TIMEOUT_MS=60000 SQZ_CODEC_AUTO_DENSE=0
unset SQZ_TRANSPORT
{
  echo "looked for $BUNDLE_CUDA_LIBS in: ${cand[*]}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  env | grep -E '^(SQZ_|NCCL_|CUDA_|UCX_)' | sort
  echo "--- sqz-info"; timeout 30 "$BB"/src/info/sqz-info 2>&1 | head -150
} >>"$probe" 2>&1
for f in "$BB"/libsqueeze.so.0 "$BB"/src/nccl_shim/libsqueeze-nccl.so.2 "$BB"/src/launcher/sqzrun \
  "$BB"/perf/* "$BB"/tests/gpu/*_test; do
  echo "--- ldd ${f#"$B"/}"; ldd "$f" 2>&1
done >"$L/ldd.log"
notfound=$(grep '=> not found' "$L/ldd.log" | awk '{print $1}' | sort -u | tr '\n' ' ')
if [ ${#missing[@]} = 0 ] && [ -z "$notfound" ]; then
  record 01-libraries "libraries (cudart, cuBLAS)" PASS 0 "${cuda_dirs[*]}"
else
  record 01-libraries "libraries (cudart, cuBLAS)" FAIL 0 \
    "not found: ${missing[*]} ${notfound}(set SQZ_CUDA_LIB_DIRS); searched ${cand[*]:-nothing}"
fi
torch_py="" torch_why="no python3 found"
for p in "${pythons[@]}"; do
  if why=$(LD_LIBRARY_PATH=$ORIG_LD_LIBRARY_PATH timeout 60 "$p" -c 'import sys, torch
if not torch.cuda.is_available():
    sys.exit("torch %s sees no CUDA device" % torch.__version__)
try:
    nccl = torch.cuda.nccl.version()
except Exception as e:
    nccl = "? (%s)" % e
print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", nccl)' 2>&1); then
    torch_py=$p
    echo "$p: $why" >>"$probe"
    break
  fi
  torch_why="$p: $(tail -1 <<<"${why:-did not start}")"
done
if [ -n "$torch_py" ]; then echo "$torch_py: $(tail -1 <<<"$why")"; else echo "none: $torch_why"; fi >"$S/torch.txt"
pack

# ---- the steps ------------------------------------------------------------------------------
# conns N: the steps this (sub)shell starts from now on run with CUDA_DEVICE_MAX_CONNECTIONS=N (a
# GPU's hardware work queues per process; CUDA's default is 8); their names say so (CNAME) and
# their logs end in -cN (CTAG). Without it: the node's setting (unset: CUDA's default).
CTAG="" CNAME=""
conns() { export CUDA_DEVICE_MAX_CONNECTIONS=$1; CTAG=-c$1 CNAME=" [CUDA_DEVICE_MAX_CONNECTIONS=$1]"; }
# gtest_step KEY NAME BINARY [SHARD TOTAL]: one GPU test binary (or one shard of it).
gtest_step() {
  local key=$1 name=$2$CNAME bin=$3 shard=${4:-} total=${5:-} st note ok nfail nskip names last
  local log=$L/test-$2$CTAG.log
  local shard_env=()
  [ -n "$total" ] && shard_env=(GTEST_TOTAL_SHARDS="$total" GTEST_SHARD_INDEX="$shard")
  run "$key" "$name" "$TEST_LIMIT" "$log" env "${shard_env[@]}" "$bin" \
    --gtest_output="xml:${log%.log}.xml" || return
  ok=$(grep -c '^\[       OK \]' "$log")
  nfail=$(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log")
  nskip=$(grep -cE '^\[  SKIPPED \] .*\([0-9]+ ms\)$' "$log")
  names=$(grep -E '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log" | sed 's/^\[  FAILED  \] //; s/ (.*//' |
    head -3 | paste -sd, -)
  note="$ok passed, $nfail failed, $nskip skipped${names:+; failed: $names}"
  case $rc in
    0) st=PASS ;;
    77) st=SKIP note=$(grep -m1 '^SKIP' "$log" || tail -1 "$log") ;;
    124 | 137)
      st=TIMEOUT
      last=$(grep '^\[ RUN      \]' "$log" | tail -1 | sed 's/^\[ RUN      \] //')
      note="stopped at ${lim}s in ${last:-?}; $note" ;;
    *) st=FAIL note="exit $rc; $note" ;;
  esac
  record "$key" "$name" $st "$secs" "$note"
  if [ $st = FAIL ] || [ $st = TIMEOUT ]; then
    grep -E -A6 'Failure|FAILED|WARN|error' "$log" | head -60 >"${log%.log}.failures"
    section "$key" "$name: $st (failures and warnings; full log logs/${log##*/})" \
      "${log%.log}.failures" 60
  fi
}
# first_message LOG: the line that says most about a failure.
first_message() {
  local p line
  for p in '^sqz-[a-z-]+: ' 'SQZ (WARN|ERROR)' 'FAIL|refus|not supported|differs|error|Error'; do
    line=$(grep -m1 -E "$p" "$1")
    [ -n "$line" ] && break
  done
  [ -n "$line" ] || line=$(grep -v '^\s*$' "$1" | tail -1)
  echo "${line:0:220}"
}
codec_bench() {
  local log=$L/codec-bench.log
  kill_leftovers 29-leftovers
  # Issue 29's sweep, smallest first, so a step cut short keeps the sizes it finished.
  run 30-codec-bench "sqz-codec-bench -d cuda" 120 "$log" \
    "$BB/perf/sqz-codec-bench" -d cuda -s 256K,1M,16M,64M -r 3 || return
  [ -n "$LEFTOVERS" ] && echo "(run.sh: before this step: $LEFTOVERS)" >>"$log"
  case $rc in
    0) record 30-codec-bench "sqz-codec-bench -d cuda" PASS "$secs" "" ;;
    124 | 137) record 30-codec-bench "sqz-codec-bench -d cuda" TIMEOUT "$secs" \
      "stopped at ${lim}s after: $(grep -v '^\s*$' "$log" | tail -2 | head -1 | cut -c1-120)" ;;
    *) record 30-codec-bench "sqz-codec-bench -d cuda" FAIL "$secs" "exit $rc: $(first_message "$log")" ;;
  esac
  section 30-codec-bench "sqz-codec-bench -d cuda" "$log" 80
}
# ncu_look: Nsight Compute over the codec bench at 16M floats (the codecs whose kernels were
# slowest on the H100: encode with feedback, top-k and DGC selection, a quantizer's decode-add),
# one summary line per kernel: its duration and how near it runs to the memory and compute
# limits (issue 47's "an ncu look at the slowest kernel"). Never a failure of the bundle: a node
# without ncu, or one that keeps the counters to its administrators, is a SKIP that says so.
ncu_look() {
  local key=38-ncu name="ncu: the codec kernels at 16M floats" log=$L/ncu-codec-kernels.log
  if ! command -v ncu >/dev/null 2>&1; then
    record "$key" "$name" SKIP 0 "no ncu on PATH"
    return
  fi
  run "$key" "$name" 90 "$log" ncu --section SpeedOfLight --print-summary per-kernel \
    --launch-count 150 "$BB/perf/sqz-codec-bench" -d cuda -s 16M -r 1 -z int8 -z fp16 \
    -z topk:ratio=0.01 -z dgc || return
  if [ "$rc" = 0 ] && grep -q 'Duration' "$log"; then
    record "$key" "$name" PASS "$secs" "$(grep -c '^  [a-zA-Z_].*(' "$log") kernels summarized"
  else
    record "$key" "$name" SKIP "$secs" "exit $rc: $(grep -m1 -iE 'ERR_|error' "$log" | cut -c1-150)"
  fi
  section "$key" "$name" "$log" 200
}
# shim_step KEY CASE LIMIT: tests/nccl_shim/nccl_shim_test.sh CASE over the bundled program.
shim_step() {
  local key=$1 c=$2 log=$L/nccl-shim-$2$CTAG.log name="NCCL shim: nccl_program $2$CNAME"
  # The script's own time limits ten times longer: the step's limit comes first (backtraces).
  run "$key" "$name" "$3" "$log" env NCCL_SHIM_TIMEOUT_FACTOR=10 \
    bash "$B/check/nccl_shim_test.sh" "$c" "$BB/src/launcher/sqzrun" \
    "$BB/tests/nccl_shim/nccl_program" "$BB/src/nccl_shim" || return
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    record "$key" "$name" TIMEOUT "$secs" "stopped at ${lim}s: $(first_message "$log")"
  elif [ "$rc" != 0 ]; then
    record "$key" "$name" FAIL "$secs" "exit $rc: $(first_message "$log")"
  elif [ "$c" = sqzrun ] && ! grep -q 'device buffers' "$log"; then
    record "$key" "$name" FAIL "$secs" "ran on host buffers: no GPU seen"
  else
    record "$key" "$name" PASS "$secs" "$(grep -m1 -o '[0-9]* ranks, [a-z]* buffers' "$log")"
  fi
  section "$key" "$name" "$log" 40
}
# torch_result KEY NAME LOG: records a torch step by its exit status. The note: rank 0's DDP line
# (ddp_check.py) or else the log's last line; on failure the first error, WRONG or SKIP line.
torch_result() {
  local key=$1 name=$2 log=$3
  case $rc in
    0) record "$key" "$name" PASS "$secs" \
      "$(grep -m1 -o 'rank 0: .*DDP [0-9]* steps.*' "$log" || grep -v '^\s*$' "$log" | tail -1)" ;;
    124 | 137) record "$key" "$name" TIMEOUT "$secs" "stopped at ${lim}s: $(first_message "$log")" ;;
    *) record "$key" "$name" FAIL "$secs" "exit $rc: $(grep -m1 -E 'undefined symbol|Error|assert|WRONG|FAIL|SKIP|failed' "$log" || tail -1 "$log")" ;;
  esac
  section "$key" "$name" "$log" 60
}
# torch_shim KEY N [CODEC]: torch's ProcessGroupNCCL over the shim (LD_PRELOAD), N ranks on the
# one GPU, dense or with SQZ_NCCL_CODEC=CODEC: check/ddp_check.py's collectives, DDP, reference.
torch_shim() {
  local key=$1 n=$2 codec=${3:-} tag=dense envs=(LD_PRELOAD="$BB/src/nccl_shim/libsqueeze-nccl.so.2")
  if [ -n "$codec" ]; then
    tag=${codec#*=} tag=${tag%%:*}
    envs+=(SQZ_NCCL_CODEC="$codec")
  fi
  local name="torch ProcessGroupNCCL over the shim, $n ranks, $tag$CNAME" log=$L/torch-shim-n$n-$tag$CTAG.log
  if [ -z "$torch_py" ]; then record "$key" "$name" SKIP 0 "$torch_why"; return; fi
  run "$key" "$name" 120 "$log" env "${envs[@]}" "$torch_py" "$B/check/ddp_check.py" "$n" 20 || return
  torch_result "$key" "$name" "$log"
}
# torch_build: the squeeze package against this node's torch, into $B/python (not OUT_DIR: its
# modules are large). Leaves $S/python.ok when the backend takes CUDA tensors.
torch_build() {
  local key=20-torch-build name="squeeze package built against torch" log=$L/torch-build.log
  if [ -z "$torch_py" ]; then record $key "$name" SKIP 0 "$torch_why"; return 1; fi
  touch "$S/python.tried"
  run $key "$name" 240 "$log" env JOBS=8 bash "$B/check/build-python-ext.sh" --cuda "$B/src" "$BB" \
    "$B/python" "$torch_py" || return 1
  { echo "--- ldd"; ldd "$B"/python/squeeze/*.so; } >>"$log" 2>&1
  if [ "$rc" = 0 ] && grep -q '_torch_backend takes CUDA tensors' "$log"; then
    record $key "$name" PASS "$secs" "$(grep -m1 'takes CUDA' "$log")"
    touch "$S/python.ok"
  elif [ "$rc" = 0 ]; then
    record $key "$name" FAIL "$secs" "built, but without CUDA tensors: $(grep 'build-python-ext:' "$log" | tail -1)"
  else
    record $key "$name" FAIL "$secs" "exit $rc: $(grep -m1 -E 'error|build-python-ext:' "$log")"
  fi
  section $key "$name" "$log" 60
  [ -e "$S/python.ok" ]
}
# torch_test KEY SCRIPT: one of the package's torch tests (tests/python), on CUDA tensors.
torch_test() {
  local key=$1 script=$2 name="tests/python/$2, SQZ_TEST_DEVICE=cuda" log=$L/torch-${2%.py}.log
  run "$key" "$name" 180 "$log" env PYTHONPATH="$B/python" SQZ_TEST_DEVICE=cuda GLOO_SOCKET_IFNAME=lo \
    "$torch_py" "$B/src/tests/python/$script" || return
  torch_result "$key" "$name" "$log"
}
# ddp_time KEY LABEL N BACKEND [shim]: ms per DDP step, check/ddp_check.py --ddp-only, 30 steps;
# one run at a time (phase 4). LABEL's row goes into the DDP table; torch's NCCL is a reference.
ddp_time() {
  local key=$1 label=$2 n=$3 backend=$4 how=${5:-} log=$L/ddp-time-$1.log ms st envs=()
  local name="DDP ms/step: $label, $n ranks"
  if [ -z "$torch_py" ]; then record "$key" "$name" SKIP 0 "$torch_why"; return; fi
  case $how in
    shim) envs=(LD_PRELOAD="$BB/src/nccl_shim/libsqueeze-nccl.so.2") ;;
    ref) envs=(LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH") ;;
  esac
  if [ "$backend" = squeeze ]; then
    [ -e "$S/python.ok" ] || { record "$key" "$name" SKIP 0 "the package was not built"; return; }
    envs+=(PYTHONPATH="$B/python")
  fi
  run "$key" "$name" 60 "$log" env "${envs[@]}" "$torch_py" "$B/check/ddp_check.py" "$n" 30 \
    --backend "$backend" --ddp-only || return
  ms=$(sed -n 's/^rank 0: .* steps, \([0-9.]*\) ms\/step.*/\1/p' "$log" | head -1)
  if [ "$rc" = 0 ] && [ -n "$ms" ]; then
    st=PASS
  elif [ "$how" = ref ]; then
    st=SKIP  # torch's own NCCL is a reference: never a failure of the run
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    st=TIMEOUT
  else
    st=FAIL
  fi
  record "$key" "$name" $st "$secs" "${ms:+$ms ms/step (rank 0)}${ms:-exit $rc: $(first_message "$log")}"
  printf '| %s | %s | %s | %s |\n' "$label" "$n" "${ms:--}" "$st" >"$S/$key.ddp"
}
# allreduce KEY TRANSPORT N CODEC: one sqz-allreduce-perf run (TRANSPORT default: unset); AR_BIN
# names another perf binary of the same table (sqz-sendrecv-perf).
allreduce() {
  local key=$1 tr=$2 n=$3 codec=$4 tag=${4%%:*} limit=45 st note wrong last avg cells
  [ -z "$codec" ] && tag=dense limit=${ALLREDUCE_DENSE_LIMIT:-60}
  local bin=${AR_BIN:-sqz-allreduce-perf} what
  what=${bin#sqz-} what=${what%-perf}
  local max=${AR_MAX:-16M} alone=${AR_MAX:+ alone, to $AR_MAX}
  local name="$what $tr n=$n $tag$CNAME$alone"
  local log=$L/$what-$tr-n$n-$tag$CTAG${AR_MAX:+-$AR_MAX}.log
  local envs=(SQZ_TIMEOUT_MS="${BENCH_SQZ_TIMEOUT_MS:-20000}")
  [ "$tr" != default ] && envs+=(SQZ_TRANSPORT="$tr")
  local zopt=()
  [ -n "$codec" ] && zopt=(-z "$codec")
  # No sqzrun --timeout: at the limit the watchdog takes the ranks' backtraces before stopping them.
  run "$key" "$name" "$limit" "$log" env "${envs[@]}" "$BB/src/launcher/sqzrun" -n "$n" \
    "$BB/perf/$bin" -d cuda -b 1K -e "$max" -f 4 -c 1 -J "${log%.log}.json" \
    "${zopt[@]}" || return
  # A table row starts with the size and the count; #wrong is columns 9 (out of place) and
  # 13 (in place); -z adds its columns after them.
  # shellcheck disable=SC2016
  local rows='$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 14'
  wrong=$(awk "$rows"' {w += $9 + $13} END {print w + 0}' "$log")
  last=$(awk "$rows"' {row = $0} END {print row}' "$log")
  avg=$(sed -n 's/^# Avg bus bandwidth *: *\([^ ]*\).*/\1/p' "$log" | tail -1)
  if [ "$rc" = 0 ] && [ "$wrong" = 0 ] && grep -q '^# Out of bounds values : 0 OK' "$log"; then
    st=PASS note="#wrong 0; $(awk "$rows" "$log" | wc -l) sizes"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    st=TIMEOUT note="stopped at ${lim}s; #wrong $wrong; $(first_message "$log")"
  else
    st=FAIL note="exit $rc, #wrong $wrong: $(first_message "$log")"
  fi
  read -r -a cells <<<"$last"
  printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$tr${AR_BIN:+ ($what)}" "$n" "${codec:-dense}${CTAG:+ ($CUDA_DEVICE_MAX_CONNECTIONS queues)}" "${cells[7]:--}" \
    "${cells[11]:--}" "${avg:--}" "$wrong" "$st" >"$S/$key.perf"
  record "$key" "$name" $st "$secs" "$note"
}
ar_lane() {  # ar_lane INDEX TRANSPORT N: dense, then the three codecs
  local i=0 codec
  for codec in "" topk:ratio=0.01 int8 powersgd:rank=4; do
    allreduce "4$1-$i" "$2" "$3" "$codec"
    i=$((i + 1))
  done
}
conn_lane() {  # conn_lane INDEX N: dense over cuda_ipc at 2 and 4 ranks, shm and tcp at 4, 45 s each
  local cfg i=0
  conns "$2"
  for cfg in "cuda_ipc 2" "cuda_ipc 4" "shm 4" "tcp 4"; do
    # shellcheck disable=SC2086
    allreduce_dense45 "4$1-$i" $cfg
    i=$((i + 1))
  done
}
allreduce_dense45() { ALLREDUCE_DENSE_LIMIT=45 allreduce "$1" "$2" "$3" ""; }
torch_ref() {  # torch_ref KEY NAME LIMIT LOG LINE ARGS...: a reference point, never a failure
  local key=$1 name=$2 limit=$3 log=$4 line=$5  # LINE: a regex for the log's line to quote
  shift 5
  if [ -z "$torch_py" ]; then record "$key" "$name" SKIP 0 "$torch_why"; return; fi
  run "$key" "$name" "$limit" "$log" env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "$torch_py" "$@" || return
  if [ "$rc" = 0 ]; then
    record "$key" "$name" PASS "$secs" "reference: $(grep -m1 -E "$line" "$log" | cut -c1-150)"
  else
    record "$key" "$name" SKIP "$secs" "reference, exit $rc: $(grep -v '^\s*$' "$log" | tail -1 | cut -c1-150)"
  fi
  section "$key" "$name (reference)" "$log" 20
}

# ---- phase 1: the tests, beside the NCCL shim and the torch steps ------------------------------
# gpu_tests PREFIX: every tests/gpu binary (collective_test and compress_test in 4 shards), side
# by side; keys PREFIX-NAME.
gpu_tests() {
  local pids=() bin t s
  for bin in "$BB"/tests/gpu/*_test; do
    t=${bin##*/}
    case $t in
      collective_test | compress_test)
        for s in 0 1 2 3; do
          gtest_step "$1-$t.$s" "$t.$s" "$bin" $s 4 &
          pids+=($!)
        done ;;
      *) gtest_step "$1-$t" "$t" "$bin" & pids+=($!) ;;
    esac
  done
  wait "${pids[@]}"
}
phase1() {
  local pids=() c i=0
  gpu_tests 10 & pids+=($!)
  shim_step 31-shim-initall initall 60 & pids+=($!)
  (
    torch_shim 33a-torch-shim 2
    torch_shim 33b-torch-shim 4
    torch_shim 33c-torch-shim 2 1M-inf=topk:ratio=0.01
    torch_shim 33d-torch-shim 4 1M-inf=topk:ratio=0.01
  ) & pids+=($!)
  (
    if torch_build; then  # then the package's two torch tests side by side
      torch_test 21-torch-backend test_torch_backend.py &
      torch_test 22-torch-hook test_hook.py &
      wait
    fi
  ) & pids+=($!)
  (shim_step 32a-shim-sqzrun sqzrun 120; shim_step 32b-shim-codec codec 120) & pids+=($!)
  # The same with other hardware queue counts: 1 only where each rank is a process sqzrun started.
  for c in $CONNS; do
    i=$((i + 1))
    if [ "$c" != 1 ]; then
      (conns "$c"; gpu_tests "1$i") & pids+=($!)
      (conns "$c"; torch_shim "34$i-torch-shim" 2; torch_shim "35$i-torch-shim" 4) & pids+=($!)
    fi
    (conns "$c"; shim_step "32a$i-shim-sqzrun" sqzrun 120; shim_step "32b$i-shim-codec" codec 120) &
    pids+=($!)
  done
  wait "${pids[@]}"
}

# ---- phase 2: sqz-codec-bench -d cuda, alone on the GPU -----------------------------------------
phase2() {
  codec_bench
  # Alone on the GPU: the one-rank call's latency, and two ranks sharing it (the stream
  # all-reduce and sends and receives, device/stream_collectives.h) up to 256 MiB beside the
  # HBM-traffic limit.
  AR_MAX=256M allreduce 35-alone-n1 default 1 ""
  AR_MAX=256M allreduce 36-alone-n2 default 2 ""
  AR_BIN=sqz-sendrecv-perf AR_MAX=256M allreduce 37-alone-n2-sendrecv default 2 ""
  topk_reference
  ncu_look
}
topk_reference() {  # torch.topk on the same GPU, alone: what issue 47 holds top-k to
  torch_ref 39-topk "torch.topk 64M float32 (torch)" 60 "$L/torch-topk.log" 'ratio 0.001' \
    "$B/check/topk_ref.py"
}
# figures: issue 47's figures from the logs (check/gpu-figures.py), first among the sections.
figures() {
  local py=${torch_py:-${pythons[0]:-}} log=$L/figures.log
  if [ -z "$py" ]; then
    record 00-figures "issue 47's figures" SKIP 0 "no python3 found"
    return
  fi
  if "$py" "$B/check/gpu-figures.py" "$L" >"$log" 2>&1; then
    cp "$log" "$S/00-figures.sec"
    record 00-figures "issue 47's figures" DONE 0 "$(sed -n 's/^## Issue 47.s figures: //p' "$log")"
  else
    record 00-figures "issue 47's figures" FAIL 0 "$(tail -1 "$log")"
  fi
}

# ---- phase 3: sqz-allreduce-perf -d cuda ------------------------------------------------------
phase3() {
  local pids=() lane=0 cfg c
  for cfg in "default 1" "cuda_ipc 2" "cuda_ipc 4" "shm 2" "shm 4" "tcp 2" "tcp 4"; do
    # shellcheck disable=SC2086
    if [ "${RUN_BENCH_SERIAL:-0}" = 1 ]; then
      ar_lane $lane $cfg
    else
      ar_lane $lane $cfg & pids+=($!)
    fi
    lane=$((lane + 1))
  done
  for c in $CONNS; do  # dense, with other hardware queue counts (lanes 7, 8, ...)
    if [ "${RUN_BENCH_SERIAL:-0}" = 1 ]; then
      (conn_lane $lane "$c")
    else
      conn_lane $lane "$c" & pids+=($!)
    fi
    lane=$((lane + 1))
  done
  [ ${#pids[@]} = 0 ] || wait "${pids[@]}"
}

# ---- phase 4: DDP step times, one run at a time; torch's numbers, for reference -------------------
phase4() {
  [ -e "$S/python.tried" ] || torch_build  # phase 1 was not run
  ddp_time 52a-ddp "torch's NCCL (reference)" 1 nccl ref
  ddp_time 52b-ddp "torch ProcessGroupNCCL over the NCCL shim" 1 nccl shim
  ddp_time 52c-ddp "torch ProcessGroupNCCL over the NCCL shim" 2 nccl shim
  ddp_time 52d-ddp "torch ProcessGroupNCCL over the NCCL shim" 4 nccl shim
  ddp_time 52e-ddp "squeeze backend" 1 squeeze
  ddp_time 52f-ddp "squeeze backend" 2 squeeze
  ddp_time 52g-ddp "squeeze backend" 4 squeeze
  torch_ref 50-membw "device copy 1 GiB (torch)" 60 "$L/torch-membw.log" 'GB/s' "$B/check/membw.py"
  [ -e "$S/39-topk.row" ] || topk_reference  # phase 2 was not run
}

for phase in 1 2 3 4; do
  if [[ $PHASES == *" $phase "* ]]; then
    t_phase=$SECONDS
    "phase$phase"
    record "9$phase-phase" "phase $phase (wall time)" DONE $((SECONDS - t_phase)) \
      "ended at $((SECONDS - T0))s of the ${BUDGET}s budget"
  fi
done
figures
pack
n_bad=$(find "$S" -name '*.bad' | wc -l)
echo "run.sh: $([ "$n_bad" = 0 ] && echo PASS || echo "FAIL ($n_bad steps)") in $((SECONDS - T0))s; summary $O/summary.md, logs $O/gpu-logs.tar.gz"
[ "$n_bad" = 0 ] && [ $gpu_ok = 1 ]
