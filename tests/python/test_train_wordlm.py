"""Smoke test of perf/train_real.py's communication-bound model (wordlm: a word-level language
model over git's documentation, 12.8M parameters) with DGC as the seed specifies, through the
DDP hook: 2 ranks started by sqzrun, a few steps of DGC with clipping and the warm-up of the
sparsity and the learning rate, then the -J file checked against what the run must have done: a
gradient of at least 40 MB a step, DGC's CF following its warm-up schedule (4, 16, 64, 256, then
1/ratio), its optimizer without momentum (the codec applies it), its wire bytes a small fraction
of the dense bytes, a finite perplexity. The schedules themselves are checked as train_real.py
computes them. The long runs are perf/dgc_real.sh.

    test_train_wordlm.py SQZRUN PERF_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ranks  # noqa: E402

ranks.require("torch", "squeeze.torch")

SQZRUN, PERF = sys.argv[1], sys.argv[2]
sys.path.insert(0, PERF)
import real_models  # noqa: E402
import train_real  # noqa: E402

if not os.path.isdir(real_models.GIT_DOCS):
    ranks.skip(f"no {real_models.GIT_DOCS}: wordlm reads git's documentation (Debian's git)")

STEPS, WARMUP = 6, 4
DGC = f"dgc:ratio=0.001,momentum=0.9,clip=1,warmup={WARMUP}"


def main():
    # The schedules, as train_real.py computes them.
    args = train_real.parse_args(["-m", "wordlm", "--lr", "2", "--lr-warmup", "4"])
    assert [train_real.learning_rate(args, s) for s in (1, 2, 4, 5)] == [0.5, 1.0, 2.0, 2.0]
    assert [round(train_real.dgc_cf(DGC, c)) for c in range(6)] == [4, 16, 64, 256, 1000, 1000]

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "wordlm.json")
        argv = [SQZRUN, "-n", "2", "/usr/bin/python3", os.path.join(PERF, "train_real.py"),
                "-m", "wordlm", "-s", str(STEPS), "-E", str(STEPS), "--probe-every", "0",
                "--lr-warmup", str(WARMUP), "-c", DGC, "-J", out]
        run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, f"train_real: exit {run.returncode}\n{run.stderr[-3000:]}"
        with open(out, encoding="utf-8") as f:
            (dgc,) = json.load(f)["runs"]
    per_step = sum(c["n"] for c in dgc["calls"].values()) * 4  # fp32 bytes of the buckets
    assert per_step >= 40e6, f"wordlm's gradient is {per_step / 1e6:.1f} MB a step, not >= 40"
    assert dgc["optimizer_momentum"] == 0.0, dgc["optimizer_momentum"]
    # DDP rebuilds its one bucket after the first step, in the gradients' ready order, and the
    # hook makes a new codec for the new layout: the warm-up starts at step 2.
    assert [round(c) for c in dgc["cf"]] == [4, 4, 16, 64, 256, 1000], dgc["cf"]
    assert dgc["wire_bytes"] < dgc["dense_bytes"] / 5, (dgc["wire_bytes"], dgc["dense_bytes"])
    assert len(dgc["eval_metric"]) == 1 and 1 < dgc["eval_metric"][0] < 1e4, dgc["eval_metric"]
    print(f"ok: wordlm, {per_step / 1e6:.1f} MB of gradient a step; DGC's perplexity after "
          f"{STEPS} steps {dgc['eval_metric'][0]:.1f}, {dgc['wire_bytes'] / 1e6:.2f} MB sent for "
          f"{dgc['dense_bytes'] / 1e6:.1f} dense")

if __name__ == "__main__":
    main()
