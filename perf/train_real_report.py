#!/usr/bin/python3
"""Tabulates perf/train_real.py's -J files (format squeeze-train-real/1) for perf/RESULTS.md.

  perf/train_real_report.py [--target MODEL=VALUE]... FILE.json...

Files of one model are rounds of the same runs (perf/adaptive_real.sh runs the specs forward,
then backward, so that a drift in the machine's speed does not favour the specs run first).
Per model, a Markdown table of its specs: steps and seconds to the target (the median over the
rounds, and each round's), the final metric (the mean of the last five evaluations, as one
evaluation is noisy, over the rounds), wire MB (all ranks, per round), the mean CF, and the speed
against the best and the worst static top-k CF that reached the target in every round (median
time to target of that CF / this spec's). Then the gains: for each run, the compression gain
|C(x)|^2/|x|^2 the codec measured (x with its error feedback) averaged per CF it ran at, and the
raw gradients' gain at each CF of GraVAC's space, early (first third of the probes) and late
(last third). Times to the target come from each run's evaluations, so --target can ask for
another target than the one the runs were made with. Bad input exits 2 with a message.
"""
import json
import sys

FORMAT = "squeeze-train-real/1"


class InputError(Exception):
    pass


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {e}")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not doc.get("runs"):
        raise InputError(f"{path} is not a perf/train_real.py -J file with runs "
                         f"(format {FORMAT})")
    return doc


def final(run):
    tail = run["eval_metric"][-5:]
    return sum(tail) / len(tail) if tail else float("nan")


def spec_key(spec, key, default):
    """The value of key in a codec spec (method:key=value,...), else default."""
    for kv in spec.partition(":")[2].split(","):
        k, _, v = kv.partition("=")
        if k.strip() == key:
            return float(v)
    return default


def ratio_cf(spec):
    """The CF a spec's ratio key sets (1/ratio, a sparsifier's), or None without one."""
    ratio = spec_key(spec, "ratio", None)
    return 1 / ratio if ratio is not None else None


def static_cf(spec):
    """A static top-k spec's CF (rounded), else None."""
    cf = ratio_cf(spec)
    return round(cf) if cf and spec.partition(":")[0].strip() == "topk" else None


def label(spec):
    cf = static_cf(spec)
    return f"top-k CF {cf}" if cf else spec


def mean_cf(run):
    return len(run["cf"]) / sum(1 / c for c in run["cf"])


def median(values):
    v = sorted(values)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2


def by_spec(docs):
    """[(spec, [its run in each round])], in the first round's order (a spec given twice in a
    round is two specs: its first and its second run)."""
    def keyed(doc):
        seen, out = {}, {}
        for r in doc["runs"]:
            seen[r["spec"]] = seen.get(r["spec"], 0) + 1
            out[(r["spec"], seen[r["spec"]])] = r
        return out
    rounds = [keyed(d) for d in docs]
    keys = list(rounds[0])
    for i, d in enumerate(rounds):
        if sorted(d) != sorted(keys):
            raise InputError(f"round {i + 1} of {docs[0]['settings']['model']} has other specs "
                             f"than round 1")
    return [(spec, [d[(spec, n)] for d in rounds]) for spec, n in keys]


def hit(run, target, higher_is_better):
    """(seconds, step) of the run's first evaluation at the target, or None."""
    for step, seconds, value in zip(run["eval_steps"], run["eval_seconds"], run["eval_metric"]):
        if (value >= target) if higher_is_better else (value <= target):
            return seconds, step
    return None


def to_target(runs, target, higher_is_better):
    """(median seconds, median steps, each round's seconds or None) over the rounds; the
    medians are None when a round missed."""
    hits = [hit(r, target, higher_is_better) for r in runs]
    each = [h[0] if h else None for h in hits]
    if None in hits:
        return None, None, each
    return median([h[0] for h in hits]), median([h[1] for h in hits]), each


