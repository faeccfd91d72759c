#!/usr/bin/env bash
# -J FILE of the perf binaries (tests/perf/meson.build): sqz-allreduce-perf on one rank, with and
# without -z (the pay-off guard off by default, --guard, a spec's own auto_dense), and on two
# ranks under sqzrun, checked against the rows it printed; an unwritable path and a run stopped
# by a bad flag leave no file; sqz-codec-bench's rows.
# Usage: json_test.sh SQZRUN ALLREDUCE_PERF CODEC_BENCH
# Every check prints PASS or FAIL; the script exits 1 if any failed, 77 (skip) without
# /usr/bin/python3 to read the JSON.
set -u
if [ $# -ne 3 ]; then
  echo "usage: $0 SQZRUN ALLREDUCE_PERF CODEC_BENCH" >&2
  exit 2
fi
sqzrun=$1 perf=$2 codec_bench=$3
py=/usr/bin/python3
if ! [ -x "$py" ]; then
  echo "SKIP: no $py to read the JSON files"
  exit 77
fi
export SQZ_SOCKET_IFNAME=lo
# shellcheck source=../checks.sh
source "$(dirname "$0")/../checks.sh" perf_json_test

# check_perf JSON PRINTED NRANKS [CODEC...]: the file against the table printed next to it. Each
# printed row is an out-of-place and an in-place JSON row; every figure, formatted as the binary
# prints it, must give the printed text back. CODEC is each spec as it ran (the codec column,
# with the pay-off guard's key added); the dense column must say what the guard did: with
# auto_dense=0 no timed call of a tensor of min_bytes (16K) or more runs dense, with
# auto_dense=1 the guard's fourth call (dense, while it measures) is a timed one (-w 1 -n 2).
check_perf() {
  "$py" - "$@" <<'PY'
import json, re, sys
path, printed, nranks, codecs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
d = json.load(open(path, encoding="utf-8"))
def need(cond, what):
    if not cond:
        sys.exit("%s: %s" % (path, what))
need(d.get("format") == "squeeze-perf/1", "format is %r" % d.get("format"))
for k, v in (("library", "squeeze"), ("program", "sqz-allreduce-perf"),
             ("collective", "allreduce"), ("nranks", nranks)):
    need(d.get(k) == v, "%s is %r, expected %r" % (k, d.get(k), v))
need(isinstance(d.get("hosts"), list) and len(d["hosts"]) == nranks
     and all(isinstance(h, str) and h for h in d["hosts"]), "hosts %r" % d.get("hosts"))
need(isinstance(d.get("transport"), str), "transport %r" % d.get("transport"))
need(d.get("command", "").endswith(" " + path), "command %r" % d.get("command"))
need(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", d.get("date", "")), "date %r" % d.get("date"))
need(d.get("env", {}).get("SQZ_SOCKET_IFNAME") == "lo", "env %r" % d.get("env"))
need(d["env"].get("SQZ_UNIQUE_ID") in (None, "(set, hidden)"), "the unique id leaked into env")
lines = [l.split() for l in open(printed) if l.strip() and not l.startswith("#")]
rows = d["rows"]
need(len(lines) > 0, "nothing printed")
need(len(rows) == 2 * len(lines), "%d rows for %d printed rows" % (len(rows), len(lines)))
keys = ["size", "count", "type", "redop", "root", "inplace", "time_us", "algbw", "busbw",
        "wrong", "algo", "codec", "wire_per_rank", "ratio", "relerr", "dense_calls"]
def time_text(us):
    return "%.*f" % (0 if us >= 10000 else 1 if us >= 100 else 2, us)
for i, row in enumerate(rows):
    need(list(row) == keys, "row %d keys %s" % (i, list(row)))
    cols = lines[i // 2]
    half = cols[5:9] if not row["inplace"] else cols[9:13]
    need(row["inplace"] == (i % 2 == 1), "row %d: inplace %r" % (i, row["inplace"]))
    got = [str(row["size"]), str(row["count"]), row["type"], row["redop"], str(row["root"]),
           time_text(row["time_us"]), "%.2f" % row["algbw"], "%.2f" % row["busbw"],
           str(row["wrong"])]
    need(got == cols[:5] + half, "row %d: %s, printed %s" % (i, got, cols[:5] + half))
    need(row["wrong"] == 0, "row %d: wrong %r" % (i, row["wrong"]))
    need(row["algo"] in cols[13].split("/"), "row %d: algo %r, printed %r" % (i, row["algo"], cols[13]))
    if not codecs:
        need(len(cols) == 14, "printed row %d has codec columns" % (i // 2))
        need(row["codec"] is None and row["wire_per_rank"] is None and row["ratio"] is None
             and row["relerr"] is None and row["dense_calls"] is None,
             "row %d: codec columns without -z" % i)
    else:
        need(row["codec"] == cols[14] and row["codec"] in codecs, "row %d: codec %r" % (i, row["codec"]))
        fmt = lambda v, f: "N/A" if v is None else f % v
        got = [fmt(row["wire_per_rank"], "%.0f"), fmt(row["ratio"], "%.2f"), fmt(row["relerr"], "%.2e")]
        need(got == cols[15:18], "row %d: %s, printed %s" % (i, got, cols[15:18]))
        need(row["relerr"] is not None, "row %d: relerr not measured" % i)
        if row["inplace"]:
            dense = rows[i - 1]["dense_calls"] + row["dense_calls"]
            need(cols[18] == "%d/4" % dense, "row %d: dense %d, printed %s" % (i, dense, cols[18]))
            lossy = not row["codec"].startswith("dense")
            if lossy and row["size"] < 16384:
                need(dense == 4, "row %d: %d of 4 calls below min_bytes ran dense" % (i, dense))
            elif "auto_dense=1" in row["codec"]:
                need(dense >= 1, "row %d: the guard's measuring call is not counted" % i)
            else:
                need(dense == 0, "row %d: %d calls ran dense without the guard" % (i, dense))
print("%d rows, %d ranks on %s" % (len(rows), nranks, ",".join(d["hosts"])))
PY
}

run_case() {  # NAME JSON NRANKS [CODEC...] -- COMMAND...
  local name=$1 json=$2 nranks=$3
  shift 3
  local codecs=()
  while [ "$1" != "--" ]; do codecs+=("$1"); shift; done
  shift
  if ! timeout 15 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; then
    fail "$name: $* exited $?"; sed 's/^/    | /' "$tmp/$name.err"; return
  fi
  if [ -e "$json.tmp" ]; then fail "$name: $json.tmp left behind"; return; fi
  if out=$(check_perf "$json" "$tmp/$name.out" "$nranks" "${codecs[@]}" 2>&1); then
    pass "$name: $out"
  else
    fail "$name: $out"; sed 's/^/    | /' "$tmp/$name.out"
  fi
}

sweep=(-b 8 -e 64K -f 8 -n 2 -w 1)
run_case one-rank "$tmp/a.json" 1 -- "$perf" "${sweep[@]}" -J "$tmp/a.json"
run_case one-rank-z "$tmp/z.json" 1 topk:ratio=0.1,auto_dense=0 -- \
  "$perf" "${sweep[@]}" -z topk:ratio=0.1 --json "$tmp/z.json"
run_case two-ranks "$tmp/two.json" 2 -- "$sqzrun" -n 2 "$perf" "${sweep[@]}" -J "$tmp/two.json"
run_case two-ranks-z "$tmp/two-z.json" 2 fp16:auto_dense=0 int8:auto_dense=0 dense -- \
  "$sqzrun" -n 2 "$perf" -b 1K -e 64K -f 8 -n 2 -w 1 -z fp16 -z int8 -z dense -J "$tmp/two-z.json"
# The pay-off guard of -z: off by default (the test environment's SQZ_CODEC_AUTO_DENSE=0 unset),
# on with --guard (which wins over that variable), and a spec's own auto_dense wins over both.
run_case z-default "$tmp/zd.json" 1 topk:ratio=0.1,auto_dense=0 -- \
  env -u SQZ_CODEC_AUTO_DENSE "$perf" "${sweep[@]}" -z topk:ratio=0.1 -J "$tmp/zd.json"
run_case z-guard "$tmp/zg.json" 1 topk:ratio=0.1,auto_dense=1 fp16:auto_dense=0 -- \
  "$perf" "${sweep[@]}" -z topk:ratio=0.1 -z fp16:auto_dense=0 --guard -J "$tmp/zg.json"
for c in "z-default:off (auto_dense=0: -z measures the codec" "z-guard:on (auto_dense=1: --guard)" \
  "one-rank-z:off (auto_dense=0: SQZ_CODEC_AUTO_DENSE)"; do
  if grep -qF "# -z: the pay-off guard is ${c#*:}" "$tmp/${c%%:*}.out"; then
    pass "${c%%:*}: the header says the guard is ${c#*:}"
  else
    fail "${c%%:*}: no header line saying the guard is ${c#*:}"; grep '^# -z' "$tmp/${c%%:*}.out"
  fi
done

# Without -J the table is what it was: the same header, the same rows but for the timings.
timeout 15 "$perf" "${sweep[@]}" >"$tmp/plain.out" 2>&1
shape() { grep -v -e ' Pid ' -e 'Avg bus bandwidth' "$1" | awk '/^#/ {print; next} {print $1, $2, $3, $4, $5, $9, $13, $14}'; }
if diff <(shape "$tmp/plain.out") <(shape "$tmp/one-rank.out") >"$tmp/shape.diff"; then
  pass "the printed table is the same with and without -J"
else
  fail "the printed table changed with -J:"; sed 's/^/    | /' "$tmp/shape.diff"
fi

# An unwritable path: exit 2 before any collective (nothing printed), naming the file and why.
timeout 15 "$perf" -b 8 -e 8 -J /nonexistent/dir/x.json >"$tmp/bad.out" 2>"$tmp/bad.err"
rc=$?
if [ $rc = 2 ] && grep -q "'/nonexistent/dir/x.json': No such file or directory" "$tmp/bad.err" &&
  ! [ -s "$tmp/bad.out" ]; then
  pass "unwritable -J path: exit 2, $(cat "$tmp/bad.err")"
else
  fail "unwritable -J path: exit $rc, stderr: $(cat "$tmp/bad.err"), stdout: $(head -c 200 "$tmp/bad.out")"
fi
timeout 15 "$perf" -b 8 -e 8 -J "$tmp" >/dev/null 2>"$tmp/dir.err"
rc=$?
if [ $rc = 2 ] && grep -q "is a directory" "$tmp/dir.err"; then
  pass "-J naming a directory: exit 2, $(cat "$tmp/dir.err")"
else
  fail "-J naming a directory: exit $rc, stderr: $(cat "$tmp/dir.err")"
fi
# A run that stops after the file was opened (a bad codec spec) leaves neither file nor .tmp.
timeout 15 "$perf" -b 8 -e 8 -z no-such-codec -J "$tmp/stopped.json" >/dev/null 2>"$tmp/stopped.err"
rc=$?
if [ $rc = 2 ] && ! [ -e "$tmp/stopped.json" ] && ! [ -e "$tmp/stopped.json.tmp" ]; then
  pass "a run stopped by a bad -z leaves no JSON file"
else
  fail "a run stopped by a bad -z: exit $rc, files: $(ls "$tmp" | grep stopped)"
fi

# sqz-codec-bench -J: one row per codec, the printed payload and ratio.
if timeout 15 "$codec_bench" -s 4K -r 1 -z fp16 -z topk:ratio=0.01 -J "$tmp/cb.json" \
  >"$tmp/cb.out" 2>&1 && out=$("$py" - "$tmp/cb.json" "$tmp/cb.out" <<'PY' 2>&1
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
printed = [l.split() for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")]
assert d["format"] == "squeeze-perf/1" and d["collective"] == "codec-bench", d
assert d["program"] == "sqz-codec-bench" and d["nranks"] == 1 and len(d["hosts"]) == 1, d
rows = d["rows"]
assert [r["codec"] for r in rows] == ["fp16", "topk:ratio=0.01"], rows
for r, p in zip(rows, printed):
    assert r["kind"] == "codec" and r["error"] is None, r
    got = [r["codec"], "%.0f" % r["payload_bytes"], "%.2f" % r["ratio"]] + \
          ["%.2f" % r[k] for k in ("encode_gbps", "encode_ef_gbps", "combine_gbps", "decode_gbps",
                                   "memcpy_gbps")]
    assert got == p[:8], (got, p)
    assert p[8] == "%.0f%%" % (100 * r["encode_ef_gbps"] / r["memcpy_gbps"]), p
print("%d codec rows match the table" % len(rows))
PY
); then
  pass "sqz-codec-bench -J: $out"
else
  fail "sqz-codec-bench -J: ${out:-exit $?}"; sed 's/^/    | /' "$tmp/cb.out"
fi

if [ $failures -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
