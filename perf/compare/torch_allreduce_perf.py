#!/usr/bin/python3
"""torch_allreduce_perf.py: sqz-allreduce-perf's table for PyTorch's gloo backend.

What a PyTorch user gets on CPU: torch.distributed with backend "gloo", float32 CPU tensors,
dist.all_reduce(tensor) (sum, in place; torch has no out-of-place all-reduce, so the out-of-place
columns show N/A). Timed as sqz-allreduce-perf times its calls (see compare_common.cc): -w warm-up
calls at the largest and then the smallest size; per size one untimed call and a barrier, -n
calls timed together, this rank's mean per call maximised over the ranks; then -c checked calls
on small-integer inputs (the formula of compare_common.cc) compared bit for bit with their sum.

Launch: rank and size from SQZ_RANK/SQZ_WORLD_SIZE (sqzrun) or OMPI_COMM_WORLD_RANK/SIZE; the
ranks meet through init_method file://DIR/<job id> in --store DIR (an existing directory every
rank sees). GLOO_SOCKET_IFNAME picks the interface (default lo).
    sqzrun -n 4 /usr/bin/python3 torch_allreduce_perf.py --store /tmp/t -b 16M -e 256M -f 16
"""
import argparse
import datetime
import hashlib
import json
import os
import socket
import sys
import tempfile
import time

PROGRAM = "torch_allreduce_perf.py"
PERIOD = 65521  # inputs repeat with this period, as in compare_common.cc
POISON = -0x5A5A5A5B  # int32 bits 0xA5A5A5A5, no small integer as a float


