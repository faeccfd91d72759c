#!/usr/bin/env bash
# build-python-ext.sh: builds the Python package squeeze (its extension modules _squeeze and,
# where the interpreter's torch has its C++ headers, _torch_backend) against a libsqueeze that is
# already built, with the compiler alone. For a machine that has a Python with torch, pybind11
# and a C++ compiler but not the project's build dependencies (libcrypto's headers, nvcc): the GPU
# bundle's torch step, which builds against the GPU machine's torch 2.x. Everywhere else meson
# builds the package (python/meson.build); this script takes the same sources (every .cc of
# python/src and python/torch_backend) and the same torch paths (python/torch_paths.py).
#
# Usage: scripts/build-python-ext.sh [--cuda] SOURCE_ROOT LIBSQUEEZE_DIR OUT_DIR [PYTHON]
#   SOURCE_ROOT     holds include/squeeze/squeeze.h and python/ (the repository, or the bundle's src/)
#   LIBSQUEEZE_DIR  holds libsqueeze.so.0 (linked with an RPATH to it)
#   OUT_DIR         receives squeeze/: the package, importable with PYTHONPATH=OUT_DIR
#   PYTHON          the interpreter to build for (default python3)
#   --cuda          libsqueeze was built with CUDA: CUDA tensors go to it (SQZ_PY_HAVE_CUDA=1), and
#                   the backend takes them where torch has c10_cuda and the CUDA runtime's headers
# CXX picks the compiler (default c++), JOBS the translation units compiled at once (default 8).
# Exits 1 with the reason when a module cannot be built; _torch_backend is skipped, saying why,
# when torch has no C++ headers.
set -euo pipefail

