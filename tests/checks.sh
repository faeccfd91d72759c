# Sourced by the shell tests: a scratch directory removed on exit ($tmp, named after the test)
# and the pass/fail tally they report with. Usage: source checks.sh NAME, then pass/fail; the
# test ends by reporting $failures.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
pass() { echo "PASS: $*"; }
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
