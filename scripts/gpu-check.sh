#!/usr/bin/env bash
# gpu-check.sh: what only a machine with a GPU can check. Builds Squeeze with CUDA into
# build-gpu, runs the GPU tests (tests/gpu/: the kernels against the CPU's bit for bit, and the
# collectives over device buffers) and the NCCL shim's program on device buffers, then the
# benchmarks on device memory: sqz-codec-bench -d cuda and sqz-allreduce-perf -d cuda on 1, 2
# and 4 ranks over the default transports, shm and tcp;
# and, where python3 has torch with CUDA, torch.topk and NCCL's all-reduce as reference points.
# Writes a Markdown summary with every table to gpu-check.md (or $1), full logs and -J files
# beside it (<summary>.logs/), and exits 1 when a test failed, a benchmark found a wrong result
# (#wrong > 0) or failed, or no GPU was usable; torch's numbers are never failures, only skipped
# with the reason.
#
# Usage: scripts/gpu-check.sh [SUMMARY.md]
# Needs a Debian 12 machine with the CUDA toolkit (nvcc on PATH or in /usr/local/cuda) and a
# driver; installs nothing beyond scripts/install-deps.sh. Every step runs under `timeout`.
# GPU_CHECK_STEPS=build,tests,nccl,codec,allreduce,torch (the default: all) runs a subset, e.g.
# on a machine that bounds each command's time: the steps after build reuse build-gpu. PYTHON
# picks the interpreter for the torch steps (default python3).
set -uo pipefail

summary=$(realpath -m "${1:-gpu-check.md}")
cd "$(dirname "$0")/.." || exit 2
steps=",${GPU_CHECK_STEPS:-build,tests,nccl,codec,allreduce,torch},"
python=${PYTHON:-python3}
build="build-gpu"
logs="${summary%.md}.logs"
mkdir -p "$logs" || exit 2
body=$(mktemp)
trap 'rm -f "$body"' EXIT

want() { [[ $steps == *",$1,"* ]]; }
failed=0
status_rows=()     # "| step | status | seconds | note |" lines of the summary table
allreduce_rows=()  # one per sqz-allreduce-perf run, for the summary's table
gpu_desc=""

