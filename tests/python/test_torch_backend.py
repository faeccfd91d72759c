"""The "squeeze" torch.distributed backend (squeeze.torch) against gloo, on 4 CPU ranks.

Run 1 (4 ranks): every rank makes the default "squeeze" group and a gloo group, runs each
implemented operation on both with the same inputs and checks the results bitwise (small integers,
exactly representable in every dtype; where gloo lacks the operation or dtype, the gloo side is
built from gloo operations it has: all_reduce then a slice for reduce_scatter, all_gather then cat
for all_gather_into_tensor, float32 for bfloat16, SUM / size for AVG). Then async work semantics,
the refused operations and bad inputs (each raising RuntimeError with a message), ranks
disagreeing on a count (on a group of its own, which then fails every later operation), the
class itself on a store of its own (and its teardown with queued work and Python callbacks, also
from one of its own callbacks), and 3 DistributedDataParallel steps compared with gloo's DDP from
the same seed.

SQZ_TEST_DEVICE=cuda (the GPU bundle, with a CUDA torch): the squeeze side's tensors and DDP
model are on the GPU, gloo's stay on the CPU, and results are compared on the CPU (DDP's within
rounding: the GPU's float arithmetic is not the CPU's).

Run 2 ("kill", 4 ranks, SQZ_TIMEOUT_MS=3000): rank 3 exits before an all_reduce; the others'
all_reduce must raise RuntimeError within SQZ_TIMEOUT_MS + 2 s, and the group's next operation at
once.
"""
import copy
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ranks import is_rank, run_ranks, skip  # noqa: E402

KILL_TIMEOUT_MS = 3000
KILLED_RANK = 3
MAIN_TIMEOUT_MS = 15000  # bounds the disagreeing-ranks case below without slowing anything else
DEVICE = os.environ.get("SQZ_TEST_DEVICE", "cpu")


def dev(t):
    """The squeeze side's copy of a tensor: on DEVICE."""
    return t.to(DEVICE)


def import_backend():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        skip(f"torch is not importable: {e}")
    if not dist.is_available():
        skip("this torch has no torch.distributed")
    try:
        import squeeze.torch  # noqa: F401  (registers the backend)
    except ImportError as e:
        skip(f"squeeze.torch (squeeze._torch_backend) is not importable: {e}")
    if DEVICE != "cpu" and not torch.cuda.is_available():
        skip(f"SQZ_TEST_DEVICE={DEVICE}, but torch {torch.__version__} sees no CUDA device")
    return torch, dist


def log(msg):
    print(f"[rank {os.environ.get('RANK')}] {msg}", flush=True)


def expect_error(fn, *needles):
    """Runs fn, which must raise RuntimeError whose message holds every needle."""
    try:
        fn()
    except RuntimeError as e:
        msg = str(e)
        missing = [n for n in needles if n not in msg]
        assert not missing, f"error message lacks {missing}: {msg}"
        return msg
    raise AssertionError(f"no RuntimeError (expected one saying {needles})")


def check_equal(what, got, want):
    import torch
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}"
    assert got.device.type == DEVICE, f"{what}: the result is on {got.device}, not {DEVICE}"
    got = got.cpu()
    assert torch.equal(got, want), f"{what}: squeeze {got.flatten()[:8]} != gloo {want.flatten()[:8]}"


