#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz/fuzz_*.cc) with clang++-14
# -fsanitize=fuzzer,address,undefined into the directory given as $1 (e.g. build-fuzzclang):
# Squeeze's own sources come from a meson build in $1/meson (clang, ASan+UBSan, libFuzzer's
# coverage instrumentation, tests and tools off), whose sqz_core objects the targets link.
# Usage: tests/fuzz/build.sh BUILD_DIR [TARGET...]   (no TARGET: all of them)
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [TARGET...]  (e.g. $0 build-fuzzclang codec)" >&2
  exit 2
fi
src="$(cd "$(dirname "$0")/../.." && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
shift
for tool in clang-14 clang++-14 meson ninja; do
  command -v "$tool" >/dev/null ||
    { echo "$0: $tool not found; install it (apt-get install clang-14 meson ninja-build)" >&2; exit 1; }
done
jobs="${FUZZ_JOBS:-2}"  # this machine has 2 cores shared with others: override with FUZZ_JOBS

# UB is a crash (no recovery), so the fuzzer stops on it like on an ASan report.
san="-fsanitize=address,undefined -fno-sanitize-recover=all"
if [ ! -f "$out/meson/build.ninja" ]; then
  CC=clang-14 CXX=clang++-14 meson setup "$out/meson" "$src" \
    --buildtype=debugoptimized -Db_lundef=false \
    -Dcpp_args="$san -fsanitize=fuzzer-no-link" -Dcpp_link_args="$san" \
    -Dtests=disabled -Dperf=disabled -Dcompare=disabled -Dmpi=disabled -Dhwloc=disabled
fi
# Its output goes to a log; on a failure the errors are printed.
if ! ninja -C "$out/meson" -j "$jobs" libsqz_core.a > "$out/ninja.log" 2>&1; then
  grep -B2 -A8 'error:' "$out/ninja.log" >&2 || tail -20 "$out/ninja.log" >&2
  echo "$0: sqz_core did not build with clang-14 ($out/ninja.log)" >&2
  exit 1
fi
objs="$out/meson/libsqz_core.a.p"
nobj=$(ls "$objs"/*.o | wc -l)
rm -f "$out/libsqz_fuzz.a"
ar rcs "$out/libsqz_fuzz.a" "$objs"/*.o
echo "library: $nobj objects in $out/libsqz_fuzz.a"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$src"/tests/fuzz/fuzz_*.cc; do
    t="$(basename "$f" .cc)"
    targets+=("${t#fuzz_}")
  done
fi
for t in "${targets[@]}"; do
  f="$src/tests/fuzz/fuzz_$t.cc"
  [ -f "$f" ] || { echo "$0: no target '$t' ($f does not exist)" >&2; exit 2; }
  echo "building fuzz_$t"
  clang++-14 -std=c++20 -O1 -g $san -fsanitize=fuzzer \
    -I"$out/meson" -I"$src" -I"$src/include" -I"$src/src" \
    "$f" "$out/libsqz_fuzz.a" -lcrypto -lpthread -lrt -o "$out/fuzz_$t"
done
echo "built: ${targets[*]/#/$out/fuzz_}"
