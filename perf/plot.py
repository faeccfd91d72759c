#!/usr/bin/python3
"""Plots or tabulates the -J files (format squeeze-perf/1) of sqz-*-perf and the peer drivers.

  perf/plot.py -o OUT.png [--title T] [--x size|codec] [--metric busbw|time_us|algbw]
               [--inplace] [--size 64M] FILE.json...
  perf/plot.py --table [--inplace] FILE.json...

--x size (the default) draws the metric (busbw by default) against the message size, one line
per series: the rows that share library, codec, type and redop within one file. The algorithm is
not part of a series: the tuner picks one per size (and codec), so it is a property of each
point, drawn as the point's marker when it changes along a line (a legend entry per algorithm).
Legend labels name the parts that differ between the series (a series' algorithm is the ones it
used, joined with '+') and add the file's name when two series would otherwise look alike.
--x codec draws a bar per codec (time_us by default) at one --size, each bar named with its
algorithm when they differ.
Out-of-place rows are used unless --inplace. --table prints a Markdown table of those rows for
RESULTS.md. Bad input (unreadable, not JSON, another format, no matching rows) exits 2.
"""

import argparse
import json
import os
import re
import sys

FORMAT = "squeeze-perf/1"
METRIC_LABELS = {
    "busbw": "bus bandwidth (GB/s)",
    "algbw": "algorithm bandwidth (GB/s)",
    "time_us": "time per call (us)",
}
# The row members every plot and table reads; the rest may be missing or null.
REQUIRED_KEYS = ("size", "inplace", "time_us", "algbw", "busbw")
# Label parts of a series, in legend order; `None` values show as the second element. "algo"
# does not split series (series_key): its value is the algorithms the series used.
SERIES_PARTS = (("library", "?"), ("algo", "?"), ("codec", "no codec"), ("type", "?"),
                ("redop", "?"))
ALGO_PART = 1
# Point markers, one per algorithm, where the algorithm changes along a line.
ALGO_MARKERS = "osD^vP*Xhp<>"


class InputError(Exception):
    """Bad input: reported as one line on stderr, exit status 2."""


def human_size(n):
    """1024 -> '1K', 1536 -> '1.5K', 64 << 20 -> '64M'."""
    for unit, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if n >= unit:
            return "%g%s" % (round(n / unit, 2), suffix)
    return "%d" % n


def parse_size(text):
    """'64M' -> 67108864; K/M/G are powers of 1024; a trailing B or iB is allowed."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(?:i?[bB])?\s*", text)
    if not m:
        raise InputError("invalid size '%s' for --size (bytes, e.g. 4096, 64K, 64M, 1G)" % text)
    unit = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(float(m.group(1)) * unit)


def load(path):
    """The file's object, checked for the format and the members read here."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise InputError("cannot read %s: %s" % (path, e.strerror or e))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError("%s is not JSON (%s); pass the files that -J FILE writes" % (path, e))
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise InputError("%s: format is %r, expected %r (the files that -J FILE writes)"
                         % (path, found, FORMAT))
    if doc.get("collective") == "codec-bench":
        raise InputError("%s is sqz-codec-bench output (per-codec speeds, no sizes); plot.py "
                         "plots the collectives' rows" % path)
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise InputError("%s: 'rows' is missing or not a list" % path)
    for i, row in enumerate(rows):
        missing = [k for k in REQUIRED_KEYS if not isinstance(row, dict) or k not in row]
        if missing:
            raise InputError("%s: row %d lacks %s" % (path, i, ", ".join(missing)))
        if not isinstance(row["size"], int):
            raise InputError("%s: row %d: size %r is not a whole number" % (path, i, row["size"]))
    return doc


def selected_rows(docs, paths, inplace):
    """(file index, row) for every row of the asked placement; library from the file."""
    out = []
    for index, doc in enumerate(docs):
        for row in doc["rows"]:
            if bool(row["inplace"]) == inplace:
                row = dict(row, library=row.get("library", doc.get("library")))
                out.append((index, row))
    if not out:
        raise InputError("no %s rows in %s" % ("in-place" if inplace else "out-of-place",
                                               ", ".join(paths)))
    return out


