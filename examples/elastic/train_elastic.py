#!/usr/bin/python3
"""Elastic data-parallel training: DDP with Squeeze's compression hook loses a rank, shrinks and
goes on, then takes a replacement and grows back, without restarting the job.

An MLP learns scikit-learn's digits (python3-sklearn ships the data) on 4 ranks, each a process
this script starts, through DDP (gloo process group) whose gradient buckets go through
squeeze.torch.compression_hook (top-k with error feedback) on a Squeeze communicator.

  step --lose-at: the last rank leaves without a word (os._exit: its sockets close as a killed
      process's do). The others' backward fails (the hook's all-reduce raises RemoteError);
      they revoke and shrink the Squeeze communicator (its codecs, with their residuals, go on
      with the shrunk one), rebuild torch's group on it (rank 0's new store port travels over
      Squeeze) and DDP, reshard the data, and go on with 3 ranks.
  step --grow-at: rank 0 starts a replacement process and hands it, and the others, a new
      Squeeze unique id and store port; Comm.grow takes it in as rank 3, DDP's construction
      gives it the current parameters, and the 4 train to --steps.

Rank 0 prints one line per phase (ranks, steps, loss, test accuracy) and the final accuracy;
the exit status is 0 when every process succeeded and the accuracy reached --target.

    /usr/bin/python3 examples/elastic/train_elastic.py
    /usr/bin/python3 examples/elastic/train_elastic.py --steps 300 --lose-at 100 --grow-at 200
"""
import argparse
import os
import socket
import subprocess
import sys
import time

RANKS = 4


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--lose-at", type=int, default=50, help="the last rank leaves at this step")
    p.add_argument("--grow-at", type=int, default=100, help="a replacement joins at this step")
    p.add_argument("--codec", default="topk:ratio=0.1", help="the hook's codec for every bucket")
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--target", type=float, default=0.85, help="test accuracy to reach")
    p.add_argument("--timeout", type=float, default=300, help="stop everything after this long")
    # Set by this script for the processes it starts.
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--unique-id", default=None, help=argparse.SUPPRESS)
    p.add_argument("--store-port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--join-at", type=int, default=-1, help=argparse.SUPPRESS)
    return p.parse_args()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child(args, rank, uid_hex, port, join_at=-1):
    argv = [sys.executable, os.path.abspath(__file__), "--rank", str(rank), "--unique-id",
            uid_hex, "--store-port", str(port), "--join-at", str(join_at)]
    for name in ("steps", "lose_at", "grow_at", "codec", "batch", "lr", "target"):
        argv += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    env = dict(os.environ, SQZ_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo")
    env.setdefault("SQZ_TIMEOUT_MS", "10000")
    return subprocess.Popen(argv, env=env)


def launch(args):
    """Starts the 4 ranks; returns 0 when all (and the replacement) exited 0."""
    import squeeze
    uid = squeeze.unique_id().hex()  # the rendezvous root lives in this process
    port = free_port()
    procs = [child(args, r, uid, port) for r in range(RANKS)]
    deadline = time.monotonic() + args.timeout
    status = 0
    for p in procs:
        try:
            code = p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            code = 124
        status = status or code
    if status:
        print(f"train_elastic: a process exited with status {status}", file=sys.stderr)
    return status


class Trainer:
    """One process's model, DDP wrapper, hook state and data shard."""

    def __init__(self, args, comm):
        import torch
        import squeeze.torch
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
        self.args, self.torch = args, torch
        x, y = load_digits(return_X_y=True)
        xtr, xte, ytr, yte = train_test_split(x / 16.0, y, test_size=0.2, random_state=0,
                                              stratify=y)
        t = lambda a, d: torch.tensor(a, dtype=d)  # noqa: E731
        self.xtr, self.ytr = t(xtr, torch.float32), t(ytr, torch.long)
        self.xte, self.yte = t(xte, torch.float32), t(yte, torch.long)
        torch.manual_seed(0)
        self.module = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                          torch.nn.Linear(256, 10))
        self.state = squeeze.torch.CompressionState(specs=args.codec, comm=comm)
        self.hook = squeeze.torch.compression_hook
        self.ddp = self.opt = None

    def rebuild(self, comm, store_port):
        """torch's group and DDP over `comm`'s ranks (rank 0 hosts the store at store_port)."""
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        if dist.is_initialized():
            dist.destroy_process_group()
        store = dist.TCPStore("127.0.0.1", store_port, comm.size, comm.rank == 0)
        dist.init_process_group("gloo", store=store, rank=comm.rank, world_size=comm.size)
        self.state.comm = comm  # its codecs moved with the communicator (shrink, grow)
        self.ddp = DDP(self.module)  # broadcasts rank 0's parameters: a newcomer gets them
        self.ddp.register_comm_hook(self.state, self.hook)
        self.opt = self.torch.optim.SGD(self.ddp.parameters(), lr=self.args.lr)

    def step(self, step, comm):
        g = self.torch.Generator().manual_seed(step)
        idx = self.torch.randperm(len(self.xtr), generator=g)
        shard = idx[comm.rank * self.args.batch:(comm.rank + 1) * self.args.batch]
        self.opt.zero_grad()
        loss = self.torch.nn.functional.cross_entropy(self.ddp(self.xtr[shard]), self.ytr[shard])
        loss.backward()
        self.opt.step()
        return loss.item()

    def accuracy(self):
        with self.torch.no_grad():
            return (self.module(self.xte).argmax(1) == self.yte).float().mean().item()