def test_collectives(torch, dist, rank, size, gloo):
    ReduceOp = dist.ReduceOp
    dtypes = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64]

    def make(n, dtype, op=ReduceOp.SUM, salt=0, r=rank):
        """Rank r's input: small integers, exact in every dtype and in every result."""
        i = torch.arange(n, dtype=torch.int64)
        if op == ReduceOp.PRODUCT:
            v = 1 + (i + r + salt) % 2          # 1 or 2: products up to 16
        elif dtype == torch.uint8:
            v = (i * 7 + r * 3 + salt) % 11     # 0..10: sums up to 40
        else:
            v = (i * 7 + r * 3 + salt) % 11 - 5  # -5..5
        return v.to(dtype)

    def gloo_all_reduce(t, op):
        # gloo has no bfloat16: float32 holds these small integers exactly.
        work = t.float() if t.dtype == torch.bfloat16 else t.clone()
        dist.all_reduce(work, op=op, group=gloo)
        return work.to(t.dtype)

    # all_reduce: every dtype, SUM/PRODUCT/MIN/MAX, small and pipelined sizes.
    for dtype in dtypes:
        for op in (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX):
            for n in (1, 1000, 70001):
                if n == 70001 and dtype not in (torch.float32, torch.int64):
                    continue
                x = make(n, dtype, op)
                want = gloo_all_reduce(x, op)
                x = dev(x)
                dist.all_reduce(x, op=op)
                check_equal(f"all_reduce {dtype} {op} n={n}", x, want)
    # AVG: gloo has none; its SUM / size is exact here (sums of small integers, size 4).
    for dtype in (torch.float16, torch.float32, torch.float64):
        x = make(999, dtype)
        want = gloo_all_reduce(x, ReduceOp.SUM) / size
        x = dev(x)
        dist.all_reduce(x, op=ReduceOp.AVG)
        check_equal(f"all_reduce {dtype} AVG", x, want)
    log("all_reduce: ok")

    # all_reduce_coalesced
    xs = [make(5, torch.float32, salt=1), make(300, torch.float32, salt=2)]
    want = [x.clone() for x in xs]
    dist.all_reduce_coalesced(want, group=gloo)
    xs = [dev(x) for x in xs]
    dist.all_reduce_coalesced(xs)
    for k in range(2):
        check_equal("all_reduce_coalesced", xs[k], want[k])

    # broadcast from rank 2
    for dtype in (torch.int32, torch.float16, torch.float64):
        x = make(333, dtype, salt=rank)
        want = x.clone()
        dist.broadcast(want, src=2, group=gloo)
        x = dev(x)
        dist.broadcast(x, src=2)
        check_equal(f"broadcast {dtype}", x, want)

    # reduce to rank 1 (only the root's tensor is defined afterwards)
    x = make(100, torch.int64)
    want = x.clone()
    dist.reduce(want, dst=1, group=gloo)
    before = x.clone()
    x = dev(x)
    dist.reduce(x, dst=1)
    check_equal("reduce", x, want if rank == 1 else before)

    # all_gather (list) and all_gather_into_tensor (flat; gloo's side from its all_gather)
    x = make(77, torch.float32, salt=rank)
    outs = [dev(torch.empty_like(x)) for _ in range(size)]
    want = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(want, x, group=gloo)
    x = dev(x)
    dist.all_gather(outs, x)
    for r in range(size):
        check_equal(f"all_gather [{r}]", outs[r], want[r])
    flat = dev(torch.empty(size * 77))
    gather_into = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
    gather_into(flat, x)
    check_equal("all_gather_into_tensor", flat, torch.cat(want))

    # reduce_scatter (list) and reduce_scatter_tensor (flat); gloo: all_reduce, then the slice
    chunks = [make(50, torch.int32, salt=r) for r in range(size)]
    total = gloo_all_reduce(torch.cat(chunks), ReduceOp.SUM)
    mine = total[rank * 50:(rank + 1) * 50]
    out = dev(torch.empty(50, dtype=torch.int32))
    dist.reduce_scatter(out, [dev(c) for c in chunks])
    check_equal("reduce_scatter", out, mine)
    out = dev(torch.empty(50, dtype=torch.int32))
    scatter_tensor = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
    scatter_tensor(out, dev(torch.cat(chunks)), op=ReduceOp.MAX)
    check_equal("reduce_scatter_tensor MAX", out,
                gloo_all_reduce(torch.cat(chunks), ReduceOp.MAX)[rank * 50:(rank + 1) * 50])

    # all_to_all_single, equal splits and unequal ones (rank r sends r+p+1 rows to rank p)
    x = make(size * 6, torch.float64, salt=rank).reshape(size * 2, 3)
    out, want = dev(torch.empty_like(x)), torch.empty_like(x)
    dist.all_to_all_single(want, x, group=gloo)
    dist.all_to_all_single(out, dev(x))
    check_equal("all_to_all_single", out, want)
    in_splits = [rank + p + 1 for p in range(size)]
    out_splits = [p + rank + 1 for p in range(size)]
    x = make(sum(in_splits) * 2, torch.int64, salt=rank).reshape(-1, 2)
    want = torch.empty(sum(out_splits), 2, dtype=torch.int64)
    out = dev(torch.empty_like(want))
    dist.all_to_all_single(want, x, out_splits, in_splits, group=gloo)
    dist.all_to_all_single(out, dev(x), out_splits, in_splits)
    check_equal("all_to_all_single (unequal splits)", out, want)

    # send/recv around the ring, both posted before either is waited on
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    x = dev(make(1000, torch.float32, salt=rank))
    got = torch.empty_like(x)
    works = [dist.isend(x, nxt), dist.irecv(got, prv)]
    for w in works:
        w.wait()
    check_equal("isend/irecv", got, make(1000, torch.float32, salt=prv, r=prv))
    if rank == 0:  # blocking send/recv with a tag
        dist.send(x, 1, tag=7)
    elif rank == 1:
        y = torch.empty_like(x)
        dist.recv(y, 0, tag=7)
        check_equal("send/recv", y, make(1000, torch.float32, salt=0, r=0))

    dist.barrier()
    log("broadcast, reduce, all_gather, reduce_scatter, all_to_all_single, send/recv, "
        "barrier: ok")


