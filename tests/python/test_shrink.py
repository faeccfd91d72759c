"""python-shrink: Comm.revoke(), Comm.shrink() and Comm.grow() on 4 ranks (one process each,
started by ranks.py), with a topk codec that goes on through both.

Rank 3 leaves after 3 calls without a word (os._exit: its sockets close as a killed process's
do). The others find out from a failed call, revoke, shrink to 3, and make exact dense calls
and topk calls whose results agree bit for bit across them (their codecs moved to the new
Comm). Then rank 0 makes a unique id, sends it to the others and to a new process it starts,
and the 4 make exact calls on the grown Comm. Bad input to shrink raises InvalidArgument.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ranks  # noqa: E402

NRANKS, LOST, COUNT = 4, 3, 4096


imports = ranks.import_numpy_and_squeeze


np, squeeze = imports() if (ranks.is_rank() or "--join" in sys.argv) else (None, None)


def inputs(rank, call):
    """Small integers, so every sum is exact."""
    return ((np.arange(COUNT) + 7 * call) % 89 + rank).astype(np.float32)


def exact_call(comm, call):
    got = comm.allreduce(inputs(comm.rank, call))
    want = sum(inputs(r, call) for r in range(comm.size))
    assert got.tobytes() == want.tobytes(), f"call {call} on {comm.size} ranks: {got[:4]}"


def run_joiner(hex_id):
    comm = squeeze.Comm(bytes.fromhex(hex_id), NRANKS - 1, NRANKS)
    for call in range(5):
        exact_call(comm, 200 + call)
    comm.close()


def run_rank():
    comm = squeeze.Comm.from_env()
    rank = comm.rank
    topk = squeeze.Codec("topk:ratio=0.01", COUNT, "float32", comm)
    call = 0
    try:
        while call < 1000:
            if rank == LOST and call == 3:
                os._exit(0)  # gone: no close, no goodbye
            exact_call(comm, call)
            topk.allreduce(0.001 * inputs(rank, call))
            call += 1
        raise AssertionError(f"rank {rank}: no call failed after rank {LOST} left")
    except squeeze.Error as e:
        assert isinstance(e, (squeeze.RemoteError, squeeze.Timeout)), f"rank {rank}: {e!r}"
    comm.revoke()
    for bad, word in (([rank], "itself"), ([0, 1, 2, 3], "every rank"), ([9], "not a rank")):
        try:
            comm.shrink(bad)
            raise AssertionError(f"shrink({bad}) was accepted")
        except squeeze.InvalidArgument as e:
            assert word in str(e), f"shrink({bad}): {e}"
    small = comm.shrink([LOST])
    comm.close()
    assert (small.rank, small.size) == (rank, NRANKS - 1), repr(small)
    assert topk.comm is small, "the codec did not move to the shrunk Comm"
    for c in range(10):
        exact_call(small, 100 + c)
        out = topk.allreduce(0.001 * inputs(rank, 100 + c))
        first = small.broadcast(out.copy(), root=0)
        assert out.tobytes() == first.tobytes(), f"rank {rank}: topk result differs from rank 0's"
    # Grow back: rank 0 makes the id, hands it to the others and to the new process.
    uid = np.frombuffer(squeeze.unique_id() if rank == 0 else bytes(128), np.uint8).copy()
    uid = small.broadcast(uid, root=0)
    joiner = None
    if rank == 0:
        joiner = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--join",
                                   uid.tobytes().hex()])
    big = small.grow(1, uid.tobytes())
    small.close()
    assert (big.rank, big.size) == (rank, NRANKS), repr(big)
    for c in range(5):
        exact_call(big, 200 + c)
    big.close()
    topk.close()
    if joiner is not None:
        assert joiner.wait(timeout=60) == 0, "the joining process failed"
        print(f"python-shrink: 3 survivors shrank and grew back to {NRANKS}", flush=True)


if __name__ == "__main__":
    if "--join" in sys.argv:
        run_joiner(sys.argv[sys.argv.index("--join") + 1])
    elif ranks.is_rank():
        run_rank()
    else:
        imports()
        secret = os.environ.get("SQZ_SECRET") or os.urandom(16).hex()
        sys.exit(ranks.run_ranks(NRANKS, os.path.abspath(__file__), deadline_s=120,
                                 env={"SQZ_SECRET": secret, "SQZ_TIMEOUT_MS": "10000"}))