def broadcast_port(comm, port):
    """Rank 0's port, to every rank of comm."""
    import numpy as np
    return int(comm.broadcast(np.array([port], np.int64), root=0)[0])


def run(args):
    import numpy as np
    import squeeze
    uid = bytes.fromhex(args.unique_id)
    joining = args.join_at >= 0
    comm = squeeze.Comm(uid, args.rank, RANKS)
    trainer = Trainer(args, comm)
    trainer.rebuild(comm, args.store_port)
    step, losses = (args.join_at if joining else 0), []
    lost = False
    while step < args.steps:
        if not joining and not lost and comm.size == RANKS and step == args.lose_at \
                and comm.rank == RANKS - 1:
            os._exit(0)  # the lost rank: gone without a word
        try:
            losses.append(trainer.step(step, comm))
        except Exception as e:  # the hook's all-reduce raised: a rank is gone
            if comm.size != RANKS or lost:
                raise
            lost = True
            comm.revoke()
            smaller = comm.shrink([RANKS - 1])
            comm.close()
            comm = smaller
            if comm.rank == 0:
                print(f"train_elastic: step {step}: lost rank {RANKS - 1} ({type(e).__name__}); "
                      f"shrank to {comm.size} ranks, loss {np.mean(losses[-10:]):.3f}, "
                      f"accuracy {trainer.accuracy():.3f}", flush=True)
            trainer.rebuild(comm, broadcast_port(comm, free_port() if comm.rank == 0 else 0))
            continue  # the step again, on the survivors
        step += 1
        if not joining and comm.size == RANKS - 1 and step == args.grow_at:
            new_uid = np.frombuffer(squeeze.unique_id() if comm.rank == 0 else bytes(128),
                                    np.uint8).copy()
            new_uid = comm.broadcast(new_uid, root=0).tobytes()
            port = broadcast_port(comm, free_port() if comm.rank == 0 else 0)
            if comm.rank == 0:
                replacement = child(args, RANKS - 1, new_uid.hex(), port, join_at=step)
            bigger = comm.grow(1, new_uid)
            comm.close()
            comm = bigger
            trainer.rebuild(comm, port)
            if comm.rank == 0:
                print(f"train_elastic: step {step}: a replacement joined; {comm.size} ranks, "
                      f"loss {np.mean(losses[-10:]):.3f}, accuracy {trainer.accuracy():.3f}",
                      flush=True)
    accuracy = trainer.accuracy()
    total = trainer.state.stats().get("total", {})
    rank = comm.rank
    comm.close()
    if rank == 0 and not joining:
        if "replacement" in locals():
            replacement.wait(timeout=60)
            if replacement.returncode != 0:
                sys.exit(f"train_elastic: the replacement exited with {replacement.returncode}")
        print(f"train_elastic: {args.steps} steps on 4, then 3, then 4 ranks: loss "
              f"{np.mean(losses[-10:]):.3f}, test accuracy {accuracy:.3f} (target "
              f"{args.target}); rank 0's hook sent {total.get('wire_bytes', 0)} bytes for "
              f"{total.get('dense_bytes', 0)} dense", flush=True)
        if accuracy < args.target:
            sys.exit(1)


def main():
    args = parse_args()
    if args.rank < 0:
        sys.exit(launch(args))
    run(args)


if __name__ == "__main__":
    main()