die() { echo "build-python-ext: $*" >&2; exit 1; }
cuda=0
if [ "${1:-}" = --cuda ]; then cuda=1; shift; fi
[ $# -ge 3 ] || die "usage: $0 [--cuda] SOURCE_ROOT LIBSQUEEZE_DIR OUT_DIR [PYTHON]"
src=$(realpath "$1") libdir=$(realpath "$2") out=$(realpath -m "$3") py=${4:-python3}
cxx=${CXX:-c++} jobs=${JOBS:-8}
[ -f "$src/include/squeeze/squeeze.h" ] || die "$src/include/squeeze/squeeze.h is missing"
[ -d "$src/python/src" ] || die "$src/python/src is missing"
[ -e "$libdir/libsqueeze.so.0" ] || die "$libdir/libsqueeze.so.0 is missing"
command -v "$cxx" >/dev/null || die "no C++ compiler '$cxx' (set CXX)"
command -v "$py" >/dev/null || die "no Python '$py'"

# The interpreter: its headers and extension suffix; pybind11's headers (pip's, else torch's).
read -r py_inc ext_suffix pybind_inc < <("$py" - <<'PY'
import sysconfig
try:
    import pybind11
    inc = pybind11.get_include()
except ImportError:
    inc = "-"
print(sysconfig.get_paths()["include"], sysconfig.get_config_var("EXT_SUFFIX"), inc)
PY
) || die "$py does not run"
[ -f "$py_inc/Python.h" ] || die "$py_inc/Python.h is missing: $py has no development headers"
# torch's C++ paths, as python/meson.build reads them: include, api include, lib, C++11 ABI.
mapfile -t torch_dirs < <("$py" "$src/python/torch_paths.py" 2>/dev/null || true)
torch_inc=${torch_dirs[0]:-} torch_api_inc=${torch_dirs[1]:-} torch_lib=${torch_dirs[2]:-}
torch_abi=${torch_dirs[3]:-1}
pybind_flags=(-isystem "$pybind_inc")
if [ "$pybind_inc" = - ]; then
  if [ -n "$torch_inc" ] && [ -f "$torch_inc/pybind11/pybind11.h" ]; then
    pybind_flags=(-isystem "$torch_inc")
  elif [ -f /usr/include/pybind11/pybind11.h ]; then
    pybind_flags=()  # Debian's pybind11-dev, on the default include path
  else
    die "no pybind11: neither the pybind11 module, nor torch's include/pybind11, nor pybind11-dev"
  fi
fi

mkdir -p "$out/squeeze" "$out/.obj"
cp "$src"/python/squeeze/*.py "$out/squeeze/"
common=(-std=c++20 -O2 -fPIC -Wall -Wno-unused-parameter -I"$src/include" -isystem "$py_inc")
link=(-shared -L"$libdir" -l:libsqueeze.so.0 -Wl,-rpath,"$libdir")

# compile MODULE FLAGS... -- SOURCES...: every source at once (JOBS at a time), then the link.
compile() {
  local module=$1 flags=() objs=() pids=() f o i=0 bad=0
  shift
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  for f in "$@"; do
    o=$out/.obj/$module.$(basename "${f%.cc}").o
    objs+=("$o")
    "$cxx" "${common[@]}" "${flags[@]}" -c "$f" -o "$o" 2>"$o.log" &
    pids+=($!)
    i=$((i + 1))
    if [ $((i % jobs)) = 0 ]; then
      for f in "${pids[@]}"; do wait "$f" || bad=1; done
      pids=()
    fi
  done
  for f in "${pids[@]}"; do wait "$f" || bad=1; done
  for o in "${objs[@]}"; do [ -s "$o.log" ] && cat "$o.log" >&2; done
  [ $bad = 0 ] || die "compiling $module failed (errors above)"
  echo "build-python-ext: $module: compiled $# sources"
  LINK_OBJS=("${objs[@]}")
}

compile _squeeze "${pybind_flags[@]}" -fvisibility=hidden -DSQZ_PY_HAVE_CUDA=$cuda -- \
  "$src"/python/src/*.cc
"$cxx" "${LINK_OBJS[@]}" "${link[@]}" -o "$out/squeeze/_squeeze$ext_suffix" ||
  die "linking _squeeze failed"

# torch's own pybind11 (include/pybind11): the backend's class derives from torch's registered
# c10d types, which needs the pybind11 torch was built with.
tflags=(-D_GLIBCXX_USE_CXX11_ABI="$torch_abi")
# ... and the pybind11 ABI key torch was built with, as torch.utils.cpp_extension passes it:
# pybind11 shares registered types (c10d's Backend) only between modules with the same key.
while IFS= read -r flag; do [ -n "$flag" ] && tflags+=("$flag"); done < <("$py" - <<'PY' 2>/dev/null
import torch
for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
    value = getattr(torch._C, "_PYBIND11_" + name, None)
    if value is not None:
        print('-DPYBIND11_%s="%s"' % (name, value))
PY
)
tlibs=(-ltorch -ltorch_cpu -lc10 -ltorch_python)
if [ -n "$torch_inc" ] && [ -f "$torch_inc/torch/csrc/distributed/c10d/ProcessGroup.hpp" ]; then
  tflags+=(-isystem "$torch_inc" -isystem "$torch_api_inc")
  tlibs+=(-L"$torch_lib" -Wl,-rpath,"$torch_lib")
elif [ -f /usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp ]; then
  tflags+=(-isystem /usr/include/torch/csrc/api/include)  # Debian's libtorch-dev
else
  echo "build-python-ext: _torch_backend skipped: $py's torch has no C++ headers (c10d)"
  exit 0
fi
if [ $cuda = 1 ] && [ -n "$torch_lib" ] && [ -e "$torch_lib/libc10_cuda.so" ]; then
  # c10/cuda's headers include the CUDA runtime's: a CUDA install, or the nvidia wheels'.
  cuda_inc=$("$py" - <<'PY'
import glob, os, site
dirs = [os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/include", "/usr/local/cuda/include"]
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += sorted(glob.glob(sp + "/nvidia/*/include")) + sorted(glob.glob(sp + "/nvidia/*/*/include"))
print(next((d for d in dirs if os.path.isfile(d + "/cuda_runtime_api.h")), ""))
PY
)
  [ -n "$cuda_inc" ] || die "torch has c10_cuda, but no cuda_runtime_api.h was found (set CUDA_HOME)"
  tflags+=(-isystem "$cuda_inc" -DSQZ_TORCH_CUDA=1)
  tlibs+=(-lc10_cuda)
  echo "build-python-ext: _torch_backend takes CUDA tensors (CUDA headers in $cuda_inc)"
fi
compile _torch_backend "${tflags[@]}" -- "$src"/python/torch_backend/*.cc
"$cxx" "${LINK_OBJS[@]}" "${link[@]}" "${tlibs[@]}" -o "$out/squeeze/_torch_backend$ext_suffix" ||
  die "linking _torch_backend failed"
echo "build-python-ext: $out/squeeze: _squeeze$ext_suffix, _torch_backend$ext_suffix"
