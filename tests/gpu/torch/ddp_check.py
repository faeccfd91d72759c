"""torch.distributed on CUDA tensors, N ranks on ONE GPU: the GPU bundle's torch check.

Backends: "nccl" (torch's ProcessGroupNCCL; with LD_PRELOAD=libsqueeze-nccl.so.2 it runs over
Squeeze's NCCL shim, where real NCCL refuses two ranks on one GPU: "Duplicate GPU detected") or
"squeeze" (squeeze.torch's backend, PYTHONPATH naming the built package). Each rank checks
all_reduce in five dtypes exactly, broadcast, all_gather and reduce_scatter, then times STEPS
DistributedDataParallel steps of an MLP and checks that
  - every rank ends with bitwise the same parameters, and
  - dense (SQZ_NCCL_CODEC unset), the parameters equal a reference that takes the same steps in
    one process with the mean of every rank's gradient (what DDP computes), within rounding.
With SQZ_NCCL_CODEC set, a float32 sum the codec compresses is not exact: it must then be
bitwise the same on every rank, and the reference is skipped.

Usage: python3 ddp_check.py NRANKS [STEPS] [--backend nccl|squeeze] [--ddp-only] [--cpu]
(--cpu: CPU tensors, for trying the script itself on a machine without a GPU.)
Prints one "rank R: ..." line per check and exits 1 when one failed.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

LR = 0.01
BATCH = 64


def make_model(dev):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(),
                               torch.nn.Linear(2048, 1024)).to(dev)


def batches(rank, steps, dev):
    g = torch.Generator(device=dev).manual_seed(rank)
    return [torch.randn(BATCH, 1024, device=dev, generator=g) for _ in range(steps)]


def same_on_every_rank(t):
    ref = t.clone()
    dist.broadcast(ref, src=0)
    return torch.equal(t, ref)


def check_collectives(rank, world, dev, lossy_ok):
    ok = True
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.float64):
        for n in (1, 1000, (1 << 20) + 3):
            t = (torch.arange(n, device=dev) % 7 + rank).to(dt)
            dist.all_reduce(t)
            exp = ((torch.arange(n, device=dev) % 7) * world + world * (world - 1) // 2).to(dt)
            if torch.equal(t, exp):
                continue
            if lossy_ok and dt == torch.float32 and n * 4 >= (1 << 20) and same_on_every_rank(t):
                print("rank %d: all_reduce %s n=%d compressed: not exact, the same on every rank"
                      % (rank, dt, n), flush=True)
                continue
            ok = False
            print("rank %d: all_reduce %s n=%d WRONG (max diff %s)" % (
                rank, dt, n, (t.double() - exp.double()).abs().max().item()), flush=True)
    b = torch.full((4096,), float(rank + 1), device=dev)
    dist.broadcast(b, src=0)
    ok &= bool((b == 1).all())
    parts = [torch.empty(1000, device=dev) for _ in range(world)]
    dist.all_gather(parts, torch.full((1000,), float(rank), device=dev))
    ok &= all(bool((p == i).all()) for i, p in enumerate(parts))
    out = torch.empty(1000, device=dev)
    dist.reduce_scatter_tensor(out, torch.ones(1000 * world, device=dev))
    ok &= bool((out == world).all())
    print("rank %d: collectives %s" % (rank, "OK" if ok else "WRONG"), flush=True)
    return ok


def reference(world, steps, dev):
    """The parameters after STEPS steps on the mean of every rank's gradient, in one process."""
    model = make_model(dev)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    data = [batches(r, steps, dev) for r in range(world)]
    for s in range(steps):
        grads = None
        for r in range(world):
            opt.zero_grad()
            model(data[r][s]).pow(2).mean().backward()
            g = [p.grad.detach().clone() for p in model.parameters()]
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        for p, g in zip(model.parameters(), grads):
            p.grad = g / world
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def worker(rank, world, port, args):
    if not args.cpu:
        torch.cuda.set_device(0)
    if args.backend == "squeeze":
        import squeeze.torch  # noqa: F401  (registers the backend)
    dist.init_process_group(args.backend, init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    dev = torch.device("cpu") if args.cpu else torch.device("cuda", 0)
    codec = os.environ.get("SQZ_NCCL_CODEC") if args.backend == "nccl" else None
    ok = True if args.ddp_only else check_collectives(rank, world, dev, codec is not None)

    model = make_model(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=None if args.cpu else [0])
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    data = batches(rank, args.steps, dev)
    sync = (lambda: None) if args.cpu else torch.cuda.synchronize
    sync()
    t0 = time.perf_counter()
    for x in data:
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    sync()
    ms = (time.perf_counter() - t0) * 1e3 / args.steps
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    same = same_on_every_rank(flat)
    print("rank %d: %s DDP %d steps, %.2f ms/step, loss %.5f, params equal to rank 0: %s" % (
        rank, args.backend, args.steps, ms, loss.item(), same), flush=True)
    ok &= same
    if codec is None and not args.ddp_only:
        ref = reference(world, args.steps, dev)
        diff = (flat - ref).abs().max().item()
        close = torch.allclose(flat, ref, rtol=1e-4, atol=1e-6)
        print("rank %d: DDP vs one-process reference: max diff %.3g, %s" % (
            rank, diff, "within rounding" if close else "WRONG"), flush=True)
        ok &= close
    dist.destroy_process_group()
    if not ok:
        sys.exit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("nranks", type=int)
    p.add_argument("steps", type=int, nargs="?", default=20)
    p.add_argument("--backend", choices=["nccl", "squeeze"], default="nccl")
    p.add_argument("--ddp-only", action="store_true", help="skip the collectives and reference")
    p.add_argument("--cpu", action="store_true", help="CPU tensors (tries the script itself)")
    args = p.parse_args()
    if not args.cpu and not torch.cuda.is_available():
        sys.exit("ddp_check: torch %s sees no CUDA device" % torch.__version__)
    nccl = "-" if args.cpu else torch.cuda.nccl.version()
    print("torch", torch.__version__, "nccl", nccl, "backend", args.backend,
          "LD_PRELOAD", os.environ.get("LD_PRELOAD"), "SQZ_NCCL_CODEC",
          os.environ.get("SQZ_NCCL_CODEC"), flush=True)
    mp.spawn(worker, args=(args.nranks, 29400 + os.getpid() % 500, args), nprocs=args.nranks)


if __name__ == "__main__":
    main()
