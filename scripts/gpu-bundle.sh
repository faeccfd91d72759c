#!/usr/bin/env bash
# gpu-bundle.sh: "build on a login node, run on a GPU node". Packs a CUDA build of Squeeze into
# one folder (and a .tar.gz of it) that a GPU machine without build tools, Debian packages or
# network can run: the GPU test binaries, the benchmarks, sqzrun, the NCCL shim and its device
# program, libsqueeze, all in the build tree's layout (their $ORIGIN-relative RUNPATHs hold),
# the shared libraries a CUDA base image lacks (libcrypto, hwloc, numa, udev, UCX and its
# plugins, ...) in lib/, and run.sh, which runs the checks there and writes summary.md and
# gpu-logs.tar.gz (see the comment at the top of run.sh). cudart and cuBLAS are not bundled:
# run.sh takes the GPU machine's own (a CUDA install, or PyTorch's nvidia/*/lib wheels).
#
# Usage: scripts/gpu-bundle.sh [-B BUILD] [-o BUNDLE] [-j JOBS] [--no-build] [--standin]
#   -B BUILD    the CUDA build to pack (default build, as scripts/build.sh makes it); it must be
#               a real CUDA build (squeeze_config.h: SQZ_HAVE_CUDA 1), not a -Dcuda-standin one
#   -o BUNDLE   the folder to write (default gpu-bundle at the repository root; replaced), and
#               BUNDLE.tar.gz beside it
#   -j JOBS     ninja's -j (default: ninja's own)
#   --no-build  pack the build as it is, without running ninja first
#   --standin   pack a -Dcuda-standin=true build instead (e.g. -B build-standin): a bundle whose
#               run.sh runs its steps on the emulated GPU, for a dry run of run.sh here
# Then: copy BUNDLE.tar.gz to the GPU node, `tar xzf gpu-bundle.tar.gz && gpu-bundle/run.sh OUT`.
# The build tree is never modified: copies are stripped, not the originals.
set -euo pipefail

die() { echo "gpu-bundle: $*" >&2; exit 1; }
build=build bundle="" jobs="" do_build=1 standin=0
while [ $# -gt 0 ]; do
  case $1 in
    -B) build=${2:?-B needs a build directory}; shift 2 ;;
    -o) bundle=${2:?-o needs a folder}; shift 2 ;;
    -j) jobs=${2:?-j needs a number}; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --standin) standin=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=$(realpath -m "$build")
bundle=$(realpath -m "${bundle:-$root/gpu-bundle}")
tarball="$bundle.tar.gz"
marker=.squeeze-gpu-bundle
[ -f "$build/build.ninja" ] || die "$build has no build.ninja: configure it first (scripts/build.sh)"
config="$build/squeeze_config.h"
grep -q '^#define SQZ_HAVE_CUDA 1' "$config" 2>/dev/null ||
  die "$build is not a CUDA build ($config lacks '#define SQZ_HAVE_CUDA 1'): build with nvcc on PATH (scripts/build.sh) or -Dcuda=enabled"
if grep -q '^#define SQZ_CUDA_STANDIN 1' "$config"; then
  [ $standin = 1 ] || die "$build is a -Dcuda-standin=true build (an emulated GPU): a GPU node needs the real CUDA build"
elif [ $standin = 1 ]; then
  die "$build is not a -Dcuda-standin=true build (--standin)"
fi
case $bundle/ in "$build"/* | "$root"/) die "the bundle folder $bundle would overwrite the build or the repository" ;; esac
if [ -e "$bundle" ] && [ ! -f "$bundle/$marker" ]; then
  die "$bundle exists and is not a bundle this script wrote: remove it or pick another -o"
fi

# ---- build: current binaries (after any ninja already running on this build finishes) -------
if [ $do_build = 1 ]; then
  pattern="ninja( .*)? -C ($build|$(realpath --relative-to="$root" "$build"))/?( |$)"
  waited=0
  while pgrep -f -- "$pattern" >/dev/null; do
    [ $((waited % 60)) = 0 ] && echo "gpu-bundle: waiting for the ninja already building $build (${waited}s)"
    sleep 10
    waited=$((waited + 10))
  done
  echo "gpu-bundle: ninja -C $build ${jobs:+-j $jobs}"
  ninja -C "$build" ${jobs:+-j "$jobs"} || die "ninja -C $build failed"
fi

# ---- what goes in: the binaries, in the build tree's layout ----------------------------------
is_elf() { [ -f "$1" ] && [ ! -L "$1" ] && [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }
need() { [ -e "$build/$1" ] || die "$build/$1 is missing: is the build complete (tests, perf and the NCCL shim enabled)?"; }
files=()
for t in "$build"/tests/gpu/*_test; do
  name=${t##*/}
  case $name in *standin*) continue ;; esac  # built only for the CUDA stand-in
  if is_elf "$t"; then files+=("tests/gpu/$name"); fi