def table(docs, paths, target):
    doc = docs[0]
    s = doc["settings"]
    better = ">=" if s["higher_is_better"] else "<="
    reach = lambda runs: to_target(runs, target, s["higher_is_better"])  # noqa: E731
    out = [f"**{s['model']}** ({', '.join(paths)}: {doc['nranks']} ranks, {s['steps']} steps, "
           f"batch {s['batch']} per rank, lr {s['lr']}, target {s['metric']} {better} "
           f"{target}; {len(docs)} round{'s' if len(docs) > 1 else ''})",
           "",
           "| spec | steps to target | time to target (s) | each round (s) | final | ms/step "
           "| wire MB | mean CF | vs best static | vs worst static |",
           "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    specs = by_spec(docs)
    statics = [reach(runs)[0] for spec, runs in specs
               if static_cf(spec) and reach(runs)[0] is not None]
    best, worst = (min(statics), max(statics)) if statics else (None, None)
    for spec, runs in specs:
        t, steps, rounds = reach(runs)
        each = ", ".join(f"{x:.2f}" if x is not None else "-" for x in rounds)
        ms = median([r["step_seconds"][-1] / len(r["step_seconds"]) for r in runs]) * 1e3
        wire = median([r["wire_bytes"] for r in runs]) * doc["nranks"] / 1e6
        fin = sum(final(r) for r in runs) / len(runs)
        vs = lambda ref: f"{ref / t:.2f}x" if t and ref else "-"  # noqa: E731
        out.append(f"| {label(spec)} | {f'{steps:.0f}' if t is not None else '-'} | "
                   f"{f'{t:.2f}' if t is not None else 'not reached'} | {each} | {fin:.2f} | {ms:.1f} | "
                   f"{wire:.1f} | {mean_cf(runs[0]):.1f} | {vs(best)} | {vs(worst)} |")
    return "\n".join(out)


def gains(docs):
    out = ["", "Gain the codec measured (x = gradient + error feedback), mean per CF it ran at "
           "(calls, every round):", ""]
    for spec, runs in by_spec(docs):
        per_cf = {}
        for r in runs:
            for calls in r["calls"].values():
                for cf, g in zip(calls["cf"], calls["gain"]):
                    if g is not None and cf > 1:
                        per_cf.setdefault(round(cf), []).append(g)
        if spec != "dense":
            text = ", ".join(f"CF {cf}: {sum(v) / len(v):.2f} ({len(v)})"
                             for cf, v in sorted(per_cf.items()))
            out.append(f"- {label(spec)}: {text or 'ran dense only'}")
    all_runs = [r for d in docs for r in d["runs"]]
    probes = [p for r in all_runs for p in r["probes"]]
    if probes:
        third = max(1, len(all_runs[0]["probes"]) // 3)
        early = [p for r in all_runs for p in r["probes"][:third]]
        late = [p for r in all_runs for p in r["probes"][-third:]]
        cfs = list(probes[0]["gains"])
        out += ["", "Raw gradient gain (no error feedback, every run's probes, per bucket "
                "weighted by its size):", "", "| probes | " + " | ".join(f"CF {c}" for c in cfs)
                + " |", "|---|" + "---:|" * len(cfs)]
        for name, ps in (("early (first third)", early), ("late (last third)", late)):
            n = sum(p["n"] for p in ps)
            out.append(f"| {name} | " + " | ".join(
                f"{sum(p['gains'][c] * p['n'] for p in ps) / n:.2f}" for c in cfs) + " |")
    return "\n".join(out)


def main(argv):
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    targets = {}
    while argv and argv[0] == "--target":
        model, _, value = (argv[1] if len(argv) > 1 else "").partition("=")
        try:
            targets[model] = float(value)
        except ValueError:
            print("train_real_report.py: --target takes MODEL=VALUE (e.g. transformer=13)",
                  file=sys.stderr)
            return 2
        argv = argv[2:]
    try:
        models = {}
        for path in argv:
            doc = load(path)
            models.setdefault(doc["settings"]["model"], []).append((doc, path))
        for rounds in models.values():
            docs, paths = [d for d, _ in rounds], [p for _, p in rounds]
            model = docs[0]["settings"]["model"]
            print(table(docs, paths, targets.get(model, docs[0]["settings"]["target"])))
            print(gains(docs))
            print()
    except InputError as e:
        print(f"train_real_report.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