def test_work(torch, dist, rank, size, gloo):
    # Several in flight at once; they run in call order.
    xs = [torch.full((10 + k,), float(rank + k), device=DEVICE) for k in range(4)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    futs = [w.get_future() for w in works]
    for k, (w, f) in enumerate(zip(works, futs)):
        value = f.wait()
        assert isinstance(value, list) and len(value) == 1 and value[0] is not None
        assert torch.equal(value[0], xs[k]), "the future's value is not the output tensor"
        assert w.wait() is True
        assert w.is_completed()
        assert torch.equal(xs[k].cpu(), torch.full((10 + k,), float(sum(range(size)) + size * k)))
        assert torch.equal(w.result()[0], xs[k])
    # then(): callbacks see the value; the barrier's future holds an empty list.
    x = torch.ones(8, device=DEVICE)
    chained = dist.all_reduce(x, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    assert torch.equal(chained.wait().cpu(), torch.full((8,), 2.0 * size))
    w = dist.barrier(async_op=True)
    assert w.wait() and w.get_future().wait() == []
    log("async work and futures: ok")


def test_refusals(torch, dist, rank, size, gloo):
    ReduceOp = dist.ReduceOp
    x = torch.ones(4, device=DEVICE)
    for name, fn in [
            ("gather", lambda: dist.gather(x, [torch.empty_like(x) for _ in range(size)]
                                           if rank == 0 else None, dst=0)),
            ("scatter", lambda: dist.scatter(x, [torch.ones_like(x) for _ in range(size)]
                                             if rank == 0 else None, src=0)),
            ("alltoall", lambda: dist.all_to_all([dev(torch.empty(1)) for _ in range(size)],
                                                 [dev(torch.ones(1)) for _ in range(size)])),
            ("allgather_coalesced", lambda: dist.all_gather_coalesced(
                [[torch.empty_like(x)] for _ in range(size)], [x])),
            ("recvAnysource", lambda: dist.recv(torch.empty_like(x)))]:
        expect_error(fn, "squeeze backend does not implement", name)
    # Bad inputs raise at the call, naming the problem; nothing is queued.
    expect_error(lambda: dist.all_reduce(dev(torch.ones(4, 6))[:, ::2]), "allreduce",
                 "not contiguous")
    expect_error(lambda: dist.all_reduce(dev(torch.ones(4, dtype=torch.bool))), "dtype Bool")
    # torch 1.13's dispatcher refuses a meta tensor before the backend sees it ("AutogradMeta");
    # either way the error names the device.
    msg = expect_error(lambda: dist.all_reduce(torch.empty(4, device="meta")))
    assert "meta" in msg.lower(), f"meta tensor: the error does not name the device: {msg}"
    expect_error(lambda: dist.broadcast(dev(torch.ones(4, dtype=torch.bool)), src=0),
                 "broadcast", "dtype Bool")
    expect_error(lambda: dist.all_reduce(dev(torch.ones(4, dtype=torch.int32)), op=ReduceOp.BAND),
                 "BAND is not supported")
    expect_error(lambda: dist.all_reduce(dev(torch.ones(4)), op=ReduceOp.BXOR), "BXOR")
    world = dist.distributed_c10d._get_default_group()
    expect_error(lambda: world.allreduce([dev(torch.ones(2)), dev(torch.ones(2))]),
                 "exactly one tensor per call, got 2")
    expect_error(lambda: dist.all_gather([dev(torch.empty(3))] * size, dev(torch.ones(4))),
                 "allgather", "3 elements but the input has 4")
    expect_error(lambda: dist.all_to_all_single(dev(torch.empty(5)), dev(torch.ones(5))),
                 "alltoall_base", "not divisible")
    # The group still works after refused calls.
    y = dev(torch.ones(3))
    dist.all_reduce(y)
    assert torch.equal(y.cpu(), torch.full((3,), float(size)))
    log("refused operations and bad inputs: ok")


def test_disagreement(torch, dist, rank, size):
    # Ranks disagree on the count: Squeeze detects it (sqzInvalidUsage); must not hang. On a group
    # of its own, which fails every later operation.
    bad = dist.new_group(backend="squeeze")
    start = time.monotonic()
    x = dev(torch.ones(1001 if rank == 0 else 1000))
    msg = expect_error(lambda: dist.all_reduce(x, group=bad), "squeeze backend: allreduce failed")
    elapsed = time.monotonic() - start
    log(f"count mismatch raised after {elapsed:.2f} s: {msg}")
    assert elapsed < MAIN_TIMEOUT_MS / 1000 + 2, f"took {elapsed:.1f} s"
    expect_error(lambda: dist.all_reduce(dev(torch.ones(4)), group=bad),
                 "allreduce was not run", "an earlier operation of this process group failed")
    dist.destroy_process_group(bad)  # aborts the communicator; must not hang


def test_direct(torch, dist, rank, size):
    # The class itself, on a store of its own, and its teardown with queued work whose Python
    # callbacks need the GIL that the destroying thread holds.
    from datetime import timedelta
    import squeeze.torch
    store = dist.PrefixStore("direct", dist.distributed_c10d._get_default_store())
    pg = squeeze.torch.ProcessGroupSqueeze(store, rank, size, timedelta(seconds=30))
    assert pg.comm_handle != 0 and pg.name() == "squeeze" and pg.size() == size
    x = dev(torch.ones(1000))
    pg.allreduce([x]).wait()
    assert torch.equal(x.cpu(), torch.full((1000,), float(size)))
    seen = []
    futs = [pg.allreduce([dev(torch.ones(100000))]).get_future().then(
        lambda f: seen.append(f.value()[0][0].item())) for _ in range(4)]
    del pg  # the destructor drains the queue with the GIL released
    assert seen == [float(size)] * 4, seen
    assert all(f.done() for f in futs)
    # The last reference dropped by a future callback, most likely on the progress thread itself.
    store = dist.PrefixStore("direct2", dist.distributed_c10d._get_default_store())
    holder = [squeeze.torch.ProcessGroupSqueeze(store, rank, size, timedelta(seconds=30))]
    futs = [holder[0].allreduce([dev(torch.ones(1 << 20))]).get_future() for _ in range(4)]
    last = futs[-1].then(lambda f: holder.clear())
    last.wait()
    assert not holder and all(f.done() for f in futs)
    log("ProcessGroupSqueeze directly, teardown with queued work: ok")


def test_ddp(torch, dist, rank, size, gloo):
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    nets = {}
    for name, group, device in (("squeeze", None, DEVICE), ("gloo", gloo, "cpu")):
        net = DDP(copy.deepcopy(model).to(device), process_group=group)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(100 + rank)
        for _ in range(3):
            opt.zero_grad()
            loss = net(torch.randn(16, 8, generator=gen).to(device)).pow(2).sum()
            loss.backward()
            opt.step()
        nets[name] = torch.cat([p.detach().flatten() for p in net.parameters()]).cpu()
    sq, gl = nets["squeeze"], nets["gloo"]
    # The same on every rank, bitwise (gathered through gloo).
    every = [torch.empty_like(sq) for _ in range(size)]
    dist.all_gather(every, sq, group=gloo)
    assert all(torch.equal(e, sq) for e in every), "DDP parameters differ across ranks"
    # Against gloo's DDP: the bucket sums may add in another order, so not necessarily bitwise.
    diff = (sq - gl).abs().max().item()
    tol = 1e-5 if DEVICE == "cpu" else 1e-4  # the GPU's matmul rounds otherwise
    assert torch.allclose(sq, gl, rtol=tol, atol=tol), f"squeeze DDP vs gloo DDP: {diff}"
    log(f"DDP: 3 steps, equal across ranks, max |squeeze - gloo| = {diff:g}")


def main_rank():
    import warnings
    warnings.filterwarnings("ignore", message=".*will be deprecated")
    torch, dist = import_backend()
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    start = time.monotonic()
    dist.init_process_group("squeeze")
    assert dist.get_backend() == "squeeze"
    gloo = dist.new_group(backend="gloo")
    log(f"groups made in {time.monotonic() - start:.2f} s")
    test_collectives(torch, dist, rank, size, gloo)
    test_work(torch, dist, rank, size, gloo)
    test_refusals(torch, dist, rank, size, gloo)
    test_disagreement(torch, dist, rank, size)
    test_direct(torch, dist, rank, size)
    test_ddp(torch, dist, rank, size, gloo)
    dist.barrier(group=gloo)
    dist.destroy_process_group()  # joins the progress threads, destroys the communicators
    log(f"done in {time.monotonic() - start:.2f} s")


def kill_rank():
    torch, dist = import_backend()
    rank = int(os.environ["RANK"])
    dist.init_process_group("squeeze")
    x = dev(torch.ones(10000))
    dist.all_reduce(x)  # every connection up
    if rank == KILLED_RANK:
        os._exit(0)  # a peer dies (exit 0: the parent expects it)
    start = time.monotonic()
    msg = expect_error(lambda: dist.all_reduce(x), "squeeze backend: allreduce failed")
    elapsed = time.monotonic() - start
    log(f"all_reduce with rank {KILLED_RANK} gone raised after {elapsed:.2f} s: {msg}")
    bound = KILL_TIMEOUT_MS / 1000 + 2
    if elapsed >= bound:
        log(f"FAIL: took {elapsed:.2f} s, more than SQZ_TIMEOUT_MS + 2 s = {bound} s")
        os._exit(1)
    # Later operations fail at once, through wait() and through the future alike.
    start = time.monotonic()
    expect_error(lambda: dist.all_reduce(x), "an earlier operation of this process group failed")
    work = dist.all_reduce(x, async_op=True)
    expect_error(lambda: work.get_future().wait(), "allreduce was not run")
    assert work.is_completed()
    assert time.monotonic() - start < 1.0
    os._exit(0)  # no teardown against a dead peer


def rank_main():
    try:
        if sys.argv[1:] == ["kill"]:
            kill_rank()
        else:
            main_rank()
    except SystemExit:
        raise
    except BaseException:
        import traceback
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)
    sys.exit(0)


def main():
    import_backend()  # skips here, before starting ranks, when torch or the backend is missing
    start = time.monotonic()
    rc = run_ranks(4, __file__, deadline_s=70, env={"SQZ_TIMEOUT_MS": str(MAIN_TIMEOUT_MS)})
    print(f"run 1 (collectives, errors, DDP): rc={rc}, {time.monotonic() - start:.1f} s",
          flush=True)
    if rc != 0:
        return rc
    start = time.monotonic()
    rc = run_ranks(4, __file__, args=["kill"], deadline_s=30,
                   env={"SQZ_TIMEOUT_MS": str(KILL_TIMEOUT_MS)})
    print(f"run 2 (rank {KILLED_RANK} killed): rc={rc}, {time.monotonic() - start:.1f} s",
          flush=True)
    return rc


if __name__ == "__main__":
    if is_rank():
        rank_main()
    else:
        sys.exit(main())