def series_labels(keys, paths):
    """Legend label per series key (file index, part values...): the parts that differ between
    the series, plus the file's basename (else its path) where labels would still collide."""
    varying = [i for i in range(len(SERIES_PARTS)) if len({k[1 + i] for k in keys}) > 1]
    base = {}
    for k in keys:
        base[k] = " ".join(str(k[1 + i]) if k[1 + i] is not None else SERIES_PARTS[i][1]
                           for i in varying)
    labels = dict(base)
    for name_of in (os.path.basename, str):
        counts = {}
        for k in keys:
            counts[labels[k]] = counts.get(labels[k], 0) + 1
        for k in [k for k in keys if counts[labels[k]] > 1]:
            name = name_of(paths[k[0]])
            labels[k] = "%s (%s)" % (base[k], name) if base[k] else name
    return labels


def series_key(index, row, with_codec=True):
    """(file index, part values...) of the row's series, the algorithm left out (None)."""
    parts = [row.get(name) for name, _ in SERIES_PARTS]
    parts[ALGO_PART] = None
    if not with_codec:
        parts[2] = None
    return (index,) + tuple(parts)


def with_algos(key, algos):
    """The series key with the algorithms its points used (first-seen order, '+'-joined; None
    when no row names one) in the algorithm's place, for its label."""
    names = []
    for a in algos:
        if a is not None and a not in names:
            names.append(a)
    parts = list(key)
    parts[1 + ALGO_PART] = "+".join(map(str, names)) if names else None
    return tuple(parts)


def default_title(docs, inplace):
    collectives = sorted({str(d.get("collective", "?")) for d in docs})
    nranks = sorted({d.get("nranks") for d in docs if isinstance(d.get("nranks"), int)})
    text = ", ".join(collectives)
    if nranks:
        text += ", %s rank%s" % ("/".join(map(str, nranks)), "" if nranks == [1] else "s")
    return text + (", in place" if inplace else ", out of place")


def pyplot():
    try:
        import matplotlib
    except ImportError as e:
        raise InputError("plotting needs matplotlib (%s); on Debian: apt-get install "
                         "python3-matplotlib, and run this script with /usr/bin/python3" % e)
    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt
    return plt


def save_png(plt, fig, path):
    """Lays the figure out, writes it to path as PNG (an unwritable path is bad input) and closes
    it."""
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as e:
        raise InputError("cannot write %s: %s" % (path, e.strerror or e))
    plt.close(fig)