done
[ ${#files[@]} -gt 0 ] || die "$build/tests/gpu has no *_test binaries (is gtest installed?)"
for f in perf/sqz-allreduce-perf perf/sqz-sendrecv-perf perf/sqz-codec-bench src/launcher/sqzrun \
  src/info/sqz-info tests/nccl_shim/nccl_program; do
  need "$f"
  files+=("$f")
done
need src/nccl_shim/libsqueeze-nccl.so.2
need libsqueeze.so.0
for f in "$build"/libsqueeze.so* "$build"/src/nccl_shim/lib*.so*; do
  [ -d "$f" ] || files+=("${f#"$build"/}")  # libsqueeze.so.0.1.0.p is a folder of objects
done

rm -rf "$bundle" "$tarball"
mkdir -p "$bundle/build" "$bundle/lib" "$bundle/check"
touch "$bundle/$marker"
for f in "${files[@]}"; do
  mkdir -p "$bundle/build/$(dirname "$f")"
  cp -P "$build/$f" "$bundle/build/$f"  # symlinks stay symlinks (libnccl.so.2 -> ...)
done

# Shared libraries the binaries load from the build tree through a RUNPATH: bundled too.
runpaths=$(for f in "${files[@]}"; do
  if is_elf "$build/$f"; then
    readelf -d "$build/$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p' | tr : '\n'
  fi
done | sort -u)
echo "gpu-bundle: RUNPATHs of the binaries: ${runpaths//$'\n'/ }"
for f in "${files[@]}"; do
  is_elf "$build/$f" || continue
  { ldd "$build/$f" 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
    real=$(realpath "$lib")
    case $real in
      "$build"/*)
        rel=${real#"$build"/}
        if [ ! -e "$bundle/build/$rel" ]; then
          echo "gpu-bundle: also bundling $rel (loaded from the build tree)"
          mkdir -p "$bundle/build/$(dirname "$rel")"
          cp "$real" "$bundle/build/$rel"
          # The loader looks for the soname, which may be a symlink beside it.
          lib_rel=${lib#"$build"/}
          if [ "$lib_rel" != "$lib" ] && [ ! -e "$bundle/build/$lib_rel" ]; then
            ln -s "$(basename "$rel")" "$bundle/build/$lib_rel"
          fi
        fi
        ;;
    esac
  done
done
# Copies only, stripped: the build tree keeps its symbols.
while IFS= read -r -d '' f; do
  if is_elf "$f"; then strip --strip-unneeded "$f"; fi
done < <(find "$bundle/build" -type f -print0)

# ---- the system libraries a CUDA base image lacks ----------------------------------------------
# Not bundled: glibc's, the C++ runtime (the GPU node's is as new or newer), the CUDA runtime
# and libraries, and the driver's (the node's own).
system_lib='^(linux-vdso|linux-gate|ld-linux[^/]*|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libstdc\+\+|libgcc_s)\.so'
cuda_lib='^(libcuda|libcudart|libcublas|libcublasLt|libnvidia-[^/]*|libnvrtc[^/]*|libnvJitLink|libcufft|libcurand|libcusparse|libcusolver)\.so'
bundle_ldpath="$bundle/lib:$bundle/build/src/nccl_shim"
elves() {  # the bundle's ELF files, one a line
  find "$bundle/build" "$bundle/lib" -type f -print0 | while IFS= read -r -d '' f; do
    if is_elf "$f"; then printf '%s\n' "$f"; fi
  done
}
# ldd_outside FILE: "NAME PATH" of each library FILE loads from outside the bundle.
ldd_outside() {
  env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$bundle_ldpath" ldd "$1" 2>/dev/null |
    awk -v b="$bundle/" '$2 == "=>" && index($3, b) != 1 {print $1, $3}'
}
copy_deps() {  # copies each non-system, non-CUDA library the bundle's ELF files load into lib/
  local f name path copied=0
  while IFS= read -r f; do
    while read -r name path; do
      [[ $name =~ $system_lib || $name =~ $cuda_lib ]] && continue
      [ "$path" = "not" ] && continue  # "not found": reported by the check below
      if [ ! -e "$bundle/lib/$name" ]; then
        cp -L "$path" "$bundle/lib/$name"
        echo "gpu-bundle: lib/$name <- $path"
        copied=1
      fi
    done < <(ldd_outside "$f")
  done < <(elves)
  return $((1 - copied))
}
# UCX loads its transports as plugins from <libucs's folder>/ucx: bundle that folder too.
ucx_dir=""
while IFS= read -r f; do
  ucs=$(ldd_outside "$f" | awk '$1 ~ /^libucs\.so/ && !done {print $2; done = 1}')
  if [ -n "$ucs" ]; then ucx_dir="$(dirname "$(realpath "$ucs")")/ucx"; break; fi
done < <(elves)
if [ -n "$ucx_dir" ] && [ -d "$ucx_dir" ]; then
  mkdir -p "$bundle/lib/ucx"
  for f in "$ucx_dir"/*.so*; do cp -P "$f" "$bundle/lib/ucx/"; done
  echo "gpu-bundle: lib/ucx/ <- $ucx_dir: $(find "$bundle/lib/ucx" -type f -printf '%f ')"
fi
while copy_deps; do :; done  # until no new library appears (the plugins' own dependencies)

# ---- check: nothing outside the bundle but glibc's, the C++ runtime's and CUDA's ---------------
bad=0 cuda_needed=""
while IFS= read -r f; do
  while read -r name path; do
    if [[ $name =~ $cuda_lib ]]; then
      cuda_needed+="$name "
    elif ! [[ $name =~ $system_lib ]]; then
      echo "gpu-bundle: ${f#"$bundle"/} loads $name from ${path/not/nowhere (not found)}, outside the bundle" >&2
      bad=1
    fi
  done < <(ldd_outside "$f")
done < <(elves)
[ $bad = 0 ] || die "libraries outside the bundle (above)"
cuda_needed=$(tr ' ' '\n' <<<"$cuda_needed" | { grep -v '^libcuda\.so' || true; } | { grep . || true; } | sort -u | tr '\n' ' ')
echo "gpu-bundle: ldd check passed; left to the GPU node: ${cuda_needed}libcuda.so.1 (the driver)"

# ---- the run script, the reference programs, what the bundle is ------------------------------
cp tests/gpu/torch/*.py tests/nccl_shim/nccl_shim_test.sh scripts/build-python-ext.sh \
  scripts/gpu-figures.py "$bundle/check/"
# The Python package's sources, built on the GPU node against its own torch (run.sh's torch
# step: check/build-python-ext.sh), and the package's torch tests, which run there on CUDA.
mkdir -p "$bundle/src/include/squeeze" "$bundle/src/python/squeeze" "$bundle/src/tests/python"
cp include/squeeze/squeeze.h "$bundle/src/include/squeeze/"
cp -r python/src python/torch_backend python/torch_paths.py "$bundle/src/python/"
cp python/squeeze/*.py "$bundle/src/python/squeeze/"
cp tests/python/ranks.py tests/python/test_torch_backend.py tests/python/test_hook.py \
  "$bundle/src/tests/python/"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit+=" (with local changes)"
{
  printf 'BUNDLE_COMMIT=%q\n' "$commit"
  printf 'BUNDLE_DATE=%q\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  printf 'BUNDLE_HOST=%q\n' "$(hostname)"
  printf 'BUNDLE_NVCC=%q\n' "nvcc $( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) |
    sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  printf 'BUNDLE_CUDA_LIBS=%q\n' "${cuda_needed% }"
  printf 'BUNDLE_STANDIN=%q\n' "$standin"
} >"$bundle/bundle.env"
# run.sh is scripts/gpu-bundle-run.sh, as it is.
cp "$root/scripts/gpu-bundle-run.sh" "$bundle/run.sh"
chmod +x "$bundle/run.sh"
{
  echo "Squeeze GPU bundle: commit $commit, built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $build on $(hostname)."
  echo "Run on a GPU node: tar xzf $(basename "$tarball") && $(basename "$bundle")/run.sh OUT_DIR"
  echo "(see the comment at the top of run.sh). CUDA libraries taken from the node: ${cuda_needed}libcuda.so.1."
  echo
  echo "Contents:"
  (cd "$bundle" && find . -type f -o -type l | sort | while read -r f; do
    if [ -L "$f" ]; then echo "  $f -> $(readlink "$f")"; else echo "  $f ($(du -k "$f" | cut -f1) KiB)"; fi
  done)
} >"$bundle/README.txt"
bash -n "$bundle/run.sh" || die "run.sh does not parse"

tar -czf "$tarball" -C "$(dirname "$bundle")" "$(basename "$bundle")"
size_dir=$(du -sm "$bundle" | cut -f1) size_tar=$(du -m "$tarball" | cut -f1)
echo "gpu-bundle: $bundle: ${size_dir} MiB; $tarball: ${size_tar} MiB"
if [ "$size_dir" -ge 50 ] || [ "$size_tar" -ge 50 ]; then
  die "the bundle is over 50 MiB"
fi
