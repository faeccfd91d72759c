#!/usr/bin/python3
"""Time to a target on real models: data-parallel training through Squeeze's DDP compression
hook (squeeze.torch.compression_hook), one run per codec spec, the same seeds for every run.

    sqzrun -n 4 /usr/bin/python3 perf/train_real.py -m mlp -c dense -c topk:ratio=0.01 \\
        -c gravac -c accordion -J mlp.json
    tests/netlab/netlab.sh -n 4 -r 1gbit -- /usr/bin/python3 perf/train_real.py -m cnn ...

The models and their data (perf/real_models.py) come from Debian's packages alone. Every run
starts from the same weights and sees the same batches; each step is forward, backward (DDP's
hook compresses and all-reduces each gradient bucket through its codec) and an SGD update, with
momentum 0.9, except under DGC: its codec applies the momentum itself (momentum correction: it
accumulates and sends u = m u + g, and masks u where it sent), so there the optimizer is plain SGD
and the codec's momentum key (default 0.9) is the run's momentum. --lr-warmup ramps the learning
rate linearly over the first steps, in every run (DGC's "warm up both learning rate and
sparsity"; the sparsity's warm-up is the dgc codec's warmup key).
Time counts those steps only, on rank 0 (whose all-reduce waits for the slowest rank); the test
metric is measured every --eval-every steps outside the clock. Rank 0 prints a table, and with
-J writes every run's trace (format squeeze-train-real/1, perf/plot_train.py plots it):
  - per step: the seconds so far and the CF used (values per value sent, over the step's
    buckets; 1 = dense);
  - per codec call (bucket): the CF and the compression gain |C(x)|^2/|x|^2 the codec measured
    (x = the gradient plus its error feedback, GraVAC's delta), and the codec's phase;
  - every --probe-every steps, the gain of this rank's raw gradient (no error feedback) at each
    CF of GraVAC's space: how concentrated the model's gradients are;
  - the steps and seconds to the target, the final metric, and the bytes sent.
Ranks come from torch's variables (sqzrun sets them) or from the network lab's SQZ_RANK,
SQZ_WORLD_SIZE and SQZ_ROOT (netlab.sh), whose host becomes MASTER_ADDR.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_models  # noqa: E402
from train_real_report import ratio_cf, spec_key  # noqa: E402

FORMAT = "squeeze-train-real/1"
# The CFs the raw-gradient probe reports: GraVAC's default candidates, and 1000.
PROBE_CFS = (10, 20, 40, 80, 160, 320, 640, 1000)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", choices=sorted(real_models.TASKS), default="mlp")
    p.add_argument("-c", "--codec", action="append", default=[],
                   help="a codec spec for every gradient bucket (repeat: one run each; "
                        "default: dense)")
    p.add_argument("-s", "--steps", type=int, help="steps per run (default: the model's)")
    p.add_argument("-t", "--target", type=float,
                   help="target test metric (default: the model's)")
    p.add_argument("-E", "--eval-every", type=int, default=10)
    p.add_argument("--probe-every", type=int, default=10,
                   help="steps between raw-gradient gain probes (0: none)")
    p.add_argument("--lr", type=float)
    p.add_argument("--lr-warmup", type=int, default=0,
                   help="steps over which the learning rate rises linearly to --lr (0: none)")
    p.add_argument("--batch", type=int, help="samples per rank per step")
    p.add_argument("--hidden", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", choices=["squeeze", "gloo"], default="squeeze")
    p.add_argument("-J", "--json", help="write every run's trace to this file (rank 0)")
    args = p.parse_args(argv)
    hidden, batch, lr, steps, target = real_models.DEFAULTS[args.model]
    for key, value in (("hidden", hidden), ("batch", batch), ("lr", lr), ("steps", steps),
                       ("target", target)):
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.steps < 1 or args.eval_every < 1 or args.probe_every < 0 or args.lr_warmup < 0:
        p.error("--steps and --eval-every must be at least 1, --probe-every and --lr-warmup "
                "at least 0")
    args.codec = args.codec or ["dense"]
    return args


def rank_environment():
    """(rank, size): torch's variables, else the network lab's (SQZ_RANK, SQZ_ROOT)."""
    env = os.environ
    if "RANK" not in env and "SQZ_RANK" in env:
        env["RANK"], env["WORLD_SIZE"] = env["SQZ_RANK"], env["SQZ_WORLD_SIZE"]
        if "SQZ_ROOT" in env and "MASTER_ADDR" not in env:
            host, _, port = env["SQZ_ROOT"].rpartition(":")
            env["MASTER_ADDR"], env["MASTER_PORT"] = host, str(int(port) + 1)
    if "RANK" not in env or "MASTER_ADDR" not in env:
        sys.exit("train_real: no rank in the environment: start the ranks with sqzrun, "
                 "torchrun or tests/netlab/netlab.sh")
    return int(env["RANK"]), int(env["WORLD_SIZE"])


def dgc_cf(spec, call):
    """The CF of a dgc codec's call (0-based): its sparsity warm-up (compress/dgc.cc: density
    25%, 6.25%, 1.5625%, 0.390625% in four equal stages of the first `warmup` calls, never
    below ratio), then 1/ratio."""
    ratio, warmup = spec_key(spec, "ratio", 0.001), int(spec_key(spec, "warmup", 0))
    if call >= warmup:
        return 1 / ratio
    return 1 / max(ratio, 0.25 ** (call * 4 // warmup + 1))


def raw_gains(grad):
    """{CF: |top (n/CF) of grad|^2 / |grad|^2} for PROBE_CFS: one top-k over the largest set."""
    import torch
    sq = grad.detach().float().reshape(-1) ** 2
    total = sq.sum().item()
    if not total > 0:
        return {cf: 1.0 for cf in PROBE_CFS}
    keep = lambda cf: max(1, math.ceil(sq.numel() / cf))  # noqa: E731
    top = torch.topk(sq, keep(min(PROBE_CFS)), sorted=True).values.cumsum(0)
    return {cf: top[keep(cf) - 1].item() / total for cf in PROBE_CFS}


class Recorder:
    """Wraps compression_hook: after each bucket's all-reduce, what its codec did; before it,
    every probe_every steps, the raw gradient's gains."""

    def __init__(self, spec, probe_every):
        # probe_every: 0 on ranks other than 0, which alone records the probes.
        import squeeze.torch
        self.hook = squeeze.torch.compression_hook
        self.bucket_tensor = squeeze.ddp_hook._bucket_tensor  # torch 1.13's and 2.x's bucket API
        self.spec, self.probe_every = spec, probe_every
        self.spec_cf = ratio_cf(spec) or 1.0  # a non-adaptive spec's CF
        self.method = spec.partition(":")[0].strip()
        self.adaptive = self.method in ("gravac", "accordion")
        self.step = 0
        self.calls = {}  # bucket index -> {"cf": [], "gain": [], "phase": []}
        self.probes = []
        self.values, self.elements = 0.0, 0  # this step's values sent and elements

    def hook_function(self):
        """A plain function for DDP (it reads the hook's __name__)."""
        def recording_hook(state, bucket):
            return self.record(state, bucket)
        return recording_hook

    def record(self, state, bucket):
        tensor = self.bucket_tensor(bucket)
        index = bucket.index()
        if self.probe_every and self.step % self.probe_every == 0:
            self.probes.append({"step": self.step + 1, "bucket": index, "n": tensor.numel(),
                                "gains": raw_gains(tensor)})
        fut = self.hook(state, bucket)
        codecs = state.buckets[index].codecs
        st = codecs[0].stats() if len(codecs) == 1 else None
        if self.adaptive and st:
            cf = st["cf"] or 1.0
        elif self.method == "dgc" and st:
            cf = dgc_cf(self.spec, st["calls"] - 1)  # st counts this call
        else:
            cf = self.spec_cf
        rec = self.calls.setdefault(index, {"n": tensor.numel(), "cf": [], "gain": [],
                                            "phase": []})
        rec["cf"].append(cf)
        rec["gain"].append(st["gain"] if st else None)
        rec["phase"].append(st["phase"] if st else 0)
        self.values += tensor.numel() / cf
        self.elements += tensor.numel()
        return fut

    def end_step(self):
        """The step's CF (elements per value sent over its buckets)."""
        cf = self.elements / self.values if self.values else 1.0
        self.values, self.elements = 0.0, 0
        self.step += 1
        return cf


