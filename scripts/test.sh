#!/usr/bin/env bash
# Builds Squeeze and runs the whole test suite (meson test), then prints one summary line
# 'N passed, N failed, N skipped'. Exit status: meson test's.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh || exit $?
log=$(mktemp)
meson test -C build --print-errorlogs --num-processes 2 "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
count() { grep -E "^$1:" "$log" | tail -1 | awk '{print $2}'; }
ok=$(count Ok); fail=$(count Fail); skip=$(count Skipped); timeout=$(count Timeout)
echo "${ok:-0} passed, $(( ${fail:-0} + ${timeout:-0} )) failed, ${skip:-0} skipped"
rm -f "$log"
exit "$rc"
