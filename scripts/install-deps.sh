#!/usr/bin/env bash
# Installs the Debian packages Squeeze builds and tests with, when they are missing. Runs apt-get
# as root (or through sudo); prints what to install and fails when it can do neither.
# --compare also installs Gloo, the one peer perf/compare/ measures Squeeze against that the
# default install leaves out. Open MPI and PyTorch are always installed: the MPI example and its
# test, and the NCCL shim's mpirun test, need Open MPI; the Python package builds on PyTorch.
set -euo pipefail

compare=0
for arg in "$@"; do
  case "$arg" in
    --compare) compare=1 ;;
    *)
      echo "install-deps: unknown argument '$arg' (the only one is --compare)" >&2
      exit 2
      ;;
  esac
done

need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

have_cmd meson || need+=(meson)
have_cmd ninja || need+=(ninja-build)
have_cmd g++ || need+=(g++)
have_cmd pkg-config || need+=(pkg-config)
have_pkg libgtest-dev || need+=(libgtest-dev)
have_pkg libgmock-dev || need+=(libgmock-dev)
have_pkg libhwloc-dev || need+=(libhwloc-dev)
have_pkg python3-matplotlib || need+=(python3-matplotlib)  # perf/plot.py and its test
have_pkg git || need+=(git)                                # perf/real_models.py's wordlm reads git's docs
have_cmd ip || need+=(iproute2)                             # the network lab (tests/netlab/)
have_pkg libucx-dev || need+=(libucx-dev)                  # the ucx transport
have_pkg libibverbs-dev || need+=(libibverbs-dev)          # the ib transport's header (dlopen)
have_pkg libssl-dev || need+=(libssl-dev)                  # libcrypto: SHA-256, HMAC, random bytes
have_pkg nlohmann-json3-dev || need+=(nlohmann-json3-dev)  # perf/: the squeeze-perf/1 JSON files
# The Python package (python/), its torch.distributed backend, tests and examples/torch/.
for pkg in python3-dev pybind11-dev python3-numpy python3-torch libtorch-dev python3-sklearn; do
  have_pkg "$pkg" || need+=("$pkg")
done
# Open MPI: the MPI example and its test (examples/mpi/, tests/mpi/) and the NCCL shim's mpirun
# test; perf/compare/ measures against it too.
for pkg in libopenmpi-dev openmpi-bin; do
  have_pkg "$pkg" || need+=("$pkg")
done
need_compare() {
  have_pkg libgloo-dev || need+=(libgloo-dev)
}
if ((compare)); then need_compare; fi

if ((${#need[@]} == 0)); then exit 0; fi
echo "install-deps: installing ${need[*]}"
if [ "$(id -u)" = 0 ]; then
  sudo=()
elif have_cmd sudo; then
  sudo=(sudo)
else
  echo "install-deps: missing ${need[*]}; run as root: apt-get install ${need[*]}" >&2
  exit 1
fi
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
  "${need[@]}" >/dev/null