def optimizer_momentum(spec):
    """The optimizer's momentum: 0 under DGC, whose codec applies the momentum (momentum
    correction), else 0.9."""
    return 0.0 if spec.partition(":")[0].strip() == "dgc" else 0.9


def learning_rate(args, step):
    """The learning rate of step (1-based): --lr, ramped linearly over --lr-warmup steps."""
    return args.lr * min(1.0, step / args.lr_warmup) if args.lr_warmup else args.lr


def run_one(args, task, spec, rank, size):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import squeeze.torch

    torch.manual_seed(args.seed)
    model = task.make()
    ddp = DDP(model)
    state = squeeze.torch.CompressionState(specs=spec)
    recorder = Recorder(spec, args.probe_every if rank == 0 else 0)
    ddp.register_comm_hook(state, recorder.hook_function())
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=optimizer_momentum(spec))
    run = {"spec": spec, "optimizer_momentum": optimizer_momentum(spec), "step_seconds": [],
           "cf": [], "eval_steps": [], "eval_seconds": [],
           "eval_metric": [], "steps_to_target": None, "time_to_target": None}
    clock = 0.0
    dist.barrier()
    for step in range(1, args.steps + 1):
        batch = task.batch_of(step - 1, rank, size)
        for group in opt.param_groups:
            group["lr"] = learning_rate(args, step)
        t0 = time.perf_counter()
        opt.zero_grad()
        task.loss(ddp, batch).backward()
        opt.step()
        clock += time.perf_counter() - t0
        run["step_seconds"].append(clock)
        run["cf"].append(recorder.end_step())
        if step % args.eval_every == 0 or step == args.steps:
            if rank == 0:
                value = task.evaluate(model)
                run["eval_steps"].append(step)
                run["eval_seconds"].append(clock)
                run["eval_metric"].append(value)
                if run["steps_to_target"] is None and task.reached(value, args.target):
                    run["steps_to_target"], run["time_to_target"] = step, clock
            dist.barrier()  # the others wait here, off the clock
    totals = state.stats()["total"]
    run["final_metric"] = run["eval_metric"][-1] if run["eval_metric"] else None
    run["wire_bytes"] = totals["wire_bytes"]
    run["dense_bytes"] = totals["dense_bytes"]
    run["calls"] = {str(i): c for i, c in sorted(recorder.calls.items())}
    run["probes"] = recorder.probes
    state.close()
    return run