def plot_by_size(rows, paths, metric, ax):
    grouped = {}
    for index, row in rows:
        value = row.get(metric)
        if row["size"] > 0 and isinstance(value, (int, float)):
            grouped.setdefault(series_key(index, row), []).append(
                (row["size"], value, row.get("algo")))
    if not grouped:
        raise InputError("no rows with a size above 0 and a %s value" % metric)
    series = {}
    for key, points in grouped.items():
        points.sort(key=lambda p: p[0])
        series[with_algos(key, [a for _, _, a in points])] = points
    labels = series_labels(list(series), paths)
    # A marker per algorithm, where some line changes algorithm; else plain dots.
    marker = {}
    if any("+" in str(key[1 + ALGO_PART]) for key in series):
        for points in series.values():
            for _, _, a in points:
                marker.setdefault(a, ALGO_MARKERS[len(marker) % len(ALGO_MARKERS)])
    sizes = set()
    for n, (key, points) in enumerate(series.items()):
        sizes.update(s for s, _, _ in points)
        color = "C%d" % (n % 10)
        ax.plot([s for s, _, _ in points], [v for _, v, _ in points], color=color,
                marker=None if marker else "o", markersize=3, label=labels[key] or None)
        for algo, m in marker.items():
            at = [(s, v) for s, v, a in points if a == algo]
            if at:
                ax.plot([s for s, _ in at], [v for _, v in at], color=color, marker=m,
                        markersize=5, linestyle="none")
    for algo, m in marker.items():  # legend entries for the markers
        ax.plot([], [], color="0.4", marker=m, linestyle="none",
                label="algo %s" % (algo if algo is not None else "?"))
    ax.set_xscale("log", base=2)
    ticks = sorted(sizes)
    step = max(1, (len(ticks) + 11) // 12)  # at most about 12 labels
    ticks = ticks[::step]
    ax.set_xticks(ticks)
    ax.set_xticklabels([human_size(s) for s in ticks])
    ax.minorticks_off()
    ax.set_xlabel("message size (bytes)")
    if metric == "time_us":
        ax.set_yscale("log")
    return any(labels.values()) or bool(marker)


def plot_by_codec(rows, paths, metric, size, ax):
    at_size = [(i, r) for i, r in rows if r["size"] == size]
    if not at_size:
        available = sorted({r["size"] for _, r in rows})
        raise InputError("no rows at size %s (%d bytes); sizes in these files: %s"
                         % (human_size(size), size, " ".join(human_size(s) for s in available)))
    codecs, grouped = [], {}
    for index, row in at_size:
        codec = row.get("codec") or "no codec"
        if codec not in codecs:
            codecs.append(codec)
        value = row.get(metric)
        if isinstance(value, (int, float)):
            grouped.setdefault(series_key(index, row, with_codec=False), {}).setdefault(
                codec, (value, row.get("algo")))
    if not grouped:
        raise InputError("no %s values at size %s" % (metric, human_size(size)))
    bars = {with_algos(key, [a for _, a in by_codec.values()]): by_codec
            for key, by_codec in grouped.items()}
    labels = series_labels(list(bars), paths)
    # The tuner may pick another algorithm per codec: then each bar is named with its own.
    name_bars = any("+" in str(key[1 + ALGO_PART]) for key in bars)
    color = {key: "C%d" % (n % 10) for n, key in enumerate(bars)}
    labelled = set()
    # Each codec's bars side by side, centred on it: only the series that have that codec.
    for x, codec in enumerate(codecs):
        present = [key for key in bars if codec in bars[key]]
        width = 0.8 / max(1, len(present))
        for n, key in enumerate(present):
            label = labels[key] if labels[key] and key not in labelled else None
            labelled.add(key)
            value, algo = bars[key][codec]
            centre = x - 0.4 + width * (n + 0.5)
            ax.bar(centre, value, width=width, color=color[key], label=label)
            if name_bars and algo is not None:
                ax.annotate(str(algo), (centre, value), ha="center", va="bottom",
                            fontsize="x-small")
    ax.set_xticks(range(len(codecs)))
    ax.set_xticklabels(codecs, rotation=30 if len(codecs) > 4 else 0, ha="right"
                       if len(codecs) > 4 else "center")
    ax.set_xlabel("codec at %s" % human_size(size))
    return any(labels.values())


def plot(args, docs, rows):
    plt = pyplot()
    metric = args.metric or ("busbw" if args.x == "size" else "time_us")
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    if args.x == "size":
        has_legend = plot_by_size(rows, args.files, metric, ax)
    else:
        if args.size is None:
            raise InputError("--x codec needs --size (e.g. --size 64M): the codecs are compared "
                             "at one message size")
        has_legend = plot_by_codec(rows, args.files, metric, parse_size(args.size), ax)
    ax.set_ylabel(METRIC_LABELS[metric])
    ax.set_title(args.title if args.title is not None else default_title(docs, args.inplace))
    ax.grid(True, which="major", alpha=0.3)
    if has_legend:
        ax.legend(fontsize="small")
    save_png(plt, fig, args.output)


def table(rows):
    def num(v, fmt):
        return fmt % v if isinstance(v, (int, float)) else "-"

    print("| size | library | algo | codec | time (us) | busbw (GB/s) | wire/rank (B) | ratio |")
    print("|---:|---|---|---|---:|---:|---:|---:|")
    for _, r in rows:
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            human_size(r["size"]), r.get("library") or "-", r.get("algo") or "-",
            r.get("codec") or "-", num(r.get("time_us"), "%.2f"), num(r.get("busbw"), "%.2f"),
            num(r.get("wire_per_rank"), "%.0f"), num(r.get("ratio"), "%.2f")))


def main(argv):
    parser = argparse.ArgumentParser(
        prog="plot.py", description=__doc__.split("\n\n")[0],
        epilog="Files come from -J FILE of sqz-*-perf (and the peer drivers).")
    parser.add_argument("files", nargs="+", metavar="FILE.json")
    parser.add_argument("-o", "--output", help="the PNG to write")
    parser.add_argument("--table", action="store_true",
                        help="print a Markdown table of the rows instead of plotting")
    parser.add_argument("--title", help="plot title (default: collective, ranks, placement)")
    parser.add_argument("--x", choices=("size", "codec"), default="size",
                        help="x axis: message size (lines) or codec at one --size (bars)")
    parser.add_argument("--metric", choices=sorted(METRIC_LABELS),
                        help="y axis (default: busbw against size, time_us against codec)")
    parser.add_argument("--inplace", action="store_true",
                        help="use the in-place rows (default: out-of-place)")
    parser.add_argument("--size", help="with --x codec: the message size, e.g. 64M")
    args = parser.parse_args(argv)
    if args.table == bool(args.output):
        parser.error("give either -o OUT.png (plot) or --table (Markdown table)")
    try:
        docs = [load(p) for p in args.files]
        rows = selected_rows(docs, args.files, args.inplace)
        if args.table:
            table(rows)
        else:
            plot(args, docs, rows)
    except InputError as e:
        print("plot.py: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
