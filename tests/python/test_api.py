"""python-api: the squeeze package's Comm and Codec on 4 ranks (one process each, started by
ranks.py), checked against results computed with numpy.

Every collective and op on int32 and float32 (inputs small integers, so every order of
reduction is exact and results compare bitwise), in place and out of place; the same calls on
torch CPU tensors through DLPack when torch imports; the topk codec (identical results on every
rank, stats, a state_dict round trip); and bad input, which must raise the right squeeze
exception with a message that names the problem, including a count that differs across ranks
(Squeeze detects it: the test fails, rather than hangs, if it does not).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ranks  # noqa: E402

NRANKS = 4
OPS = ("sum", "prod", "max", "min", "avg")
SIZES = (1, 7, 1000, 20000)  # one element, fewer than ranks, and several pipeline chunks


imports = ranks.import_numpy_and_squeeze


np, squeeze = imports() if ranks.is_rank() else (None, None)
checks = 0


def same(got, want, what):
    """Bitwise equality, dtype and shape included."""
    global checks
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert got.tobytes() == want.tobytes(), f"{what}: got {got[:8]}..., expected {want[:8]}..."
    checks += 1


def raises(cls, word, what, fn, *args, **kwargs):
    """fn(*args) must raise squeeze exception cls with `word` in its message."""
    global checks
    try:
        fn(*args, **kwargs)
    except cls as e:
        assert word.lower() in str(e).lower(), f"{what}: message lacks '{word}': {e}"
        assert isinstance(e, squeeze.Error) and e.result == cls.result, \
            f"{what}: result {e.result}, expected {cls.result}"
        checks += 1
        return e
    except Exception as e:
        raise AssertionError(f"{what}: raised {type(e).__name__} ({e}), expected "
                             f"{cls.__name__}") from e
    raise AssertionError(f"{what}: no exception, expected {cls.__name__}")


def inputs(r, n, dtype, op):
    """Rank r's input: small integers, so sums, products and averages are exact."""
    i = np.arange(n)
    if op == "prod":
        return np.array([-2, -1, 1, 2], dtype)[(i + r) % 4]
    return (((i * 7 + r * 3) % 11) - 5).astype(dtype)


def expected(op, data, dtype):
    stack = np.stack(data)
    if op == "sum":
        return stack.sum(axis=0, dtype=dtype)
    if op == "prod":
        return stack.prod(axis=0, dtype=dtype)
    if op == "max":
        return stack.max(axis=0)
    if op == "min":
        return stack.min(axis=0)
    total = stack.sum(axis=0, dtype=np.float64) / len(data)
    # Squeeze divides integers with truncation (toward zero), not numpy's floor.
    return (np.trunc(total) if np.issubdtype(dtype, np.integer) else total).astype(dtype)


def test_allreduce(comm):
    rank, size = comm.rank, comm.size
    for dtype in (np.int32, np.float32):
        for op in OPS:
            for n in SIZES:
                data = [inputs(r, n, dtype, op) for r in range(size)]
                want = expected(op, data, dtype)
                what = f"allreduce {op} {np.dtype(dtype).name} n={n}"
                send = data[rank].copy()
                recv = np.full(n, 99, dtype)
                out = comm.allreduce(send, recv, op=op)
                assert out is recv, f"{what}: did not return recv"
                same(recv, want, what + " out of place")
                same(send, data[rank], what + ": send unchanged")
                buf = data[rank].copy()
                assert comm.allreduce(buf, op=squeeze.ReduceOp[op.upper()]) is buf
                same(buf, want, what + " in place (ReduceOp)")
    # The other dtypes, sum only.
    for dtype in (np.int8, np.uint8, np.uint32, np.int64, np.uint64, np.float16, np.float64):
        data = [(np.arange(33) % 5 + r).astype(dtype) for r in range(size)]
        buf = data[rank].copy()
        comm.allreduce(buf)
        same(buf, expected("sum", data, dtype), f"allreduce sum {np.dtype(dtype).name}")
    assert isinstance(comm.last_algorithm, str) and comm.last_algorithm, "no last_algorithm"


