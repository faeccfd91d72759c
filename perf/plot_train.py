#!/usr/bin/python3
"""Plots the -J files of sqz-train-sim (format squeeze-train-sim/1: CF and loss against step)
and of perf/train_real.py (squeeze-train-real/1: CF and the test metric against training time).

  perf/plot_train.py -o OUT.png [--title T] FILE.json...

Two panels, one line per spec (per run of every file): the compression factor each step used
(values per value sent; 1 = dense, log scale) and the loss (log scale) or test metric at each
evaluation, with the target as a dashed line. Files of one format at a time. Legend labels are
the specs, with the file's name added when two runs would otherwise look alike. Bad input
(unreadable, not JSON, another format, mixed formats, no runs) exits 2 with a message.
"""

import argparse
import json
import os
import sys

# plot.py's error type, matplotlib loader and PNG writer (this script's directory is on sys.path).
from plot import InputError, pyplot, save_png

# Per format: the members of each run read here (the rest may be missing), the x of every step
# (None: the step number) and of every evaluation, and the evaluated value.
FORMATS = {
    "squeeze-train-sim/1": {"x": None, "eval_x": "eval_steps", "eval_y": "eval_loss"},
    "squeeze-train-real/1": {"x": "step_seconds", "eval_x": "eval_seconds",
                             "eval_y": "eval_metric"},
}


def load(path):
    """The file's object, checked for the format and the members read here."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise InputError("cannot read %s: %s" % (path, e.strerror or e))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError("%s is not JSON (%s); pass the files that sqz-train-sim -J FILE writes"
                         % (path, e))
    if not isinstance(doc, dict) or doc.get("format") not in FORMATS:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise InputError("%s: format is %r, expected one of %s (the files that sqz-train-sim -J "
                         "and perf/train_real.py -J write; perf/plot.py reads the sqz-*-perf "
                         "ones)" % (path, found, ", ".join(sorted(FORMATS))))
    keys = FORMATS[doc["format"]]
    runs = doc.get("runs")
    if not isinstance(runs, list) or not runs:
        raise InputError("%s: 'runs' is missing, empty or not a list" % path)
    for i, run in enumerate(runs):
        required = ["spec", "cf"] + [k for k in keys.values() if k]
        missing = [k for k in required if not isinstance(run, dict) or k not in run]
        if missing:
            raise InputError("%s: run %d lacks %s" % (path, i, ", ".join(missing)))
        for a, b in ((keys["eval_x"], keys["eval_y"]), (keys["x"], "cf")):
            if a and len(run[a]) != len(run[b]):
                raise InputError("%s: run %d (%s): %d %s but %d %s values"
                                 % (path, i, run["spec"], len(run[a]), a, len(run[b]), b))
    return doc


def labels_of(keys, paths):
    """Legend label per (file index, run index, spec): the spec, plus the file's basename (else
    its path) where specs repeat."""
    labels = {k: str(k[2]) for k in keys}
    for name_of in (os.path.basename, str):
        counts = {}
        for k in keys:
            counts[labels[k]] = counts.get(labels[k], 0) + 1
        for k in [k for k in keys if counts[labels[k]] > 1]:
            labels[k] = "%s (%s)" % (k[2], name_of(paths[k[0]]))
    return labels


def positive(points):
    """The (x, y) pairs a log axis can show: y a finite number above 0 (null, NaN, infinity, as
    a diverged run's perplexity, and 0 dropped)."""
    return [(x, y) for x, y in points
            if isinstance(y, (int, float)) and 0 < y < float("inf")]


def default_title(docs):
    models = sorted({str(d.get("settings", {}).get("model", "?")) for d in docs})
    nranks = sorted({d.get("nranks") for d in docs if isinstance(d.get("nranks"), int)})
    program = "sqz-train-sim" if docs[0]["format"] == "squeeze-train-sim/1" else "train_real.py"
    text = program + ", " + ", ".join(models)
    if nranks:
        text += ", %s rank%s" % ("/".join(map(str, nranks)), "" if nranks == [1] else "s")
    return text


def plot(args, docs):
    formats = sorted({d["format"] for d in docs})
    if len(formats) > 1:
        raise InputError("the files mix formats (%s); plot one program's files at a time"
                         % ", ".join(formats))
    keys_of = FORMATS[formats[0]]
    settings = docs[0].get("settings", {})
    # train_real's metric names itself; accuracy reads best on a linear axis.
    metric = settings.get("metric", "loss") if keys_of["x"] else "loss"
    log_metric = "accuracy" not in metric
    plt = pyplot()
    keys = [(i, j, run["spec"]) for i, d in enumerate(docs) for j, run in enumerate(d["runs"])]
    labels = labels_of(keys, args.files)
    fig, (ax_cf, ax_loss) = plt.subplots(2, 1, sharex=True, figsize=(8, 7), dpi=120)
    drawn = 0
    for n, (i, j, _) in enumerate(keys):
        run = docs[i]["runs"][j]
        color = "C%d" % (n % 10)
        style = ("-", "--", ":")[(n // 10) % 3]  # matplotlib has 10 colors; past them, dashes
        xs = run[keys_of["x"]] if keys_of["x"] else range(1, len(run["cf"]) + 1)
        cf = positive(zip(xs, run["cf"]))  # cf[0] is step 1's
        loss = positive(zip(run[keys_of["eval_x"]], run[keys_of["eval_y"]]))
        if cf:
            ax_cf.plot([x for x, _ in cf], [y for _, y in cf], color=color, linestyle=style,
                       linewidth=1, label=labels[(i, j, run["spec"])])
        if loss:
            ax_loss.plot([x for x, _ in loss], [y for _, y in loss], color=color,
                         linestyle=style, marker="o", markersize=2,
                         label=labels[(i, j, run["spec"])])
        drawn += bool(cf or loss)
    if not drawn:
        raise InputError("no steps to plot in %s (every run is empty)" % ", ".join(args.files))
    if keys_of["x"] and log_metric:
        # A diverged run's perplexity runs to 1e300 and would squash the others into a line:
        # the axis ends a little above the highest first evaluation, and such a run leaves it.
        evals = [positive(zip(run[keys_of["eval_x"]], run[keys_of["eval_y"]]))
                 for d in docs for run in d["runs"]]
        firsts = [e[0][1] for e in evals if e]
        if firsts:
            lowest = min(y for e in evals for _, y in e)
            ax_loss.set_ylim(0.8 * lowest, 1.5 * max(firsts))
    targets = {d.get("settings", {}).get("target_loss", d.get("settings", {}).get("target"))
               for d in docs}
    if len(targets) == 1 and isinstance(next(iter(targets)), (int, float)):
        ax_loss.axhline(next(iter(targets)), color="grey", linestyle="--", linewidth=1,
                        label="target")
    for ax, ylabel, log in ((ax_cf, "CF used (values per value sent)", True),
                            (ax_loss, metric, log_metric)):
        if log:
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize="small")
    ax_loss.set_xlabel("training seconds (rank 0)" if keys_of["x"] else "step")
    ax_cf.set_title(args.title if args.title is not None else default_title(docs))
    save_png(plt, fig, args.output)


def main(argv):
    parser = argparse.ArgumentParser(
        prog="plot_train.py", description=__doc__.split("\n\n")[0],
        epilog="Files come from sqz-train-sim -J FILE or perf/train_real.py -J FILE.")
    parser.add_argument("files", nargs="+", metavar="FILE.json")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    parser.add_argument("--title", help="plot title (default: program, model, ranks)")
    args = parser.parse_args(argv)
    try:
        plot(args, [load(p) for p in args.files])
    except InputError as e:
        print("plot_train.py: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