# record STEP STATUS SECONDS NOTE: one line of the summary table (and of the console).
record() {
  local note=${4//|/\\|}
  status_rows+=("| $1 | $2 | $3 | ${note//$'\n'/ } |")
  [ "$2" = FAIL ] && failed=1
  printf '== %-34s %-5s %5ss  %s\n' "$1" "$2" "$3" "$4"
}

# section TITLE COMMAND LOG [MAXLINES]: a Markdown section with the command and its output.
section() {
  local max=${4:-600} lines
  lines=$(wc -l <"$3")
  {
    # shellcheck disable=SC2016  # the backquotes are Markdown's
    printf '\n## %s\n\n`%s`\n\n```\n' "$1" "$2"
    head -n "$max" "$3"
    [ "$lines" -gt "$max" ] && printf '... (%d more lines in %s)\n' $((lines - max)) "$3"
    printf '```\n'
  } >>"$body"
}

# run LIMIT LOG COMMAND...: runs it under timeout, output to LOG; sets rc and secs.
run() {
  local limit=$1 log=$2 t0=$SECONDS
  shift 2
  timeout -k 15 "$limit" "$@" >"$log" 2>&1
  rc=$?
  secs=$((SECONDS - t0))
  if [ $rc = 124 ] || [ $rc = 137 ]; then echo "(gpu-check: stopped after ${limit}s)" >>"$log"; fi
}

finish() {
  {
    printf '# Squeeze GPU check\n\n'
    printf -- '- date: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf -- '- host: %s\n' "$(hostname)"
    if commit=$(git rev-parse --short HEAD 2>/dev/null); then
      git diff --quiet HEAD 2>/dev/null || commit+=" (with local changes)"
    fi
    printf -- '- commit: %s\n' "${commit:-unknown}"
    printf -- '- GPU: %s\n' "${gpu_desc:-unknown}"
    printf -- '- nvcc: %s\n' "$(nvcc --version 2>/dev/null | tail -1 || echo 'not found')"
    printf -- '- steps: %s\n' "${GPU_CHECK_STEPS:-build,tests,nccl,codec,allreduce,torch}"
    printf -- '- result: %s\n' "$([ $failed = 0 ] && echo PASS || echo FAIL)"
    printf '\n| step | status | s | note |\n|---|---|---|---|\n'
    printf '%s\n' "${status_rows[@]}"
    if [ ${#allreduce_rows[@]} -gt 0 ]; then
      printf '\n### sqz-allreduce-perf -d cuda: the largest size, and the average over sizes\n\n'
      printf '| SQZ_TRANSPORT | ranks | busbw out-of-place (GB/s) | busbw in-place (GB/s) |'
      printf ' avg busbw (GB/s) | #wrong | status |\n|---|---|---|---|---|---|---|\n'
      printf '%s\n' "${allreduce_rows[@]}"
    fi
    cat "$body"
  } >"$summary"
  echo "gpu-check: $([ $failed = 0 ] && echo PASS || echo FAIL); summary in $summary, logs in $logs"
  exit $failed
}

# ---- build -----------------------------------------------------------------------------------
# The CUDA toolkit installs outside PATH; meson finds nvcc only on PATH (as scripts/build.sh).
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if want build; then
  # Missing optional packages (a machine without network) need not stop the check: the build
  # says whether anything it needs is missing.
  run 900 "$logs/install-deps.log" scripts/install-deps.sh
  if [ $rc = 0 ]; then record install-deps PASS $secs ""
  else record install-deps WARN $secs "exit $rc: $(tail -1 "$logs/install-deps.log")"; fi
  if [ -f $build/build.ninja ]; then
    run 300 "$logs/configure.log" meson configure $build -Dcuda=enabled
  else
    run 300 "$logs/configure.log" meson setup $build -Dcuda=enabled
  fi
  if [ $rc != 0 ]; then
    record configure FAIL $secs "meson exit $rc: $(tail -1 "$logs/configure.log")"
    section "configure (failed)" "meson setup $build -Dcuda=enabled" "$logs/configure.log"
    finish
  fi
  run 1800 "$logs/build.log" ninja -C $build
  if [ $rc != 0 ]; then
    record build FAIL $secs "ninja exit $rc"
    grep -E -B2 -A12 'FAILED|error' "$logs/build.log" >"$logs/build-errors.log"
    section "build (failed)" "ninja -C $build" "$logs/build-errors.log" 200
    finish
  fi
  record build PASS $secs "-Dcuda=enabled"
fi
if ! grep -q 'SQZ_HAVE_CUDA 1' $build/squeeze_config.h 2>/dev/null; then
  record build FAIL 0 "$build is missing or built without CUDA: run the build step"
  finish
fi

# ---- the GPU ---------------------------------------------------------------------------------
if smi=$(timeout 60 nvidia-smi -L 2>&1) && [ -n "$smi" ]; then
  echo "$smi"
  # compute_cap is a newer query field: without it, the rest.
  gpu_desc=$(timeout 60 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
    --format=csv,noheader 2>/dev/null | head -1) ||
    gpu_desc=$(timeout 60 nvidia-smi --query-gpu=name,driver_version,memory.total \
      --format=csv,noheader 2>/dev/null | head -1)
  echo "device 0: ${gpu_desc:-?}"
  printf '%s\n' "$smi" >"$logs/nvidia-smi.log"
  record gpu PASS 0 "${gpu_desc:-$smi}"
  section "GPUs" "nvidia-smi -L" "$logs/nvidia-smi.log"
else
  echo "gpu-check: no usable GPU: ${smi:-nvidia-smi -L listed nothing}" >&2
  record gpu FAIL 0 "no usable GPU: ${smi:-nvidia-smi -L listed nothing}"
  finish
fi

# ---- tests: tests/gpu/ (kernels, and the collectives over device buffers) ---------------------
if want tests; then
  run 1500 "$logs/tests-gpu.log" meson test -C $build --suite gpu --print-errorlogs
  skipped=$(grep -E '^Skipped:' "$logs/tests-gpu.log" | awk '{print $2}')
  results=$(grep -E '^(Ok|Fail|Skipped|Timeout):' "$logs/tests-gpu.log" | tr -s ' ' |
    sed 's/ *$//' | paste -sd, -)
  if [ $rc = 0 ] && [ "${skipped:-0}" = 0 ]; then
    record "tests (--suite gpu)" PASS $secs "$results"
  elif [ $rc = 0 ]; then
    record "tests (--suite gpu)" FAIL $secs "$results: skipped on a machine with a GPU"
  else
    record "tests (--suite gpu)" FAIL $secs "exit $rc; $results"
  fi
  section "tests: meson test --suite gpu" "meson test -C $build --suite gpu --print-errorlogs" \
    "$logs/tests-gpu.log"
fi

# ---- the NCCL shim over device buffers: nccl_program picks the GPU when it sees one -----------
if want nccl; then
  run 600 "$logs/nccl-shim.log" meson test -C $build nccl-shim-sqzrun nccl-shim-codec \
    nccl-shim-initall --print-errorlogs
  if [ $rc = 0 ] && grep -q "device buffers" "$build/meson-logs/testlog.txt"; then
    record "NCCL shim, device buffers" PASS $secs ""
  else
    record "NCCL shim, device buffers" FAIL $secs "exit $rc (or the program ran on host buffers)"
  fi
  section "NCCL shim: nccl_program over libsqueeze-nccl.so.2" \
    "meson test -C $build nccl-shim-sqzrun nccl-shim-codec nccl-shim-initall" "$logs/nccl-shim.log"
fi

# ---- sqz-codec-bench -d cuda -------------------------------------------------------------------
if want codec; then
  cmd=("$build/perf/sqz-codec-bench" -d cuda -J "$logs/codec-bench.json")
  run 600 "$logs/codec-bench.log" "${cmd[@]}"
  if [ $rc = 0 ]; then record "sqz-codec-bench -d cuda" PASS $secs ""
  else record "sqz-codec-bench -d cuda" FAIL $secs "exit $rc (a failed row, or no GPU)"; fi
  section "sqz-codec-bench -d cuda" "${cmd[*]}" "$logs/codec-bench.log"
fi

# ---- sqz-allreduce-perf -d cuda ----------------------------------------------------------------
if want allreduce; then
  # One rank has no peers, so its run does not depend on the transport: once, with the default.
  for transport in default shm tcp; do
    for n in 1 2 4; do
      [ $transport != default ] && [ $n = 1 ] && continue
      name="allreduce-$transport-n$n"
      cmd=("$build/src/launcher/sqzrun" --timeout 570 -n "$n"
        "$build/perf/sqz-allreduce-perf" -d cuda -b 1K -e 256M -f 4 -J "$logs/$name.json")
      if [ $transport = default ]; then
        label="cuda_ipc,shm,tcp (default)"
        run 600 "$logs/$name.log" env -u SQZ_TRANSPORT "${cmd[@]}"
      else
        label=$transport
        run 600 "$logs/$name.log" env SQZ_TRANSPORT=$transport "${cmd[@]}"
      fi
      # A table row starts with the size and the count; #wrong is columns 9 (out of place) and
      # 13 (in place).
      # shellcheck disable=SC2016  # awk's fields, not the shell's
      rows='$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 14'
      wrong=$(awk "$rows"' {w += $9 + $13} END {print w + 0}' "$logs/$name.log")
      last=$(awk "$rows"' {row = $0} END {print row}' "$logs/$name.log")
      avg=$(sed -n 's/^# Avg bus bandwidth *: *\([^ ]*\).*/\1/p' "$logs/$name.log")
      if [ $rc = 0 ] && [ "$wrong" = 0 ] &&
        grep -q '^# Out of bounds values : 0 OK' "$logs/$name.log"; then
        st=PASS note=""
      else
        st=FAIL note="exit $rc, #wrong $wrong"
      fi
      record "allreduce -n $n, $label" $st $secs "$note"
      read -r -a cells <<<"$last"
      allreduce_rows+=("| $label | $n | ${cells[7]:--} | ${cells[11]:--} | ${avg:--} | $wrong | $st |")
      section "sqz-allreduce-perf -d cuda, $n rank(s), SQZ_TRANSPORT=$label" \
        "$([ $transport = default ] || echo "SQZ_TRANSPORT=$transport ")${cmd[*]}" "$logs/$name.log"
    done
  done
fi

# ---- torch: reference points, never failures -------------------------------------------------
if want torch; then
  probe='import sys, torch
if not torch.cuda.is_available():
    sys.exit("torch %s sees no CUDA device" % torch.__version__)'
  if ! why=$(timeout 120 "$python" -c "$probe" 2>&1); then
    why=$(tail -1 <<<"${why:-$python did not start}")
    record "torch.topk" SKIP 0 "$why"
    record "NCCL all-reduce (torch)" SKIP 0 "$why"
  else
    torch_py=$(mktemp --suffix=.py)
    trap 'rm -f "$body" "$torch_py"' EXIT
    # A file, not stdin: torch.multiprocessing's spawn re-imports the main module.
    cat >"$torch_py" <<'PY'
"""torch.topk and NCCL all-reduce timings for gpu-check.sh; prints Markdown tables."""
import math
import os
import statistics
import sys
import time

import torch


def cuda_ms(fn, reps=5):
    """Median ms of reps runs of fn between two CUDA events, after two untimed runs."""
    for _ in range(2):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def topk():
    n = 64 << 20
    k = max(1, math.ceil(0.001 * n * (1 - 1e-12)))  # compress/topk.cc's keepCount
    x = torch.randn(n, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))
    print("| call (%d float32, k = %d) | ms |\n|---|---|" % (n, k))
    calls = (
        ("torch.topk(x.abs(), k, sorted=False)", lambda: torch.topk(x.abs(), k, sorted=False)),
        ("torch.topk(x, k, sorted=False)", lambda: torch.topk(x, k, sorted=False)),
        ("torch.topk(x.abs(), k) (sorted)", lambda: torch.topk(x.abs(), k)),
    )
    for text, fn in calls:
        print("| %s | %.2f |" % (text, cuda_ms(fn)))


def allreduce_worker(rank, world, port):
    import torch.distributed as dist
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    if rank == 0:
        print("| size (B) | time (us) | algbw (GB/s) | busbw (GB/s) |", flush=True)
        print("|---|---|---|---|", flush=True)
    size, iters = 1 << 10, 20
    while size <= 256 << 20:
        t = torch.ones(size // 4, device="cuda")
        for _ in range(5):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        sec = torch.tensor([(time.perf_counter() - t0) / iters], device="cuda")
        dist.all_reduce(sec, op=dist.ReduceOp.MAX)
        sec = sec.item()
        if rank == 0:
            algbw = size / 1e9 / sec
            print("| %d | %.1f | %.2f | %.2f |" % (size, sec * 1e6, algbw,
                                                  algbw * 2 * (world - 1) / world), flush=True)
        size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "topk":
        topk()
    else:
        import torch.multiprocessing as mp
        world = int(sys.argv[2])
        mp.spawn(allreduce_worker, args=(world, 29500 + os.getpid() % 1000), nprocs=world)
PY
    run 300 "$logs/torch-topk.log" "$python" "$torch_py" topk
    if [ $rc = 0 ]; then
      record "torch.topk" PASS $secs ""
      section "torch.topk on 64M float32, k = 0.001 n (reference)" \
        "$python <gpu-check torch> topk" "$logs/torch-topk.log"
    else
      record "torch.topk" SKIP $secs "exit $rc: $(grep -v '^\s*$' "$logs/torch-topk.log" | tail -1)"
    fi
    for world in 2 4; do
      run 300 "$logs/torch-nccl-n$world.log" "$python" "$torch_py" allreduce $world
      if [ $rc = 0 ]; then
        record "NCCL all-reduce (torch), $world ranks" PASS $secs "in place, float32"
        section "NCCL all-reduce through torch.distributed, $world ranks (reference)" \
          "$python <gpu-check torch> allreduce $world" "$logs/torch-nccl-n$world.log"
      else
        # NCCL refuses two ranks on one GPU ("Duplicate GPU detected"); say why it did not run.
        reason=$(grep -m1 -o 'Duplicate GPU detected.*' "$logs/torch-nccl-n$world.log" ||
          grep -E 'Error|error' "$logs/torch-nccl-n$world.log" | tail -1)
        record "NCCL all-reduce (torch), $world ranks" SKIP $secs \
          "exit $rc: ${reason:-$(tail -1 "$logs/torch-nccl-n$world.log")}"
      fi
    done
  fi
fi

finish
