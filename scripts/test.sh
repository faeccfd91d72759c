#!/usr/bin/env bash
# Builds Squeeze and runs the whole test suite (meson test), then the GPU tests over the CUDA
# stand-in, an emulated GPU (scripts/standin.sh), then the fast tests again under ASan+UBSan
# (scripts/sanitize.sh), and prints 'N passed, N failed, N skipped' for each stage (suite:,
# standin:, sanitized:) and for all (total:). Exit status: non-zero when any stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh || exit $?
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed_dirs=()  # the build folders of the stages that had failures, for failure_report
count() { local n; n=$(grep -E "^$1:" "$log" | tail -1 | awk '{print $2}'); echo "${n:-0}"; }
# Reads a stage's tallies from meson's log (timeouts count as failures; a stage that exited
# non-zero with no failed test, e.g. a build error, counts as one failure).
tally() {  # tally EXIT_STATUS
  ok=$(count Ok); skip=$(count Skipped); fail=$(( $(count Fail) + $(count Timeout) ))
  [ "$1" -ne 0 ] && [ "$fail" -eq 0 ] && fail=1
  echo "$ok passed, $fail failed, $skip skipped"
}
meson test -C build --print-errorlogs --num-processes 2 "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
suite=$(tally "$rc")
[ "$rc" -ne 0 ] && failed_dirs+=(build)
read -r suite_ok _ suite_fail _ suite_skip _ <<< "$suite"
# The device path over the CUDA stand-in; 77 (no CUDA headers) is a skipped stage.
scripts/standin.sh 2>&1 | tee "$log"
standin_rc=${PIPESTATUS[0]}
if [ "$standin_rc" -eq 77 ]; then
  standin="0 passed, 0 failed, 1 skipped"
  standin_rc=0
else
  standin=$(tally "$standin_rc")
  [ "$standin_rc" -ne 0 ] && failed_dirs+=(build-standin)
fi
read -r sti_ok _ sti_fail _ sti_skip _ <<< "$standin"
scripts/sanitize.sh address,undefined 2>&1 | tee "$log"
sanitize_rc=${PIPESTATUS[0]}
sanitized=$(tally "$sanitize_rc")
[ "$sanitize_rc" -ne 0 ] && failed_dirs+=(build-sanitize-address-undefined)
read -r san_ok _ san_fail _ san_skip _ <<< "$sanitized"
# Last, where a log's tail shows it (CI keeps only the end): each failed test, by name, with the
# end of its output.
for dir in "${failed_dirs[@]}"; do
  [ -f "$dir/meson-logs/testlog.json" ] || continue
  /usr/bin/python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
for line in open(d + "/meson-logs/testlog.json"):
    t = json.loads(line)
    if t["result"] in ("OK", "SKIP", "EXPECTEDFAIL"):
        continue
    out = (t.get("stdout") or "").splitlines()
    print("==== %s: %s (%s, %.1f s), the last %d lines of its output:" %
          (d, t["name"], t["result"], t["duration"], min(40, len(out))))
    print("\n".join(out[-40:]))
PY
done
echo "suite: $suite"
echo "standin: $standin"
echo "sanitized: $sanitized"
echo "total: $(( suite_ok + sti_ok + san_ok )) passed, $(( suite_fail + sti_fail + san_fail ))" \
  "failed, $(( suite_skip + sti_skip + san_skip )) skipped"
[ "$rc" -ne 0 ] && exit "$rc"
[ "$standin_rc" -ne 0 ] && exit "$standin_rc"
exit "$sanitize_rc"
