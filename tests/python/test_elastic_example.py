"""elastic-example: examples/elastic/train_elastic.py as a user runs it: 4 ranks train through
DDP and Squeeze's compression hook, one is lost and the survivors shrink and go on, a
replacement joins and the 4 finish; the script exits 0 only when every process did and the test
accuracy reached its target. Skips when torch, sklearn or squeeze.torch is missing.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ranks  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "elastic", "train_elastic.py")

if __name__ == "__main__":
    ranks.require("torch", "sklearn", "squeeze.torch")
    out = subprocess.run([sys.executable, EXAMPLE, "--timeout", "200"], capture_output=True,
                         text=True, timeout=240)
    print(out.stdout, end="")
    print(out.stderr, end="", file=sys.stderr)
    assert out.returncode == 0, f"train_elastic.py exited with {out.returncode}"
    for phase in ("shrank to 3 ranks", "a replacement joined; 4 ranks", "test accuracy"):
        assert phase in out.stdout, f"no '{phase}' line from rank 0"
