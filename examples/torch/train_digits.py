#!/usr/bin/python3
"""Data-parallel training of an MLP on scikit-learn's digits (8x8 images, 10 classes; the
dataset ships with python3-sklearn, no download) with torch.distributed and DDP, over gloo,
Squeeze or torch's NCCL backend, optionally compressing the gradients in flight with Squeeze's
DDP hook. It trains on the GPU when torch has one (--device), each rank on GPU
LOCAL_RANK % device count, so several ranks may share one GPU.

    /usr/bin/python3 examples/torch/train_digits.py --nproc 4 --backend squeeze
    /usr/bin/python3 examples/torch/train_digits.py --nproc 4 --backend squeeze --codec topk:ratio=0.01
    sqzrun -n 4 /usr/bin/python3 examples/torch/train_digits.py --backend gloo
    LD_PRELOAD=libsqueeze-nccl.so.2 python3 examples/torch/train_digits.py --nproc 2 --backend nccl

--nproc N starts N local ranks itself (Debian 12's torchrun fails on Python 3.11); without it the
ranks come from torch's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as sqzrun and
torchrun set them) or from SQZ_RANK/SQZ_WORLD_SIZE (tests/netlab/netlab.sh). Rank 0 prints one
line per epoch: mean training loss, test accuracy, time per step and the gradient bytes this
rank sent per step (measured by the codec with --codec; for DDP's own all-reduce, the ring
all-reduce's 2(N-1)/N x gradient bytes, marked "est").
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=0, help="start this many local ranks")
    p.add_argument("--backend", choices=["gloo", "squeeze", "nccl"], default="squeeze",
                   help="nccl: torch's ProcessGroupNCCL, on GPUs (with LD_PRELOAD="
                        "libsqueeze-nccl.so.2 it runs over Squeeze's NCCL shim)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto: cuda when torch has a GPU, else cpu")
    p.add_argument("--codec", default=None,
                   help="compress every gradient bucket with this Squeeze codec spec through "
                        "squeeze.torch.compression_hook (e.g. topk:ratio=0.01, powersgd:rank=4, "
                        "dense); default: DDP's own all-reduce on the backend")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=600,
                   help="--nproc: stop every rank after this many seconds")
    return p.parse_args()


def launch(args):
    """Runs this script as args.nproc ranks with torch's variables; returns the exit status."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [a for a in sys.argv[1:]]
    i = argv.index("--nproc") if "--nproc" in argv else None
    if i is not None:
        del argv[i:i + 2]
    else:
        argv = [a for a in argv if not a.startswith("--nproc=")]
    procs = []
    for rank in range(args.nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.nproc),
                   LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(args.nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.setdefault("SQZ_SOCKET_IFNAME", "lo")
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv], env=env))
    deadline = time.monotonic() + args.timeout
    status = 0
    while procs and time.monotonic() < deadline:
        for p in list(procs):
            code = p.poll()
            if code is None:
                continue
            procs.remove(p)
            if code != 0 and status == 0:
                status = code if code > 0 else 128 - code
                print(f"train_digits: a rank exited with status {code}; stopping the others",
                      file=sys.stderr)
                for q in procs:
                    q.send_signal(signal.SIGTERM)
        time.sleep(0.05)
    for p in procs:
        print(f"train_digits: stopping a rank still running after {args.timeout} s",
              file=sys.stderr)
        p.kill()
        p.wait()
        status = status or 124
    return status


