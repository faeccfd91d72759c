#!/usr/bin/python3
"""Fits the tuner's all-reduce efficiency rows to the measurements of scripts/calibrate-tuner.sh.

Reads one or more raw files (lines "transport ranks algo bytes time_us algo_that_ran", and
"#model transport ranks key=value ..." from the init-time calibration's log line), then for each
transport:
  - prints, per rank count and size, every algorithm's median time, the pick the library made
    ("auto": what ran, judged by that algorithm's own runs), and the pick of the newly fit
    model, each against the fastest;
  - fits the rows (lat, latShared, bw, bwCold) of every algorithm over all rank counts and sizes
    at once: the multipliers on the theoretical terms of algorithms/registry.cc (mirrored in
    terms() below) that minimise the squared relative error, none negative;
  - takes the reference (median of what calibration measured in the runs).
Prints the rows as C++ for algorithms/calibration.cc and, with --write FILE, writes them as a
tuner file (format: algorithms/cost_model.h) for SQZ_TUNER_FILE. Standard library only.

Usage: fit_tuner.py [--write FILE] [--cores N] RAW...   (--cores: the measured host's cores,
default this host's)"""
import argparse
import collections
import itertools
import os
import statistics
import sys

CACHE = 2 << 20
# alpha, beta, gamma the rows are relative to: the defaults of SQZ_*_LATENCY_US, SQZ_*_GBPS and
# SQZ_REDUCE_GBPS (init-time calibration scales them by measured / reference).
MODEL = {"tcp": (40e-6, 1 / 1.2e9, 1 / 4e9), "shm": (8e-6, 1 / 2.5e9, 1 / 4e9)}
ALGOS = ["naive", "ps", "ring", "rhd", "tree"]
# Measured where it runs (shm), never fit: the tuner takes it wherever it applies.
DIRECT = "direct"
EVAL_MIN_BYTES = 65536  # the table's verdict covers these sizes and up


def log2_floor(p):
    l = 0
    while (2 << l) <= p:
        l += 1
    return l


def terms(algo, P, alpha, beta, gamma):
    """(latency, per-byte) theoretical terms of algorithms/registry.cc at P ranks."""
    F = (P - 1) / P
    if algo == "naive":
        return 2 * (P - 1) * alpha, 2 * (P - 1) * beta + (P - 1) * gamma
    if algo in ("ps", "ring"):
        return 2 * (P - 1) * alpha, 2 * F * beta + F * gamma
    if algo == "rhd":
        L = log2_floor(P)
        p2 = 1 << L
        f = (p2 - 1) / p2
        fold = P != p2
        return ((2 * L + (2 if fold else 0)) * alpha,
                2 * f * beta + f * gamma + ((2 * beta + gamma) if fold else 0))
    return 2 * (log2_floor(P) + 1) * alpha, 1.5 * beta + gamma  # tree


def features(algo, P, n, model, cores):
    """The four quantities the row multiplies (registry.cc's calibrated())."""
    alpha, beta, gamma = model
    lat, per_byte = terms(algo, P, alpha, beta, gamma)
    s = max(1.0, P / cores) if cores > 0 else 1.0
    if cores > 0 and P > cores:  # ranks share the cores: the total work spread over them
        per_byte = (2 * (P - 1) * beta + (P - 1) * gamma) / cores
    return [lat, lat * (s - 1), per_byte * min(n, CACHE), per_byte * max(0, n - CACHE)]


def solve(rows, rhs):
    """Least squares by normal equations; None when singular."""
    k = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    b = [sum(r[i] * y for r, y in zip(rows, rhs)) for i in range(k)]
    for i in range(k):
        p = max(range(i, k), key=lambda r: abs(a[r][i]))
        a[i], a[p], b[i], b[p] = a[p], a[i], b[p], b[i]
        if abs(a[i][i]) < 1e-300:
            return None
        for r in range(k):
            if r != i:
                c = a[r][i] / a[i][i]
                a[r] = [x - c * y for x, y in zip(a[r], a[i])]
                b[r] -= c * b[i]
    return [b[i] / a[i][i] for i in range(k)]


def nnls(rows, rhs):
    """Non-negative least squares over 4 unknowns: the best unconstrained fit on each subset of
    the unknowns whose solution has no negative entry."""
    k = len(rows[0])
    best = None
    for m in range(1, k + 1):
        for sub in itertools.combinations(range(k), m):
            sol = solve([[r[i] for i in sub] for r in rows], rhs)
            if sol is None or min(sol) < 0:
                continue
            x = [0.0] * k
            for i, v in zip(sub, sol):
                x[i] = v
            res = sum((sum(xi * ri for xi, ri in zip(x, r)) - y) ** 2 for r, y in zip(rows, rhs))
            if best is None or res < best[0]:
                best = (res, x)
    return best[1]