def test_collectives(comm):
    rank, size = comm.rank, comm.size
    n = 1001
    for dtype in (np.int32, np.float32):
        name = np.dtype(dtype).name
        rows = [(np.arange(n) * (r + 1) - 7 * r).astype(dtype) for r in range(size)]
        mine = rows[rank]

        root = 1
        buf = mine.copy()
        assert comm.broadcast(buf, root=root) is buf
        same(buf, rows[root], f"broadcast {name} in place")
        recv = np.zeros(n, dtype)
        comm.broadcast(mine, recv, root)  # ncclBroadcast's order: send, recv, root
        same(recv, rows[root], f"broadcast {name} into recv")

        root = 2
        recv = np.full(n, 5, dtype)
        comm.reduce(mine, recv, op="max", root=root)
        same(recv, np.max(rows, axis=0) if rank == root else np.full(n, 5, dtype),
             f"reduce max {name} (root {root}; others' recv untouched)")
        buf = mine.copy()
        comm.reduce(buf, root=root)
        if rank == root:
            same(buf, np.sum(rows, axis=0, dtype=dtype), f"reduce sum {name} in place")

        recv = np.zeros(size * n, dtype)
        assert comm.allgather(mine, recv) is recv
        same(recv, np.concatenate(rows), f"allgather {name}")

        big = [np.tile(row, size) + np.repeat(np.arange(size), n).astype(dtype) for row in rows]
        recv = np.zeros(n, dtype)
        comm.reduce_scatter(big[rank], recv, op="sum")
        same(recv, np.sum(big, axis=0, dtype=dtype)[rank * n:(rank + 1) * n],
             f"reduce_scatter {name}")

        # Block p of rank r's send is r*100 + p*10 + i; block p of recv comes from rank p.
        blocks = lambda r: np.concatenate(  # noqa: E731
            [(r * 100 + p * 10 + np.arange(n)).astype(dtype) for p in range(size)])
        recv = np.zeros(size * n, dtype)
        comm.alltoall(blocks(rank), recv)
        want = np.concatenate([blocks(p)[rank * n:(rank + 1) * n] for p in range(size)])
        same(recv, want, f"alltoall {name}")

        # A ring: even ranks send first, odd ranks receive first, so blocking calls pair up.
        right, left = (rank + 1) % size, (rank - 1) % size
        got = np.zeros(n, dtype)
        if rank % 2 == 0:
            comm.send(mine, right)
            comm.recv(got, left)
        else:
            comm.recv(got, left)
            comm.send(mine, right)
        same(got, rows[left], f"send/recv ring {name}")
    comm.barrier()