def rank_environment():
    """(rank, size) from torch's variables, or from Squeeze's (the network lab)."""
    if "RANK" not in os.environ and "SQZ_RANK" in os.environ:
        os.environ["RANK"] = os.environ["SQZ_RANK"]
        os.environ["WORLD_SIZE"] = os.environ["SQZ_WORLD_SIZE"]
    if "RANK" not in os.environ:
        sys.exit("train_digits: no rank in the environment: pass --nproc N, or start the ranks "
                 "with sqzrun or torchrun")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def pick_device(args, rank):
    """The torch.device this rank trains on; a CUDA device is also made current."""
    import torch
    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        sys.exit("train_digits: --device cuda, but torch sees no GPU (a CPU-only torch, or "
                 "CUDA_VISIBLE_DEVICES hides them); pass --device cpu")
    if args.backend == "nccl" and not (cuda and args.device != "cpu"):
        sys.exit("train_digits: --backend nccl needs a GPU (NCCL runs on CUDA tensors); pass "
                 "--backend squeeze or gloo")
    if args.device == "cpu" or not cuda:
        return torch.device("cpu")
    index = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def load_data(seed):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    import torch
    x, y = load_digits(return_X_y=True)
    x = x / 16.0  # pixels are 0..16
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    as_t = lambda a, t: torch.tensor(a, dtype=t)  # noqa: E731
    return (as_t(xtr, torch.float32), as_t(ytr, torch.long), as_t(xte, torch.float32),
            as_t(yte, torch.long))


def main():
    args = parse_args()
    if args.nproc:
        sys.exit(launch(args))
    rank, size = rank_environment()

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    if args.backend == "squeeze" or args.codec:
        import squeeze.torch  # registers the "squeeze" backend

    torch.set_num_threads(1)  # N ranks share this machine's cores
    device = pick_device(args, rank)
    dist.init_process_group(args.backend, rank=rank, world_size=size)
    torch.manual_seed(args.seed)
    xtr, ytr, xte, yte = (t.to(device) for t in load_data(args.seed))
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10)).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    state = None
    if args.codec:
        state = squeeze.torch.CompressionState(specs=args.codec)
        ddp.register_comm_hook(state, squeeze.torch.compression_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    # Each rank takes its own shard of every epoch's permutation: the global batch is
    # size x args.batch, as with DistributedSampler.
    steps = len(xtr) // (size * args.batch)
    gen = torch.Generator().manual_seed(args.seed)
    if rank == 0:
        print(f"train_digits: {size} ranks on {device.type}, backend {args.backend}, codec "
              f"{args.codec or 'none (DDP all-reduce)'}, {len(xtr)} train / {len(xte)} test "
              f"samples, {steps} steps per epoch, {grad_bytes} gradient bytes", flush=True)
    total_steps, total_time = 0, 0.0
    last_wire = 0
    for epoch in range(args.epochs):
        perm = torch.randperm(len(xtr), generator=gen).to(device)
        ddp.train()
        loss_sum = torch.zeros(1, device=device)
        t0 = time.perf_counter()
        for step in range(steps):
            idx = perm[(step * size + rank) * args.batch:(step * size + rank + 1) * args.batch]
            opt.zero_grad()
            loss = loss_fn(ddp(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            loss_sum += loss.detach()
        if device.type == "cuda":
            torch.cuda.synchronize()  # the steps' kernels are asynchronous
        epoch_time = time.perf_counter() - t0
        total_steps += steps
        total_time += epoch_time
        dist.all_reduce(loss_sum)  # the mean over ranks, for the log
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item() * 100
        if state is not None:
            wire = state.stats()["total"]["wire_bytes"]
            wire_step, last_wire = (wire - last_wire) / steps, wire
            wire_text = f"{wire_step:.0f}"
        else:
            wire_text = f"{2 * (size - 1) / size * grad_bytes:.0f} (est)"
        if rank == 0:
            print(f"epoch {epoch + 1:3d}  loss {loss_sum.item() / size / steps:.4f}  "
                  f"test accuracy {acc:6.2f}%  {epoch_time / steps * 1e3:7.2f} ms/step  "
                  f"{wire_text} wire bytes/step", flush=True)
    if rank == 0:
        print(f"final: backend {args.backend}  codec {args.codec or 'none'}  "
              f"accuracy {acc:.2f}%  {total_time / total_steps * 1e3:.2f} ms/step  "
              f"{wire_text} wire bytes/step", flush=True)
    if state is not None:
        state.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