def read(paths):
    times, ran, models = collections.defaultdict(list), collections.defaultdict(list), []
    for path in paths:
        for lineno, line in enumerate(open(path), 1):
            f = line.split()
            if not f:
                continue
            if f[0] == "#model":
                kv = dict(x.split("=", 1) for x in f[3:] if "=" in x)
                try:
                    models.append((f[1], float(kv["alpha_us"]), float(kv["beta_gbps"]),
                                   float(kv["gamma_gbps"])))
                except (KeyError, ValueError):
                    sys.exit(f"{path}:{lineno}: a #model line without alpha_us, beta_gbps and "
                             f"gamma_gbps: {line.strip()}")
                continue
            if len(f) < 6:
                sys.exit(f"{path}:{lineno}: expected 'transport ranks algo bytes time_us ran'")
            key = (f[0], int(f[1]), f[2], int(f[3]))
            times[key].append(float(f[4]) * 1e-6)
            ran[key].append(f[5])
    return times, ran, models


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", help="write the rows as a tuner file (SQZ_TUNER_FILE)")
    ap.add_argument("--cores", type=int, default=os.cpu_count(), help="the measured host's cores")
    ap.add_argument("raw", nargs="+")
    args = ap.parse_args()
    times, ran, models = read(args.raw)
    med = lambda key: statistics.median(times[key])
    out = ["# Squeeze tuner file (SQZ_TUNER_FILE; format: algorithms/cost_model.h), written by",
           f"# scripts/fit_tuner.py from {' '.join(args.raw)} ({args.cores} cores).",
           "sqz-tuner 1"]
    for t in ("tcp", "shm"):
        cells = sorted({(k[1], k[3]) for k in times if k[0] == t and k[2] in ALGOS})
        if not cells:
            continue
        fit = {}
        for a in ALGOS:
            rows = [[x / med((t, P, a, n)) for x in features(a, P, n, MODEL[t], args.cores)]
                    for P, n in cells if (t, P, a, n) in times]
            fit[a] = nnls(rows, [1.0] * len(rows))
        predict = lambda a, P, n: sum(c * x for c, x in
                                      zip(fit[a], features(a, P, n, MODEL[t], args.cores)))
        reps = max(len(v) for k, v in times.items() if k[0] == t)
        print(f"\n{t}: out-of-place time (us), median of up to {reps} runs; 'auto' is what the "
              f"library picked, 'fit' what the rows below pick")
        measured = ALGOS + ([DIRECT] if any(k[0] == t and k[2] == DIRECT for k in times) else [])
        print("| ranks | size | " + " | ".join(measured) +
              " | fastest | auto pick | auto time | pick / fastest | fit pick | fit / fastest |")
        print("|---" * (len(measured) + 8) + "|")
        misses = auto_misses = 0
        for P, n in cells:
            if any((t, P, a, n) not in times for a in measured):
                continue
            m = {a: med((t, P, a, n)) for a in measured}
            best = min(m, key=m.get)
            fit_pick = DIRECT if DIRECT in m else min(ALGOS, key=lambda a: predict(a, P, n))
            auto = ""
            if (t, P, "auto", n) in times:
                picks = collections.Counter(ran[(t, P, "auto", n)]).most_common()
                at = med((t, P, "auto", n))
                # The pick is judged by its own forced runs in this cell, as every other
                # algorithm is: the auto runs are more samples of the same algorithm, and this
                # machine's spread between samples (up to 1.7x at 1 MiB) exceeds the 10% judged.
                pick = picks[0][0]
                pt = m.get(pick, at)
                auto = (f"{'/'.join(p for p, _ in picks)} | {at * 1e6:.0f} | "
                        f"{pt / m[best]:.2f}x")
                auto_misses += n >= EVAL_MIN_BYTES and pt / m[best] > 1.10
            else:
                auto = "- | - | -"
            ratio = m[fit_pick] / m[best]
            misses += n >= EVAL_MIN_BYTES and ratio > 1.10
            print(f"| {P} | {n} | " + " | ".join(f"{m[a] * 1e6:.0f}" for a in measured) +
                  f" | {best} | {auto} | {fit_pick} | {ratio:.2f}x |")
        print(f"{t}: the fit's pick is more than 10% slower than the fastest in {misses} cells "
              f"of {EVAL_MIN_BYTES} bytes and up; the library's pick (auto) in {auto_misses}")
        print(f"\n{t} rows (lat, latShared, bw, bwCold) for algorithms/calibration.cc:")
        print("{" + ", ".join("{%.3g, %.3g, %.3g, %.3g}" % tuple(fit[a]) for a in ALGOS) + "}")
        ref = [m for m in models if m[0] == t]
        if ref:
            alpha, beta, gamma = (statistics.median(m[i] for m in ref) for i in (1, 2, 3))
            print(f"{t} reference (median of {len(ref)} calibrations): alpha {alpha:.3g} us, "
                  f"beta {beta:.3g} GB/s, gamma {gamma:.3g} GB/s")
            out.append(f"reference {t} {alpha:.4g} {beta:.4g} {gamma:.4g}")
        else:
            print(f"{t}: no calibration was logged (#model lines): the file gets no reference, "
                  "so with it init-time calibration is skipped for this transport")
        out += [f"row {t} {a} " + " ".join("%.4g" % c for c in fit[a]) for a in ALGOS]
    if args.write:
        with open(args.write, "w") as f:
            f.write("\n".join(out) + "\n")
        print(f"\nwrote {args.write}")


if __name__ == "__main__":
    main()
