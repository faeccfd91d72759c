#!/usr/bin/env bash
# Builds the fast tests (meson suites 'unit' and 'sanitize') with sanitizers into
# build-sanitize-<kind> and runs them: 'address,undefined' (the default; what scripts/test.sh
# runs) or 'thread'. Any sanitizer report fails the run. Usage: scripts/sanitize.sh [SANITIZERS]
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizers=${1:-address,undefined}
case "$sanitizers" in
  address,undefined|address|undefined|thread) ;;
  *) echo "sanitize.sh: '$sanitizers' is not one of address,undefined | address | undefined | thread" >&2
     exit 2 ;;
esac
dir=build-sanitize-${sanitizers//,/-}
# -Db_lundef=false: the sanitizer runtimes resolve their symbols at load time. -Dcuda=disabled:
# the fast tests exercise host code; nvcc under -fsanitize would only add build time. The
# Python extensions would load the sanitizer runtime into an uninstrumented interpreter.
# -Og -g1 (asserts on): line tables are all a report's stack needs. -Og, not the -O1 the
# sanitizers' documentation suggests: with UBSan, -O1 took 372 s to build these tests on 2 cores
# and -Og 199 s, and the tests ran as fast (167 s of test time against 159). A folder set up at
# -O1 by an older script is moved to -Og.
scripts/configure-build.sh "$dir" -Dbuildtype=plain -Doptimization=g -Ddebug=true \
  -Db_ndebug=false -Dcpp_args=-g1 -Db_sanitize="$sanitizers" -Db_lundef=false \
  -Dcompare=disabled -Dcuda=disabled -Dpython=disabled
# Only the binaries those suites run (a script test's are its arguments in the build folder):
# the whole tree under a sanitizer takes twice as long.
# A folder configured by an earlier run regenerates first: its introspection must list the
# tests added since (a new test's executable was otherwise left unbuilt, and meson test failed).
ninja -C "$dir" build.ninja >/dev/null
mapfile -t targets < <(meson introspect "$dir" --tests --targets | /usr/bin/python3 -c '
import json, os, sys
root = os.path.abspath(sys.argv[1])
info = json.load(sys.stdin)
built = {os.path.normpath(f) for t in info["targets"] for f in t["filename"]}
for t in info["tests"]:
    if any(s.split(":")[-1] in ("unit", "sanitize") for s in t["suite"]):
        for p in t["cmd"]:
            p = os.path.normpath(os.path.join(root, p))
            if p in built:
                print(os.path.relpath(p, root))' "$dir" | sort -u)
ninja -C "$dir" "${targets[@]}"
# Reports fail the test: UBSan stops at the first, ASan always does, TSan exits 66 at the end.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
meson test -C "$dir" --no-rebuild --suite unit --suite sanitize --print-errorlogs \
  --num-processes 2 --timeout-multiplier 3
