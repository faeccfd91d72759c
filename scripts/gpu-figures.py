#!/usr/bin/env python3
"""Issue 47's figures, read from the logs of a GPU bundle's run (scripts/gpu-bundle-run.sh).

Prints a Markdown section: each figure the issue asks a GPU for, its goal, what the run measured,
and whether it meets the goal (yes, NO, or "not measured" with the log it lacked). run.sh puts it
at the top of summary.md's sections, so a run's 15 minutes end in the verdicts, not in tables to
read by hand. Only the standard library; a missing or cut-short log is "not measured", never an
error.

  - at 64M floats, the casts' and quantizers' encode and decode-add (the codec bench's combine)
    at >= 70% of the device's copy bandwidth, both as bytes read + written: an encode reads 4n
    and writes the payload, a decode-add reads the payload and 4n and writes 4n;
  - encode with error feedback at >= 0.8x the plain encode (the same table);
  - top-k at k = 0.001 n and 0.01 n (64M floats, topk's default route, sample=0) >= 3x faster
    than torch.topk of the magnitudes on the same GPU (check/topk_ref.py);
  - the 1-rank device all-reduce (the smallest size, out of place) at <= 10 us;
  - 2 ranks on one GPU at 256 MiB at >= half the HBM-traffic limit the benchmark prints.

Usage: scripts/gpu-figures.py LOGS_DIR   (run.sh's OUT/logs)
"""
import json
import os
import re
import sys

CASTS_AND_QUANTIZERS = ["fp16", "bf16", "int8", "qsgd", "onebit", "terngrad"]
FEEDBACK_CODECS = ["dense"] + CASTS_AND_QUANTIZERS
BIG = 64 << 20  # values: the size the bandwidth goals are read at


