#!/usr/bin/env bash
# perf/plot.py (tests/perf/meson.build): PNGs against size and against codec from
# sqz-allreduce-perf -J files, the Markdown table, and exit 2 with a message on bad input.
# Usage: plot_test.sh ALLREDUCE_PERF PLOT_PY
# Every check prints PASS or FAIL; the script exits 1 if any failed, 77 (skip) when
# /usr/bin/python3 has no matplotlib.
set -u
if [ $# -ne 2 ]; then
  echo "usage: $0 ALLREDUCE_PERF PLOT_PY" >&2
  exit 2
fi
perf=$1 plot=$2
py=/usr/bin/python3
if ! why=$("$py" -c 'import matplotlib' 2>&1); then
  echo "SKIP: $py cannot import matplotlib (Debian: apt-get install python3-matplotlib): $why"
  exit 77
fi
export SQZ_SOCKET_IFNAME=lo
# shellcheck source=../checks.sh
source "$(dirname "$0")/../checks.sh" perf_plot_test

sweep=(-b 8 -e 64K -f 8 -n 2 -w 1)
if ! timeout 15 "$perf" "${sweep[@]}" -J "$tmp/plain.json" >/dev/null 2>"$tmp/err" ||
  ! timeout 15 "$perf" "${sweep[@]}" -z fp16 -z topk:ratio=0.1 -J "$tmp/z.json" >/dev/null 2>>"$tmp/err"; then
  echo "FAIL: $perf -J did not run: $(cat "$tmp/err")"
  exit 1
fi

is_png() {  # the 8-byte PNG signature
  [ -s "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]
}
plots_png() {  # NAME OUT ARGS...: plot.py exits 0 and writes a PNG
  local name=$1 out=$2
  shift 2
  if "$py" "$plot" -o "$out" "$@" >"$tmp/plot.log" 2>&1 && is_png "$out"; then
    pass "$name: $(stat -c %s "$out") byte PNG"
  else
    fail "$name: plot.py $*: $(cat "$tmp/plot.log"); $(ls -l "$out" 2>&1)"
  fi
}
plots_png "--x size" "$tmp/size.png" "$tmp/plain.json" "$tmp/z.json"
plots_png "--x size --metric time_us --inplace --title" "$tmp/time.png" --metric time_us --inplace \
  --title 'a "title"' "$tmp/z.json"
plots_png "--x codec --size 32K" "$tmp/codec.png" --x codec --size 32K "$tmp/z.json" "$tmp/plain.json"

# A codec sweep whose algorithm changes with the size (-a: naive to 1K, ring above): one line per
# codec across every size, the algorithm shown by the points' markers, not a series per
# (algorithm, codec) in pieces.
if timeout 15 "$perf" "${sweep[@]}" -a 0-1K=naive,1K-inf=ring -z fp16 -z topk:ratio=0.1 \
  -J "$tmp/algos.json" >/dev/null 2>"$tmp/err"; then
  if "$py" - "$plot" "$tmp/algos.json" >"$tmp/plot.log" 2>&1 <<'EOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("plot", sys.argv[1])
plot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot)
docs = [plot.load(sys.argv[2])]
rows = plot.selected_rows(docs, sys.argv[2:], False)
plt = plot.pyplot()
fig, ax = plt.subplots()
plot.plot_by_size(rows, sys.argv[2:], "busbw", ax)
sizes = sorted({r["size"] for _, r in rows})
lines = {l.get_label(): list(l.get_xdata()) for l in ax.get_lines()
         if not l.get_label().startswith("_")}
want = {"fp16:auto_dense=0": sizes, "topk:ratio=0.1,auto_dense=0": sizes,
        "algo naive": [], "algo ring": []}
print("lines:", lines)
sys.exit(0 if lines == want else 1)
EOF
  then
    pass "codec sweep over two algorithms: one line per codec, a marker per algorithm"
  else
    fail "codec sweep over two algorithms: $(cat "$tmp/plot.log")"
  fi
  plots_png "--x codec, algorithms named" "$tmp/algos.png" --x codec --size 4K "$tmp/algos.json"
else
  fail "$perf -a ... -J did not run: $(cat "$tmp/err")"
fi

rejects() {  # NAME EXPECTED-MESSAGE-PART ARGS...: plot.py exits 2, says why, and writes no PNG
  local name=$1 want=$2
  shift 2
  rm -f "$tmp/bad.png"
  "$py" "$plot" "$@" >"$tmp/plot.log" 2>&1
  local rc=$?
  if [ $rc = 2 ] && grep -qF -- "$want" "$tmp/plot.log" && ! [ -e "$tmp/bad.png" ]; then
    pass "$name: exit 2, $(tail -1 "$tmp/plot.log")"
  else
    fail "$name: exit $rc (expected 2 and '$want'): $(cat "$tmp/plot.log")"
  fi
}
echo 'rows: [' >"$tmp/not.json"
echo '{"format": "gloo-bench/7", "rows": []}' >"$tmp/other.json"
rejects "not JSON" "is not JSON" -o "$tmp/bad.png" "$tmp/not.json"
rejects "another format" "format is 'gloo-bench/7'" -o "$tmp/bad.png" "$tmp/other.json"
rejects "missing file" "cannot read" -o "$tmp/bad.png" "$tmp/none.json"
echo '{"format": "squeeze-perf/1", "collective": "allreduce", "rows": []}' >"$tmp/empty.json"
rejects "no rows" "no out-of-place rows" -o "$tmp/bad.png" "$tmp/empty.json"
rejects "--x codec without --size" "needs --size" -o "$tmp/bad.png" --x codec "$tmp/z.json"
rejects "a size not in the file" "sizes in these files: 8 64 512 4K 32K" \
  -o "$tmp/bad.png" --x codec --size 64M "$tmp/z.json"

# The table: a header, a rule and one line per out-of-place row.
if "$py" "$plot" --table "$tmp/z.json" >"$tmp/table.md" 2>"$tmp/plot.log" &&
  head -1 "$tmp/table.md" | grep -q '^| size | library | algo | codec | time (us) | busbw' &&
  [ "$(grep -c '^| [0-9]' "$tmp/table.md")" = 10 ] && grep -q '^| 32K | squeeze | .* | fp16:auto_dense=0 |' "$tmp/table.md"; then
  pass "--table: $(($(wc -l <"$tmp/table.md") - 2)) rows"
else
  fail "--table: $(cat "$tmp/plot.log" "$tmp/table.md")"
fi

if [ $failures -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
