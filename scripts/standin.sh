#!/usr/bin/env bash
# Builds the device path over the CUDA stand-in (device/standin/standin.h: an emulated GPU) into
# build-standin and runs the GPU tests there (meson suite 'gpu': tests/gpu/, the same tests a real
# GPU runs, and the NCCL shim's program on device buffers under sqzrun), so a machine without a
# GPU sees the device path fail, hang or pass. Needs the CUDA toolkit's headers only (nvcc on
# PATH or /usr/local/cuda; the shim also its nccl.h, else that test is skipped); without them it
# says so and exits 77 (skipped). Extra arguments go to 'meson test' (e.g. --list, a test name).
# With --sanitize first: the same under ASan+UBSan at -Og, in build-standin-sanitize (the device
# path's host code, which scripts/sanitize.sh builds without CUDA; not part of scripts/test.sh:
# about 160 s to build and 130 s to run on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-standin
sanitize=()
if [ "${1:-}" = --sanitize ]; then
  shift
  dir=build-standin-sanitize
  sanitize=(-Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=plain -Doptimization=g
    -Ddebug=true -Db_ndebug=false -Dcpp_args=-g1)
  export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1
fi
# The device path and its tests, and the NCCL shim, whose device program runs in suite 'gpu'
# (tests/nccl_shim: nccl-shim-device); the Python extensions, MPI, the peer comparisons, UCX and
# verbs are tested in build/.
options=(-Dcuda-standin=true -Dpython=disabled -Dcompare=disabled -Dmpi=disabled -Ducx=disabled
  -Dibverbs=disabled -Dnccl_shim=auto "${sanitize[@]}")
if [ ! -f "$dir/build.ninja" ] && ! [ -f /usr/local/cuda/include/cuda_runtime_api.h ] &&
  ! command -v nvcc >/dev/null 2>&1; then
  echo "standin.sh: skipped: no CUDA toolkit headers (install the CUDA toolkit)" >&2
  exit 77
fi
# A folder set up by an older standin.sh (e.g. -Dnccl_shim=disabled) is brought to these options.
scripts/configure-build.sh "$dir" "${options[@]}"
# The test list below is read from meson-info: regenerate it first if a meson.build changed.
ninja -C "$dir" build.ninja >/dev/null
# Only what the suite runs: each test's binary, the built files a script test is given (the
# NCCL shim's program, sqzrun) and the targets it depends on (the shim, its libnccl.so.2 link),
# and the launcher and benchmark the suite's scripts start.
mapfile -t targets < <(meson introspect "$dir" --tests --targets | /usr/bin/python3 -c '
import json, os, sys
root = os.path.abspath(sys.argv[1])
info = json.load(sys.stdin)
files = {t["id"]: t["filename"] for t in info["targets"]}
built = {os.path.normpath(f) for fs in files.values() for f in fs}
out = set()
for t in info["tests"]:
    if any(s.split(":")[-1] == "gpu" for s in t["suite"]):
        for p in t["cmd"]:
            p = os.path.normpath(os.path.join(root, p))
            if p in built:
                out.add(p)
        for d in t["depends"]:
            out.update(os.path.normpath(f) for f in files.get(d, []))
for p in sorted(out):
    print(os.path.relpath(p, root))' "$dir")
ninja -C "$dir" "${targets[@]}" src/launcher/sqzrun perf/sqz-allreduce-perf
meson test -C "$dir" --no-rebuild --suite gpu --print-errorlogs --num-processes 2 "$@"
