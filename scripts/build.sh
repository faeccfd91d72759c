#!/usr/bin/env bash
# Builds Squeeze (release) into ./build, installing missing Debian packages first.
# Extra arguments go to 'meson setup' on the first configure (e.g. -Dmpi=enabled).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The CUDA toolkit installs outside PATH; meson finds nvcc (the cuda feature) only on PATH.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if [ ! -f build/build.ninja ]; then
  meson setup build "$@"
fi
ninja -C build