def launcher_rank_and_size():
    for rank_var, size_var in (("SQZ_RANK", "SQZ_WORLD_SIZE"),
                               ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        r, s = os.environ.get(rank_var), os.environ.get(size_var)
        if not r and not s:
            continue
        try:
            rank, size = int(r), int(s)
        except (TypeError, ValueError):
            rank, size = -1, 0
        if not 0 <= rank < size:
            fail(0, "%s=%s and %s=%s do not describe a rank (need 0 <= rank < size)"
                 % (rank_var, r, size_var, s))
        return rank, size
    return 0, 1


def fail(rank, message):
    sys.stdout.flush()
    sys.stderr.write("%s: rank %d: %s\n" % (PROGRAM, rank, message))
    sys.stderr.flush()
    os._exit(1)  # no teardown: the gloo threads may be waiting on a dead peer


def parse_size(text):
    units = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
    t = text
    if t[-1:] in ("B", "b"):
        t = t[:-1]
    unit = 1
    if t[-1:].lower() in units:
        unit = units[t[-1].lower()]
        t = t[:-1]
    try:
        v = float(t)
    except ValueError:
        raise argparse.ArgumentTypeError("invalid size '%s'" % text)
    if not v >= 0:
        raise argparse.ArgumentTypeError("invalid size '%s'" % text)
    return int(v * unit)


def int_at_least(lo):
    def parse(text):
        try:
            v = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError("invalid number '%s' (need >= %d)" % (text, lo))
        if v < lo:
            raise argparse.ArgumentTypeError("invalid number '%s' (need >= %d)" % (text, lo))
        return v
    return parse


class Parser(argparse.ArgumentParser):
    """Like the C++ drivers: every rank prints a bad flag's message (the launcher may stop rank 0
    before it speaks, once another rank has exited), rank 0 the usage; exit status 2."""

    def __init__(self, speak, **kw):
        super().__init__(**kw)
        self.speak = speak

    def error(self, message):
        if self.speak:
            self.print_usage(sys.stderr)
        sys.stderr.write("%s: %s\n" % (PROGRAM, message))
        sys.exit(2)

    def print_help(self, file=None):
        if self.speak:
            super().print_help(file)


def parse_options(argv, speak):
    p = Parser(speak, prog=PROGRAM, description="All-reduce of float32 with sum through "
               "torch.distributed (gloo), in sqz-allreduce-perf's columns.")
    p.add_argument("-b", "--minbytes", type=parse_size, default=32 << 20,
                   help="smallest size in bytes (default 32M; K/M/G suffixes)")
    p.add_argument("-e", "--maxbytes", type=parse_size, default=32 << 20,
                   help="largest size in bytes (default 32M)")
    p.add_argument("-f", "--stepfactor", type=int_at_least(1), default=2,
                   help="multiply the size by n each step (default 2; 1: add -i bytes)")
    p.add_argument("-i", "--stepbytes", type=parse_size, default=None,
                   help="add this many bytes each step (instead of -f)")
    p.add_argument("-n", "--iters", type=int_at_least(1), default=20,
                   help="timed iterations per size (default 20)")
    p.add_argument("-w", "--warmup_iters", type=int_at_least(0), default=5,
                   help="warm-up iterations (default 5)")
    p.add_argument("-c", "--check", type=int_at_least(0), default=1,
                   help="checked calls per size, 0 to skip (default 1)")
    p.add_argument("-d", "--datatype", default="float", choices=["float", "fp32", "float32"],
                   help="the only type measured (accepted for sqz's flags)")
    p.add_argument("-o", "--op", default="sum", choices=["sum"],
                   help="the only op measured (accepted for sqz's flags)")
    p.add_argument("-J", "--json", default=None, help="also write the results as JSON")
    p.add_argument("--store", default=None,
                   help="rendezvous directory, existing and shared by the ranks "
                        "(needed with more than one rank)")
    o = p.parse_args(argv)
    if o.stepbytes is not None:
        if o.stepbytes == 0:
            p.error("invalid step '0' for -i (need > 0 bytes)")
        o.stepfactor = 1
    else:
        o.stepbytes = 1 << 20
    if o.minbytes > o.maxbytes:
        p.error("minbytes (%d) is larger than maxbytes (%d)" % (o.minbytes, o.maxbytes))
    if o.minbytes < 4:
        p.error("-b %d: the smallest size is 4 bytes (one float)" % o.minbytes)
    if o.json:
        d = os.path.dirname(o.json) or "."
        if not os.access(d, os.W_OK):
            p.error("-J %s: cannot write into %s" % (o.json, d))
    return o


def sizes(o):
    size = o.minbytes
    while size <= o.maxbytes:
        yield size
        if o.stepfactor > 1:
            if size > o.maxbytes // o.stepfactor:
                break
            size *= o.stepfactor
        else:
            if size > o.maxbytes - o.stepbytes:
                break
            size += o.stepbytes


class Bench:
    def __init__(self, torch, dist, o, rank, nranks):
        self.torch, self.dist, self.o = torch, dist, o
        self.rank, self.nranks = rank, nranks
        self.seed = 0
        self.errors = 0
        self.bw = []
        self.rows = []
        self.recv = torch.zeros(o.maxbytes // 4, dtype=torch.float32)

    def out(self, text):
        if self.rank == 0:
            sys.stdout.write(text)

    def period(self, rank, seed):
        torch = self.torch
        j = torch.arange(PERIOD, dtype=torch.int64)
        h = (j * 2654435761 + rank * 97531 + seed * 1000003) % 4294967291
        return ((h >> 5) % 11 - 5).to(torch.float32)

    def fill(self, buf, period):
        n = buf.numel()
        whole = n // PERIOD
        if whole:
            buf[:whole * PERIOD].view(whole, PERIOD).copy_(period.expand(whole, PERIOD))
        buf[whole * PERIOD:].copy_(period[:n - whole * PERIOD])

    def max_over_ranks(self, value):
        t = self.torch.tensor([value], dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t[0])

    def sum_over_ranks(self, value):
        t = self.torch.tensor([value], dtype=self.torch.int64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.SUM)
        return int(t[0])

    def check_once(self, buf):
        torch = self.torch
        self.seed += 1
        buf.view(torch.int32).fill_(POISON)
        self.fill(buf, self.period(self.rank, self.seed))
        self.dist.all_reduce(buf)
        want = torch.zeros(PERIOD, dtype=torch.float32)
        for r in range(self.nranks):
            want += self.period(r, self.seed)
        expected = torch.empty_like(buf)
        self.fill(expected, want)
        bad = buf.view(torch.int32) != expected.view(torch.int32)
        wrong = int(bad.sum())
        if wrong:
            first = int(bad.nonzero()[0][0])
            sys.stderr.write("%s: rank %d: %d B float sum in-place: %d wrong elements, first at "
                             "%d: expected %g got %g\n" % (PROGRAM, self.rank, buf.numel() * 4,
                                                           wrong, first, float(expected[first]),
                                                           float(buf[first])))
        return wrong

    def bench_in_place(self, buf):
        o, dist = self.o, self.dist
        if o.check:  # sane inputs for the timed calls too (they grow n-fold per call)
            self.fill(buf, self.period(self.rank, 0))
        dist.all_reduce(buf)  # untimed: brings every rank to this call
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(o.iters):
            dist.all_reduce(buf)
        sec = self.max_over_ranks((time.perf_counter() - t0) / o.iters)
        nbytes = buf.numel() * 4
        algbw = nbytes / 1.0e9 / sec if sec > 0 else 0.0
        busbw = algbw * 2.0 * (self.nranks - 1) / self.nranks
        wrong = 0
        for _ in range(o.check):
            wrong = self.sum_over_ranks(self.check_once(buf))
            if wrong:
                break
        if wrong:
            self.errors += 1
        us = sec * 1.0e6
        prec = 0 if us >= 10000.0 else 1 if us >= 100.0 else 2
        self.out("  %7.*f  %6.2f  %6.2f" % (prec, us, algbw, busbw))
        self.out("  %5d" % wrong if o.check else "  %5s" % "N/A")
        self.bw.append(busbw)
        self.rows.append({"size": nbytes, "count": buf.numel(), "type": "float", "redop": "sum",
                          "root": -1, "inplace": True, "time_us": us, "algbw": algbw,
                          "busbw": busbw, "wrong": wrong if o.check else None, "algo": "gloo",
                          "codec": None, "wire_per_rank": None, "ratio": None, "relerr": None,
                          "dense_calls": None})

    def header(self, hosts, pids):
        o = self.o
        self.out("# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %d(%s) warmup iters: %d "
                 "iters: %d agg iters: 1 validation: %d graph: 0\n"
                 % (o.minbytes, o.maxbytes, o.stepfactor if o.stepfactor > 1 else o.stepbytes,
                    "factor" if o.stepfactor > 1 else "bytes", o.warmup_iters, o.iters, o.check))
        self.out("#\n# Using devices\n")
        for r in range(self.nranks if self.rank == 0 else 0):
            self.out("#  Rank %2d Group %2d Pid %6d on %10s device %2d [host memory]\n"
                     % (r, 0, pids[r], hosts[r], 0))
        self.out("#\n")
        self.out("# torch.distributed all_reduce, backend gloo (in place only: the out-of-place "
                 "columns are N/A)\n")
        self.out("# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
                 "in-place          \n" % ("", "", "", "", ""))
        self.out("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %s\n"
                 % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw",
                    "#wrong", "time", "algbw", "busbw", "#wrong", "algo"))
        self.out("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n"
                 % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
                    "(GB/s)", "(GB/s)", ""))

    def run(self):
        o, dist = self.o, self.dist
        gathered = [None] * self.nranks
        dist.all_gather_object(gathered, (socket.gethostname(), os.getpid()))
        hosts = [h for h, _ in gathered]
        self.header(hosts, [p for _, p in gathered])
        dist.barrier()
        for nbytes in (o.maxbytes, o.minbytes):
            buf = self.recv[:nbytes // 4]
            for _ in range(o.warmup_iters):
                dist.all_reduce(buf)
        for size in sizes(o):
            count = size // 4
            self.out("%12d  %12d  %8s  %6s  %6d" % (count * 4, count, "float", "sum", -1))
            self.out("  %7s  %6s  %6s  %5s" % ("N/A", "N/A", "N/A", "N/A"))
            self.bench_in_place(self.recv[:count])
            self.out("  %s\n" % "gloo")
        self.out("# Out of bounds values : %d %s\n" % (self.errors,
                                                       "FAILED" if self.errors else "OK"))
        avg = sum(self.bw) / len(self.bw) if self.bw else 0.0
        self.out("# Avg bus bandwidth    : %g \n#\n" % avg)
        sys.stdout.flush()
        return hosts


def write_json(path, hosts, rows, nranks):
    doc = {
        "format": "squeeze-perf/1",
        "library": "torch-gloo",
        "program": PROGRAM,
        "collective": "allreduce",
        "nranks": nranks,
        "hosts": hosts,
        "transport": "tcp",
        "command": " ".join(sys.argv),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(("SQZ_", "GLOO_", "OMPI_MCA_"))},
        "rows": rows,
    }
    tmp = path + ".tmp"  # so a killed run leaves no half-written file
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def main():
    sys.stdout.reconfigure(line_buffering=True)
    rank, nranks = launcher_rank_and_size()
    o = parse_options(sys.argv[1:], rank == 0)
    if nranks > 1:
        if not o.store:
            fail(rank, "--store DIR is needed with %d ranks: an existing directory every rank "
                 "sees (e.g. a fresh mktemp -d)" % nranks)
        if not os.path.isdir(o.store):
            fail(rank, "--store %s: not an existing directory; create it first" % o.store)
        # One file per job: torch's FileStore must not find an earlier run's keys.
        job = os.environ.get("SQZ_UNIQUE_ID") or os.environ.get("PMIX_NAMESPACE") or "run"
        store_file = os.path.join(os.path.abspath(o.store),
                                  "torch-" + hashlib.sha256(job.encode()).hexdigest()[:16])
    else:
        store_file = os.path.join(tempfile.mkdtemp(prefix="torch-perf-"), "store")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        fail(rank, "cannot import torch (%s): install python3-torch and run with /usr/bin/python3"
             % e)
    if not dist.is_available():
        fail(rank, "this torch was built without torch.distributed")
    torch.set_num_threads(1)  # the fills and checks: one core per rank, as the other drivers
    try:
        dist.init_process_group("gloo", init_method="file://" + store_file, rank=rank,
                                world_size=nranks, timeout=datetime.timedelta(seconds=300))
        bench = Bench(torch, dist, o, rank, nranks)
        hosts = bench.run()
        dist.barrier()
    except RuntimeError as e:
        fail(rank, "torch.distributed: %s" % e)
    if rank == 0 and o.json:
        try:
            write_json(o.json, hosts, bench.rows, nranks)
        except OSError as e:
            fail(rank, "cannot write -J %s: %s" % (o.json, e))
    dist.destroy_process_group()
    return 1 if bench.errors else 0


if __name__ == "__main__":
    sys.exit(main())
