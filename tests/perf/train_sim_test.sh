#!/usr/bin/env bash
# sqz-train-sim (tests/perf/meson.build): a short 2-rank run over dense, top-k and GraVAC whose
# -J file must parse and agree with the printed table, its traces must cover every step and
# evaluation, and perf/plot_train.py must draw it (skipped without matplotlib); bad flags exit 2.
# Usage: train_sim_test.sh SQZRUN TRAIN_SIM PLOT_TRAIN_PY
# Every check prints PASS or FAIL; the script exits 1 if any failed, 77 (skip) without
# /usr/bin/python3 to read the JSON.
set -u
if [ $# -ne 3 ]; then
  echo "usage: $0 SQZRUN TRAIN_SIM PLOT_TRAIN_PY" >&2
  exit 2
fi
sqzrun=$1 sim=$2 plot=$3
py=/usr/bin/python3
if ! [ -x "$py" ]; then
  echo "SKIP: no $py to read the JSON file"
  exit 77
fi
export SQZ_SOCKET_IFNAME=lo
export SQZ_CODEC_AUTO_DENSE=0  # the pay-off guard off, as in test_env: every top-k call compresses
# shellcheck source=../checks.sh
source "$(dirname "$0")/../checks.sh" perf_train_sim_test

specs=(dense topk:ratio=0.01 gravac:cf_min=10,cf_max=100,window=5)
args=(-p 64K -s 60 -E 10)
for s in "${specs[@]}"; do args+=(-c "$s"); done
if timeout 30 "$sqzrun" -n 2 "$sim" "${args[@]}" -J "$tmp/out.json" >"$tmp/out.txt" 2>"$tmp/err"; then
  pass "2 ranks, ${#specs[@]} specs: $(grep -c '^  ' "$tmp/out.txt") table lines"
else
  fail "$sim ${args[*]} exited $?: $(cat "$tmp/err")"
  exit 1
fi

if out=$("$py" - "$tmp/out.json" "$tmp/out.txt" "${specs[@]}" <<'PY' 2>&1
import json, sys
path, printed, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
d = json.load(open(path, encoding="utf-8"))
assert d["format"] == "squeeze-train-sim/1" and d["program"] == "sqz-train-sim", d["format"]
assert d["nranks"] == 2 and len(d["hosts"]) == 2, (d["nranks"], d["hosts"])
s = d["settings"]
assert s["model"] == "quadratic" and s["params"] == 65536 and s["max_steps"] == 60, s
assert abs(s["target_loss"] - s["target"] * s["initial_loss"]) <= 1e-9 * s["initial_loss"], s
runs = d["runs"]
assert [r["spec"] for r in runs] == specs, [r["spec"] for r in runs]
lines = [l.split() for l in open(printed) if l.startswith("  ")]
assert len(lines) == len(runs), lines
for r, cols in zip(runs, lines):
    steps = r["steps"]
    assert 1 <= steps <= 60 and (r["reached"] or steps == 60), r["steps"]
    assert len(r["cf"]) == len(r["call_ratio"]) == len(r["phase"]) == steps, r["spec"]
    assert r["eval_steps"][0] == 0 and r["eval_steps"][-1] == steps, r["eval_steps"]
    assert all(b - a == 10 for a, b in zip(r["eval_steps"], r["eval_steps"][1:])), r["eval_steps"]
    assert len(r["eval_loss"]) == len(r["eval_steps"]), r["spec"]
    assert r["eval_loss"][0] == s["initial_loss"] and r["final_loss"] == r["eval_loss"][-1]
    assert r["eval_loss"][-1] < r["eval_loss"][0], (r["spec"], r["eval_loss"])
    assert all(c >= 1 for c in r["cf"]), (r["spec"], r["cf"])
    assert r["dense_bytes"] == 2 * steps * 65536 * 4, (r["spec"], r["dense_bytes"])
    assert 0 < r["wire_bytes"] <= r["dense_bytes"], r["spec"]
    assert abs(r["mean_cf"] - sum(r["cf"]) / steps) < 1e-9 * r["mean_cf"], r["spec"]
    t = r["time_to_target_s"] if r["reached"] else r["train_s"]
    got = [r["spec"], "yes" if r["reached"] else "no", str(steps), "%.3f" % t,
           "%.1f" % (r["wire_bytes"] / 1e6), "%.1f" % (r["dense_bytes"] / 1e6),
           "%.1f" % r["mean_cf"], str(r["dense_calls"])]
    assert got == cols[:8], (got, cols)
dense, topk, gravac = runs
assert set(dense["cf"]) == {1} and dense["wire_bytes"] == dense["dense_bytes"], dense["cf"]
assert set(topk["cf"]) == {100} and topk["dense_calls"] == 0, topk["cf"]  # the guard is off
assert all(45 < x < 55 for x in topk["call_ratio"]), topk["call_ratio"]  # index + value
assert set(gravac["phase"]) <= {1, 2}, gravac["phase"]
print("%d runs match the table; final losses %s" % (
    len(runs), ", ".join("%.4g" % r["final_loss"] for r in runs)))
PY
); then
  pass "JSON: $out"
else
  fail "JSON: $out"; sed 's/^/    | /' "$tmp/out.txt"
fi

if why=$("$py" -c 'import matplotlib' 2>&1); then
  if "$py" "$plot" -o "$tmp/out.png" "$tmp/out.json" >"$tmp/plot.log" 2>&1 &&
    [ "$(head -c 8 "$tmp/out.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
    pass "plot_train.py: $(stat -c %s "$tmp/out.png") byte PNG"
  else
    fail "plot_train.py: $(cat "$tmp/plot.log")"
  fi
  echo '{"format": "squeeze-perf/1", "rows": []}' >"$tmp/other.json"
  "$py" "$plot" -o "$tmp/bad.png" "$tmp/other.json" >"$tmp/plot.log" 2>&1
  rc=$?
  if [ $rc = 2 ] && grep -q "format is 'squeeze-perf/1'" "$tmp/plot.log" && ! [ -e "$tmp/bad.png" ]; then
    pass "plot_train.py on another format: exit 2, $(cat "$tmp/plot.log")"
  else
    fail "plot_train.py on another format: exit $rc: $(cat "$tmp/plot.log")"
  fi
else
  echo "SKIP (plot part): $py cannot import matplotlib: $why"
fi

# Bad flags: exit 2 with a message, before any training; a bad spec leaves no -J file.
bad() {  # NAME EXPECTED-MESSAGE-PART ARGS...
  local name=$1 want=$2
  shift 2
  timeout 15 "$sim" "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
  local rc=$?
  if [ $rc = 2 ] && grep -qF -- "$want" "$tmp/bad.err" && ! grep -q '^  ' "$tmp/bad.out"; then
    pass "$name: exit 2, $(head -1 "$tmp/bad.err")"
  else
    fail "$name: exit $rc (expected 2 and '$want'): $(cat "$tmp/bad.err")"
  fi
}
bad "unknown model" "unknown model 'linear'" -m linear
bad "bad size" "invalid parameter count" -p 12Q
bad "quadratic target >= 1" "fraction of the initial loss" -t 2
bad "noise with softmax" "-V and -D apply to -m quadratic" -m softmax -V 1
bad "unknown flag" "unknown flag -x" -x
bad "bad codec spec" "bad codec spec 'nope'" -p 4K -s 2 -c nope -J "$tmp/nope.json"
if [ -e "$tmp/nope.json" ] || [ -e "$tmp/nope.json.tmp" ]; then
  fail "a run stopped by a bad spec left $(ls "$tmp" | grep nope)"
fi

if [ $failures -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