def test_split(comm):
    rank = comm.rank
    with comm.split(rank % 2) as sub:
        assert (sub.rank, sub.size) == (rank // 2, 2), f"split: rank {sub.rank} of {sub.size}"
        buf = np.array([rank], np.int32)
        sub.allreduce(buf)
        same(buf, np.array([rank % 2 + (rank % 2 + 2)], np.int32), "split even/odd allreduce")
    raises(squeeze.InvalidUsage, "closed", "use after close", sub.barrier)
    # Ranks 2, 3 stay out (None); the key reverses the order of ranks 0, 1.
    sub = comm.split(0 if rank < 2 else None, key=-rank)
    if rank < 2:
        assert (sub.rank, sub.size) == (1 - rank, 2), f"split key: {sub.rank} of {sub.size}"
        sub.close()
        sub.close()  # idempotent
    else:
        assert sub is None, "split(None) did not return None"


def test_torch(comm):
    try:
        import torch
    except ImportError:
        if comm.rank == 0:
            print("torch does not import: its part is skipped", flush=True)
        return
    rank, size = comm.rank, comm.size
    n = 513
    for tdtype, dtype in ((torch.int32, np.int32), (torch.float32, np.float32)):
        name = np.dtype(dtype).name
        for op in OPS:
            data = [inputs(r, n, dtype, op) for r in range(size)]
            t = torch.from_numpy(data[rank].copy())
            assert comm.allreduce(t, op=op) is t
            same(t.numpy(), expected(op, data, dtype), f"torch allreduce {op} {name} in place")
            out = torch.zeros(n, dtype=tdtype)
            comm.allreduce(torch.from_numpy(data[rank]), out, op)
            same(out.numpy(), expected(op, data, dtype), f"torch allreduce {op} {name}")
        rows = [(np.arange(n) + 1000 * r).astype(dtype) for r in range(size)]
        mine = torch.from_numpy(rows[rank].copy())
        t = mine.clone()
        comm.broadcast(t, root=3)
        same(t.numpy(), rows[3], f"torch broadcast {name}")
        out = torch.zeros(size * n, dtype=tdtype)
        comm.allgather(mine, out)
        same(out.numpy(), np.concatenate(rows), f"torch allgather {name}")
        out = torch.zeros(n // size, dtype=tdtype)
        whole = torch.from_numpy(np.concatenate(rows)[:size * (n // size)].copy())
        comm.reduce_scatter(whole, out)
        same(out.numpy(), (whole.numpy() * size)[rank * (n // size):(rank + 1) * (n // size)],
             f"torch reduce_scatter {name}")
        # Mixed: a numpy send and a torch recv in one call.
        out = torch.zeros(n, dtype=tdtype)
        comm.allreduce(rows[rank], out, op="max")
        same(out.numpy(), rows[-1], f"numpy send, torch recv {name}")
    # bfloat16 has no numpy dtype: compare through float32.
    t = torch.full((64,), float(rank + 1), dtype=torch.bfloat16)
    comm.allreduce(t)
    same(t.float().numpy(), np.full(64, size * (size + 1) / 2, np.float32), "torch bfloat16 sum")
    # A 2-D tensor and a contiguous slice of one (a byte offset into its storage).
    m = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1)
    comm.allreduce(m[1:])
    same(m[1:].numpy(), (np.arange(12, dtype=np.float32).reshape(3, 4) * 10)[1:],
         "torch 2-D slice")
    raises(squeeze.InvalidArgument, "contiguous", "torch non-contiguous",
           comm.allreduce, torch.zeros(4, 4).t())
    raises(squeeze.InvalidArgument, "bool", "torch bool", comm.allreduce,
           torch.zeros(4, dtype=torch.bool))
    raises(squeeze.InvalidArgument, "complex", "torch complex", comm.allreduce,
           torch.zeros(4, dtype=torch.complex64))
    raises(squeeze.InvalidArgument, "int16", "torch int16", comm.allreduce,
           torch.zeros(4, dtype=torch.int16))
    raises(squeeze.InvalidArgument, "device type meta", "torch meta tensor", comm.allreduce,
           torch.empty(4, device="meta"))
    raises(squeeze.InvalidArgument, "gradient", "torch requires_grad", comm.allreduce,
           torch.zeros(4, requires_grad=True))
    raises(squeeze.InvalidArgument, "stream", "stream with host tensors", comm.allreduce,
           torch.zeros(4), stream=1234)
    codec = squeeze.Codec("dense", 8, torch.float32, comm)
    assert codec.dtype == "float32", codec.dtype
    codec.close()


def test_codec(comm):
    rank, size = comm.rank, comm.size
    n = 10000  # 40 KB: above SQZ_CODEC_MIN_BYTES (16K), below which codecs send dense
    rng = np.random.default_rng(1234 + rank)
    grads = [rng.standard_normal(n).astype(np.float32) for _ in range(4)]

    def gathered(result):
        everyone = np.zeros(size * n, np.float32)
        comm.allgather(result, everyone)
        return everyone.reshape(size, n)

    with squeeze.Codec("topk:ratio=0.1", n, np.float32, comm) as codec:
        assert (codec.spec, codec.count, codec.dtype) == ("topk:ratio=0.1", n, "float32")
        out = np.zeros(n, np.float32)
        assert codec.allreduce(grads[0], out) is out
        for r, row in enumerate(gathered(out)):
            same(row, out, f"topk result of rank {r} vs this rank's")
        buf = grads[1].copy()
        codec.allreduce(buf, op="sum")  # in place
        for r, row in enumerate(gathered(buf)):
            same(row, buf, f"topk in place, rank {r}")
        stats = codec.stats()
        keys = {"calls", "wire_bytes", "dense_bytes", "ratio", "gain", "residual_norm",
                "encode_seconds", "combine_seconds", "decode_seconds", "last_ratio",
                "cf", "phase", "cf_min", "dense_calls", "guard_dense_calls"}
        assert set(stats) == keys, f"stats keys: {sorted(stats)}"
        assert stats["calls"] == 2 and stats["dense_bytes"] > stats["wire_bytes"] > 0, stats
        assert stats["residual_norm"] > 0, "topk with error feedback left no residual"

        state = codec.state_dict()
        assert set(state) == {"spec", "count", "dtype", "state"} and state["state"], state.keys()
        mine = codec.allreduce(grads[2], np.zeros(n, np.float32))
        with squeeze.Codec("topk:ratio=0.1", n, "float32", comm) as fresh:
            fresh.load_state_dict(state)
            theirs = fresh.allreduce(grads[2], np.zeros(n, np.float32))
        same(theirs, mine, "codec loaded from state_dict vs the original's next call")

        other = squeeze.Codec("topk:ratio=0.2", n, np.float32, comm)
        raises(squeeze.InvalidArgument, "spec", "state_dict of another spec",
               other.load_state_dict, state)
        other.close()
        other = squeeze.Codec("topk:ratio=0.1", n + 1, np.float32, comm)
        raises(squeeze.InvalidArgument, "elements", "state_dict of another count",
               other.load_state_dict, state)
        raises(squeeze.InvalidArgument, "elements", "codec allreduce of the wrong count",
               other.allreduce, grads[0])
        other.close()
        raises(squeeze.InvalidUsage, "closed", "codec used after close", other.stats)
        raises(squeeze.InvalidArgument, "float32", "lossy codec on int32",
               squeeze.Codec, "topk:ratio=0.1", n, np.int32, comm)
        raises(squeeze.InvalidArgument, "ratio", "bad codec key value",
               squeeze.Codec, "topk:ratio=7", n, np.float32, comm)


def test_bad_input(comm):
    x = np.arange(16, dtype=np.float32)
    raises(squeeze.InvalidArgument, "contiguous", "non-contiguous array", comm.allreduce, x[::2])
    raises(squeeze.InvalidArgument, "bool", "bool array", comm.allreduce, np.zeros(4, bool))
    raises(squeeze.InvalidArgument, "complex", "complex array", comm.allreduce,
           np.zeros(4, np.complex64))
    frozen = np.zeros(16, np.float32)
    frozen.flags.writeable = False
    raises(squeeze.InvalidArgument, "read-only", "read-only recv", comm.allreduce, x, frozen)
    raises(squeeze.InvalidArgument, "read-only", "read-only in place", comm.allreduce, frozen)
    raises(squeeze.InvalidArgument, "read-only", "bytes as recv buffer", comm.recv, b"abcd", 0)
    raises(squeeze.InvalidArgument, "dtype", "send/recv dtypes differ", comm.allreduce, x,
           np.zeros(16, np.int32))
    raises(squeeze.InvalidArgument, "needs 64", "allgather recv too small", comm.allgather, x,
           np.zeros(16, np.float32))
    raises(squeeze.InvalidArgument, "elements", "allreduce recv too small", comm.allreduce, x,
           np.zeros(15, np.float32))
    raises(squeeze.InvalidArgument, "multiple", "alltoall not a multiple of size",
           comm.alltoall, np.zeros(6, np.float32), np.zeros(6, np.float32))
    raises(squeeze.InvalidArgument, "op", "unknown op", comm.allreduce, x, op="mean")
    raises(squeeze.InvalidArgument, "root", "root out of range", comm.broadcast, x, root=99)
    # The order before ncclBroadcast's, (buf, root, recv): told, not taken as a buffer.
    raises(squeeze.InvalidArgument, "pass the root as root=", "broadcast(buf, root)",
           comm.broadcast, x, 0)
    try:
        comm.broadcast(x, 0, np.zeros(16, np.float32))
        raise AssertionError("broadcast(buf, root, recv) ran")
    except TypeError as e:  # pybind11's, listing broadcast(buf, recv=None, root=0, ...)
        assert "recv: object = None, root: int = 0" in str(e), e
    raises(squeeze.InvalidArgument, "peer", "peer out of range", comm.send, x, 99)
    raises(squeeze.InvalidArgument, "buffer protocol", "object without data",
           comm.allreduce, object())
    raises(squeeze.InvalidArgument, "None", "None buffer", comm.allreduce, None)
    raises(squeeze.InvalidArgument, "128 bytes", "short unique id", squeeze.Comm, b"x", 0, 1)
    raises(squeeze.InvalidArgument, "dtype", "unknown codec dtype", squeeze.Codec, "dense", 4,
           "float8", comm)
    assert isinstance(squeeze.InvalidArgument("x"), ValueError)
    assert issubclass(squeeze.Timeout, TimeoutError) and issubclass(squeeze.Error, RuntimeError)
    # Nothing above reached the wire: the communicator is still in step.
    comm.barrier()


def test_mismatch(comm):
    """A count that differs across ranks, on a Comm made from a unique_id (then aborted)."""
    rank, size = comm.rank, comm.size
    box = np.zeros(squeeze._squeeze.UNIQUE_ID_BYTES, np.uint8)
    if rank == 0:
        box[:] = np.frombuffer(squeeze.unique_id(), np.uint8)
    comm.broadcast(box, root=0)
    with squeeze.Comm(box.tobytes(), rank, size, timeout_ms=20000) as c2:
        assert repr(c2) == f"<squeeze.Comm rank {rank} of {size}>", repr(c2)
        assert c2.async_error() is None
        n = 1000 if rank == 0 else 999
        start = time.monotonic()
        try:
            c2.allreduce(np.ones(n, np.float32))
        except squeeze.InvalidUsage as e:
            assert "disagree" in str(e), f"count mismatch: {e}"
        except squeeze.RemoteError as e:
            pass  # a rank that the detecting peer left behind
        else:
            raise AssertionError("a count that differs across ranks did not raise")
        took = time.monotonic() - start
        assert took < 10, f"the count mismatch took {took:.1f} s to surface (a timeout?)"
        global checks
        checks += 1
        c2.abort()
        raises(squeeze.InvalidUsage, "aborted", "use after abort", c2.allreduce,
               np.ones(4, np.float32))
        c2.abort()  # idempotent, as close() is
    assert c2.closed


def run_rank():
    start = time.monotonic()
    comm = squeeze.Comm.from_env()
    assert (comm.rank, comm.size) == (int(os.environ["RANK"]), NRANKS), repr(comm)
    test_allreduce(comm)
    test_collectives(comm)
    test_split(comm)
    test_torch(comm)
    test_codec(comm)
    test_bad_input(comm)
    test_mismatch(comm)
    comm.barrier()
    rank = comm.rank
    comm.close()
    raises(squeeze.InvalidUsage, "closed", "Comm used after close", comm.allreduce,
           np.zeros(4, np.float32))
    if rank == 0:
        print(f"python-api: {checks} checks passed on each of {NRANKS} ranks in "
              f"{time.monotonic() - start:.1f} s", flush=True)


if __name__ == "__main__":
    if ranks.is_rank():
        run_rank()
    else:
        imports()  # skip here, not in 4 processes, when a module is missing
        # torchrun's variables name a rendezvous address, and Squeeze authenticates the ranks
        # that meet there with a secret they share.
        secret = os.environ.get("SQZ_SECRET") or os.urandom(16).hex()
        sys.exit(ranks.run_ranks(NRANKS, os.path.abspath(__file__), deadline_s=120,
                                 env={"SQZ_SECRET": secret}))
