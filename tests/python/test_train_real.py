"""Smoke test of perf/train_real.py (real models through the DDP compression hook), its report
and its plot: each model for a few steps on 2 ranks started by sqzrun, then the -J file checked
against what the run must have done (one run per spec, a CF and a time per step, static CFs
exact, GraVAC's CFs among its candidates, the same spec twice giving the same trace, the probes'
gains falling with the CF), perf/train_real_report.py's table and perf/plot_train.py's PNG
(skipped without matplotlib). The long runs are perf/adaptive_real.sh.

    test_train_real.py SQZRUN PERF_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ranks  # noqa: E402

ranks.require("torch", "sklearn", "squeeze.torch")

SQZRUN, PERF = sys.argv[1], sys.argv[2]
STEPS, EVERY = 6, 3
GRAVAC_CFS = {1, 10, 20, 40, 80, 160, 320, 640}


def train(tmp, model, specs):
    out = os.path.join(tmp, f"{model}.json")
    argv = [SQZRUN, "-n", "2", "/usr/bin/python3", os.path.join(PERF, "train_real.py"), "-m",
            model, "-s", str(STEPS), "-E", str(EVERY), "--probe-every", "2", "-J", out]
    for spec in specs:
        argv += ["-c", spec]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"train_real {model}: exit {run.returncode}\n{run.stderr[-3000:]}"
    assert "to target" in run.stdout, run.stdout
    with open(out, encoding="utf-8") as f:
        return json.load(f), out


def check_run(run, spec):
    assert run["spec"] == spec, run["spec"]
    assert len(run["step_seconds"]) == STEPS and len(run["cf"]) == STEPS, run
    assert run["step_seconds"] == sorted(run["step_seconds"]) and run["step_seconds"][0] > 0
    assert run["eval_steps"] == list(range(EVERY, STEPS + 1, EVERY)), run["eval_steps"]
    assert all(v == v for v in run["eval_metric"]), run["eval_metric"]  # no NaN
    assert run["wire_bytes"] > 0 and run["dense_bytes"] > 0, run
    assert run["probes"], "no gain probes"
    for p in run["probes"]:
        g = [p["gains"][k] for k in sorted(p["gains"], key=float)]
        assert all(1 >= a >= b > 0 for a, b in zip(g, g[1:])), p  # more CF keeps less


def main():
    with tempfile.TemporaryDirectory() as tmp:
        specs = ["dense", "topk:ratio=0.1", "topk:ratio=0.1", "gravac:window=2",
                 "accordion:interval=2"]
        doc, mlp_path = train(tmp, "mlp", specs)
        assert doc["format"] == "squeeze-train-real/1" and doc["nranks"] == 2, doc.keys()
        runs = doc["runs"]
        assert len(runs) == len(specs), len(runs)
        for run, spec in zip(runs, specs):
            check_run(run, spec)
        dense, topk, topk_again, gravac, accordion = runs
        assert set(dense["cf"]) == {1.0} and dense["wire_bytes"] <= dense["dense_bytes"]
        assert all(abs(c - 10) < 1e-9 for c in topk["cf"]), topk["cf"]
        assert topk["wire_bytes"] < dense["wire_bytes"] / 3, (topk["wire_bytes"],
                                                               dense["wire_bytes"])
        # The same seeds: one spec twice trains the same model on the same batches.
        assert topk["eval_metric"] == topk_again["eval_metric"], (topk, topk_again)
        for calls in gravac["calls"].values():
            assert set(round(c) for c in calls["cf"]) <= GRAVAC_CFS, calls["cf"]
            assert all(g is not None and 0 < g <= 1 + 1e-9 for g in calls["gain"]), calls
        assert all(c >= 1 for c in accordion["cf"]), accordion["cf"]
        print(f"ok: mlp, {len(specs)} runs of {STEPS} steps")

        for model in ("cnn", "transformer"):
            other, _ = train(tmp, model, ["topk:ratio=0.01"])
            check_run(other["runs"][0], "topk:ratio=0.01")
            print(f"ok: {model}, metric {other['settings']['metric']} "
                  f"{other['runs'][0]['eval_metric'][-1]:.2f}")

        report = subprocess.run(["/usr/bin/python3", os.path.join(PERF, "train_real_report.py"),
                                 mlp_path], capture_output=True, text=True, timeout=60)
        assert report.returncode == 0, report.stderr
        for text in ("| top-k CF 10 |", "vs best static", "Raw gradient gain", "gravac"):
            assert text in report.stdout, (text, report.stdout)
        bad = subprocess.run(["/usr/bin/python3", os.path.join(PERF, "train_real_report.py"),
                              os.path.join(PERF, "train_real.py")], capture_output=True,
                             text=True, timeout=60)
        assert bad.returncode == 2 and "not" in bad.stderr, (bad.returncode, bad.stderr)
        print("ok: train_real_report.py (and exit 2 on a file that is not a trace)")

        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("plot_train.py: skipped (no matplotlib)")
            return
        png = os.path.join(tmp, "mlp.png")
        plot = subprocess.run(["/usr/bin/python3", os.path.join(PERF, "plot_train.py"), "-o",
                               png, mlp_path], capture_output=True, text=True, timeout=60)
        assert plot.returncode == 0 and os.path.getsize(png) > 10000, plot.stderr
        print(f"ok: plot_train.py, {os.path.getsize(png)} byte PNG")


if __name__ == "__main__":
    main()
