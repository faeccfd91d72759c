#!/usr/bin/python3
"""Reads the measurements of scripts/calibrate-tuner.sh (lines: transport algo bytes time_us
algo_that_ran), prints the tuner's pick against the fastest algorithm per size (medians), and
fits the efficiency rows of algorithms/calibration.cc: for each transport and algorithm, the
multipliers (lat, bw, bwCold) on the theoretical terms of algorithms/registry.cc at P = 4 that
minimise the squared relative error over the measured sizes. Standard library only."""
import collections
import statistics
import sys

P, L = 4, 2
F = (P - 1) / P
CACHE = 2 << 20
# alpha, beta, gamma: the defaults of SQZ_*_LATENCY_US, SQZ_*_GBPS and SQZ_REDUCE_GBPS
MODEL = {"tcp": (40e-6, 1 / 1.2e9, 1 / 4e9), "shm": (8e-6, 1 / 2.5e9, 1 / 4e9)}
ALGOS = ["naive", "ps", "ring", "rhd", "tree"]


def terms(algo, n, alpha, beta, gamma):
    """(latency, per-byte) terms of algorithms/registry.cc at P ranks."""
    if algo == "naive":
        return 2 * alpha, 2 * (P - 1) * beta + (P - 1) * gamma
    if algo in ("ps", "ring"):
        return 2 * (P - 1) * alpha, 2 * F * beta + F * gamma
    if algo == "rhd":
        return 2 * L * alpha, 2 * F * beta + F * gamma
    return 2 * (L + 1) * alpha, 1.5 * beta + gamma  # tree


def features(algo, n, model):
    lat, per_byte = terms(algo, n, *model)
    return [lat, per_byte * n, per_byte * max(0, n - CACHE)]


def solve(rows, rhs):
    """Least squares by normal equations (3 unknowns)."""
    k = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    b = [sum(r[i] * y for r, y in zip(rows, rhs)) for i in range(k)]
    for i in range(k):
        p = max(range(i, k), key=lambda r: abs(a[r][i]))
        a[i], a[p], b[i], b[p] = a[p], a[i], b[p], b[i]
        for r in range(k):
            if r != i and a[i][i]:
                c = a[r][i] / a[i][i]
                a[r] = [x - c * y for x, y in zip(a[r], a[i])]
                b[r] -= c * b[i]
    return [b[i] / a[i][i] if a[i][i] else 0.0 for i in range(k)]


def main():
    times, ran = collections.defaultdict(list), {}
    for line in open(sys.argv[1]):
        t, algo, size, us, who = line.split()[:5]
        times[(t, algo, int(size))].append(float(us))
        ran[(t, algo, int(size))] = who
    for t in ("tcp", "shm"):
        if not any(k[0] == t for k in times):
            continue
        sizes = sorted({k[2] for k in times if k[0] == t})
        print(f"\n{t}: out-of-place time (us), median of {len(times[(t, 'naive', sizes[0])])} runs")
        print("| size | " + " | ".join(ALGOS) + " | tuner pick | pick's time | pick vs fastest |")
        print("|---" * (len(ALGOS) + 4) + "|")
        for n in sizes:
            med = {a: statistics.median(times[(t, a, n)]) for a in ALGOS + ["auto"]}
            best = min(med[a] for a in ALGOS)
            print(f"| {n} | " + " | ".join(f"{med[a]:.0f}" for a in ALGOS) +
                  f" | {ran[(t, 'auto', n)]} | {med['auto']:.0f} | {med['auto'] / best:.2f}x |")
        print(f"\n{t} efficiency rows (lat, bw, bwCold) for algorithms/calibration.cc:")
        fits = []
        for a in ALGOS:
            rows, rhs = [], []
            for n in sizes:
                med = statistics.median(times[(t, a, n)]) * 1e-6
                rows.append([x / med for x in features(a, n, MODEL[t])])
                rhs.append(1.0)
            fits.append(solve(rows, rhs))
        print("{" + ", ".join("{%.2f, %.2f, %.2f}" % tuple(f) for f in fits) + "}")


if __name__ == "__main__":
    main()