def table(args, runs, size):
    task = real_models.TASKS[args.model]
    lines = [f"train_real: model {args.model}, {size} ranks, {args.steps} steps, target "
             f"{task.metric} {'>=' if task.higher_is_better else '<='} {args.target}",
             f"{'spec':<44} {'to target':>10} {'steps':>6} {'final':>8} {'ms/step':>8} "
             f"{'wire MB':>9} {'mean CF':>8}"]
    for r in runs:
        hit = f"{r['time_to_target']:.2f} s" if r["time_to_target"] is not None else "-"
        steps = r["steps_to_target"] or "-"
        ms = r["step_seconds"][-1] / len(r["step_seconds"]) * 1e3
        mean_cf = len(r["cf"]) / sum(1 / c for c in r["cf"])
        lines.append(f"{r['spec']:<44} {hit:>10} {steps!s:>6} {r['final_metric']:8.2f} "
                     f"{ms:8.2f} {r['wire_bytes'] * size / 1e6:9.1f} {mean_cf:8.1f}")
    return "\n".join(lines)


def main(argv):
    args = parse_args(argv)
    rank, size = rank_environment()
    import torch
    import torch.distributed as dist
    import squeeze.torch  # noqa: F401  (registers the "squeeze" backend)

    torch.set_num_threads(1)  # the ranks share this machine's cores
    dist.init_process_group(args.backend, rank=rank, world_size=size)
    task = real_models.TASKS[args.model](args.seed, args.batch, args.hidden)
    runs = []
    for spec in args.codec:
        runs.append(run_one(args, task, spec, rank, size))
        if rank == 0:
            r = runs[-1]
            print(f"train_real: {spec}: {r['final_metric']:.2f} after {args.steps} steps, "
                  f"target at {r['time_to_target']} s", flush=True)
    if rank == 0:
        print(table(args, runs, size), flush=True)
        if args.json:
            cls = real_models.TASKS[args.model]
            doc = {"format": FORMAT, "nranks": size,
                   "settings": {"model": args.model, "metric": cls.metric,
                                "higher_is_better": cls.higher_is_better,
                                "target": args.target, "steps": args.steps,
                                "batch": args.batch, "hidden": args.hidden, "lr": args.lr,
                                "lr_warmup": args.lr_warmup,
                                "seed": args.seed, "backend": args.backend,
                                "eval_every": args.eval_every},
                   "runs": runs}
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(doc, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
