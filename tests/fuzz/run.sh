#!/usr/bin/env bash
# Runs one fuzz target (built by tests/fuzz/build.sh) for SECONDS on a copy of its corpus, then
# prints the executions, exec/s, coverage and crashes. New interesting inputs stay in the copy
# (BUILD_DIR/work/TARGET/corpus); fold them into tests/fuzz/corpus/TARGET with -merge=1 (README).
# Usage: tests/fuzz/run.sh TARGET SECONDS [BUILD_DIR (default build-fuzzclang)] [libFuzzer flags]
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 TARGET SECONDS [BUILD_DIR] [-flag=value...]  (e.g. $0 codec 600)" >&2
  exit 2
fi
target="$1"
seconds="$2"
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="${3:-build-fuzzclang}"
shift $(( $# < 3 ? $# : 3 ))
exe="$build/fuzz_$target"
[ -x "$exe" ] || { echo "$0: $exe not built; run tests/fuzz/build.sh $build $target" >&2; exit 2; }
[ -d "$src/tests/fuzz/corpus/$target" ] ||
  { echo "$0: no corpus tests/fuzz/corpus/$target (targets: $(ls "$src/tests/fuzz/corpus"))" >&2; exit 2; }

work="$build/work/$target"
rm -rf "$work/corpus" "$work/artifacts"  # artifacts of an earlier run: copy them out first
mkdir -p "$work/corpus" "$work/artifacts"
cp "$src/tests/fuzz/corpus/$target"/* "$work/corpus/"
dict=()
[ -f "$src/tests/fuzz/$target.dict" ] && dict=(-dict="$src/tests/fuzz/$target.dict")
log="$work/fuzz.log"
export SQZ_SOCKET_IFNAME="${SQZ_SOCKET_IFNAME:-lo}"  # loopback only on this machine

set +e
"$exe" -max_total_time="$seconds" -max_len=8192 -timeout=20 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "${dict[@]}" "$@" "$work/corpus" \
  > "$log" 2>&1
rc=$?
set -e

# A run that stops early (a crash in the seeds) has no stats: || true keeps the report going.
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" || true)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" || true)
cov=$(grep -aoE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
crashes=$(find "$work/artifacts" -type f | wc -l)
echo "target:     $target ($seconds s, exit $rc)"
echo "executions: ${execs:-?}  (${rate:-?} exec/s)"
echo "coverage:   ${cov:-?}  corpus: $(ls "$work/corpus" | wc -l) inputs"
echo "crashes:    $crashes$( [ "$crashes" -gt 0 ] && echo " in $work/artifacts: $(ls "$work/artifacts" | tr '\n' ' ')")"
if [ "$rc" -ne 0 ]; then
  grep -a -m1 -A30 -E '^==[0-9]+==ERROR|runtime error|fuzz contract broken|deadly signal' "$log" | head -40
  exit "$rc"
fi
