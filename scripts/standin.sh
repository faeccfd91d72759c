#!/usr/bin/env bash
# Builds the device path over the CUDA stand-in (device/standin/standin.h: an emulated GPU) into
# build-standin and runs the GPU tests there (meson suite 'gpu': tests/gpu/, the same tests a real
# GPU runs), so a machine without a GPU sees the device path fail, hang or pass. Needs the CUDA
# toolkit's headers only (nvcc on PATH or /usr/local/cuda); without them it says so and exits 77
# (skipped). Extra arguments go to 'meson test' (e.g. --list, or a test name).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-standin
if [ ! -f "$dir/build.ninja" ]; then
  if ! [ -f /usr/local/cuda/include/cuda_runtime_api.h ] && ! command -v nvcc >/dev/null 2>&1; then
    echo "standin.sh: skipped: no CUDA toolkit headers (install the CUDA toolkit)" >&2
    exit 77
  fi
  # The device path and its tests only: the Python extensions, MPI, the peer comparisons and the
  # NCCL shim are tested in build/.
  meson setup "$dir" -Dcuda-standin=true -Dpython=disabled -Dcompare=disabled -Dmpi=disabled \
    -Dnccl_shim=disabled >/dev/null
fi
# Only the binaries the suite runs, and the launcher and benchmark its scripts start.
mapfile -t targets < <(meson introspect "$dir" --tests | /usr/bin/python3 -c '
import json, os, sys
root = os.path.abspath(sys.argv[1])
for t in json.load(sys.stdin):
    if any(s.split(":")[-1] == "gpu" for s in t["suite"]):
        print(os.path.relpath(t["cmd"][0], root))' "$dir")
ninja -C "$dir" "${targets[@]}" src/launcher/sqzrun perf/sqz-allreduce-perf
meson test -C "$dir" --no-rebuild --suite gpu --print-errorlogs --num-processes 2 "$@"