def read(logs, name):
    try:
        with open(os.path.join(logs, name), encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def codec_tables(text):
    """{values per chunk: {codec: row}} from sqz-codec-bench's tables, and the copy GB/s."""
    tables, values, copy, device = {}, None, None, None
    for line in text.splitlines():
        m = re.match(r"# sqz-codec-bench: CUDA kernels on (.*?), (\d+) float32 values per chunk",
                     line)
        if m:
            device, values = m.group(1), int(m.group(2))
            tables.setdefault(values, {})
            continue
        m = re.match(r"# device copy bandwidth: ([0-9.]+) GB/s", line)
        if m:
            copy = float(m.group(1))
            continue
        if values is None or line.startswith("#") or not line.strip():
            continue
        f = line.split()
        if len(f) < 7:
            continue
        name = f[0].split(":")[0]
        tables[values][name] = {"payload": number(f[1]), "encode": number(f[3]),
                                "encodeFB": number(f[4]), "combine": number(f[5])}
    return tables, copy, device


def verdict(ok):
    return "yes" if ok else "**NO**"


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit(__doc__.strip().splitlines()[-1])
    logs = sys.argv[1]
    rows = []  # (figure, goal, measured, met: True, False, or None where not measured)

    def add(figure, goal, value, ok, why=None):
        rows.append((figure, goal, value if ok is not None else "not measured: " + why, ok))

    bench = read(logs, "codec-bench.log")
    tables, copy, device = codec_tables(bench) if bench else ({}, None, None)
    big = tables.get(BIG, {})
    for codec in CASTS_AND_QUANTIZERS:
        row = big.get(codec)
        for what, column, extra in (("encode", "encode", 1), ("decode-add", "combine", 2)):
            figure = "%s %s, 64M floats" % (codec, what)
            goal = ">= 70% of copy (read + written)"
            if not row or row[column] is None or not copy or row["payload"] is None:
                add(figure, goal, None, None,
                    "logs/codec-bench.log has no 64M row or copy bandwidth")
                continue
            # GB/s of input (4n bytes) -> bytes read + written: (extra * 4n + payload) / 4n.
            traffic = row[column] * (extra + row["payload"] / (4.0 * BIG))
            share = traffic / copy
            add(figure, goal, "%.0f GB/s, %.0f%% of %.0f" % (traffic, 100 * share, copy),
                share >= 0.70)
    for codec in FEEDBACK_CODECS:
        row = big.get(codec)
        figure = "%s encode with feedback, 64M floats" % codec
        if not row or not row["encode"] or row["encodeFB"] is None:
            add(figure, ">= 0.8x plain encode", None, None, "no 64M row in logs/codec-bench.log")
            continue
        r = row["encodeFB"] / row["encode"]
        add(figure, ">= 0.8x plain encode",
            "%.3g / %.3g GB/s = %.2fx" % (row["encodeFB"], row["encode"], r), r >= 0.8)

    ours = {}
    selection = r"topk:ratio=([0-9.]+),sample=0 encode \(select \+ gather\)\s+([0-9.]+) ms"
    for m in re.finditer(selection, bench or ""):
        ours[float(m.group(1))] = float(m.group(2))
    torch_text = read(logs, "torch-topk.log") or ""
    theirs = {}
    for m in re.finditer(r"ratio ([0-9.]+) k \d+: topk\(abs, sorted=False\) ([0-9.]+) ms",
                         torch_text):
        theirs[float(m.group(1))] = float(m.group(2))
    for ratio in (0.001, 0.01):
        figure = "top-k, k = %g n, 64M floats" % ratio
        goal = ">= 3x faster than torch.topk"
        if ratio not in ours or ratio not in theirs:
            lacks = "logs/codec-bench.log" if ratio not in ours else "logs/torch-topk.log"
            add(figure, goal, None, None, lacks + " has no row at this ratio")
            continue
        x = theirs[ratio] / ours[ratio]
        add(figure, goal, "%.2f ms, torch %.2f ms: %.2fx" % (ours[ratio], theirs[ratio], x),
            x >= 3)

    def perf_rows(name):
        text = read(logs, name)
        try:
            return json.loads(text)["rows"] if text else None
        except (ValueError, KeyError, TypeError):
            return None

    one = perf_rows("allreduce-default-n1-dense-256M.json")
    out = [r for r in one or [] if not r.get("inplace")]
    if out:
        r = min(out, key=lambda r: r["size"])
        add("1-rank device all-reduce, %d B" % r["size"], "<= 10 us",
            "%.1f us" % r["time_us"], r["time_us"] <= 10)
    else:
        add("1-rank device all-reduce", "<= 10 us", None, None,
            "no logs/allreduce-default-n1-dense-256M.json")
    two = perf_rows("allreduce-default-n2-dense-256M.json")
    at = [r for r in two or [] if r["size"] == 256 << 20]
    m = re.search(r"HBM-traffic limit: .* busbw <= ([0-9.]+) GB/s",
                  read(logs, "allreduce-default-n2-dense-256M.log") or "")
    if at and m:
        limit = float(m.group(1))
        best = max(r["busbw"] for r in at)
        add("2 ranks on one GPU, 256 MiB", ">= half the HBM-traffic limit",
            "busbw %.1f GB/s, %.0f%% of %.1f" % (best, 100 * best / limit, limit),
            best >= limit / 2)
    else:
        add("2 ranks on one GPU, 256 MiB", ">= half the HBM-traffic limit", None, None,
            "no 256 MiB row or limit in logs/allreduce-default-n2-dense-256M.*")

    measured = [r for r in rows if r[3] is not None]
    print("\n## Issue 47's figures: %d of %d measured meet their goal (%d not measured)\n"
          % (sum(bool(r[3]) for r in measured), len(measured), len(rows) - len(measured)))
    where = device or "unknown"
    print("Device: %s.%s\n" % (where, " **The CUDA stand-in: a dry run, not a GPU's figures.**"
                                 if "stand-in" in where else ""))
    print("| figure | goal | measured | met |\n|---|---|---|---|")
    for figure, goal, value, ok in rows:
        print("| %s | %s | %s | %s |" % (figure, goal, value, "-" if ok is None else verdict(ok)))
    ncu = read(logs, "ncu-codec-kernels.log")
    print("\nThe slowest kernels: %s." % ("logs/ncu-codec-kernels.log" if ncu else
                                         "no ncu log in this run"))


if __name__ == "__main__":
    main()
