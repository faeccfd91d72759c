"""Tests of squeeze.torch.compression_hook, the compressing DDP communication hook: spec ranges,
DDP over gloo and over the squeeze backend with the hook (ranks end bitwise equal with top-k and
with PowerSGD's codec per gradient matrix; a dense spec
matches DDP's own all-reduce), a checkpoint of the hook's codec states that resumes training
bit for bit, and a lossy codec on float64 gradients failing with a message. 4 ranks.

SQZ_TEST_DEVICE=cuda (the GPU bundle, with a CUDA torch): the runs over the squeeze backend train
on the GPU; those over gloo, and the comparisons, stay on the CPU.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ranks  # noqa: E402

try:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    import squeeze.torch as sqt
except ImportError as e:
    ranks.skip(f"cannot import torch or squeeze.torch ({e})")
DEVICE = os.environ.get("SQZ_TEST_DEVICE", "cpu")
if DEVICE != "cpu" and not torch.cuda.is_available():
    ranks.skip(f"SQZ_TEST_DEVICE={DEVICE}, but torch {torch.__version__} sees no CUDA device")


def check_specs():
    parse = sqt.ddp_hook._parse_specs
    r = parse({"0-1M": "dense", "1M-inf": "topk:ratio=0.01"})
    assert r[0][:2] == (0, 1 << 20) and r[1][2] == "topk:ratio=0.01", r
    state = sqt.CompressionState.__new__(sqt.CompressionState)
    state.ranges = r
    assert state.spec_for((1 << 20) - 1) == "dense" and state.spec_for(1 << 20) != "dense"
    for bad, word in (({"0-1M": "dense"}, "cover"), ({"0-1M": "a", "2M-inf": "b"}, "gap"),
                      ({"1M": "a"}, "range"), ({"0-1X": "a", "1X-inf": "b"}, "size")):
        try:
            parse(bad)
        except ValueError as e:
            assert word in str(e), (bad, str(e))
        else:
            raise AssertionError(f"{bad} was accepted")


def model_and_data(rank, dtype=torch.float32, device="cpu"):
    torch.manual_seed(0)
    # 8.5K parameters: above the codecs' 16 KB min_bytes, so top-k really sparsifies.
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 16)).to(dtype).to(device)
    gen = torch.Generator().manual_seed(100 + rank)
    data = [(torch.randn(8, 16, generator=gen, dtype=dtype).to(device),
             torch.randint(0, 16, (8,), generator=gen).to(device)) for _ in range(6)]
    return model, data


def train(ddp, opt, batches):
    for x, y in batches:
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()


def assert_same_on_every_rank(t, what, group):
    everyone = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, t, group=group)
    for r, other in enumerate(everyone):
        assert torch.equal(other, t), f"{what}: rank {r} differs from rank {dist.get_rank()}"


def run_with(pg, gloo, label, rank, device="cpu"):
    # Top-k with error feedback: every rank ends with bitwise the same parameters.
    model, data = model_and_data(rank, device=device)
    ddp = DDP(model, process_group=pg)
    state = sqt.CompressionState(process_group=pg, specs="topk:ratio=0.1")
    ddp.register_comm_hook(state, sqt.compression_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    train(ddp, opt, data[:3])
    assert_same_on_every_rank(flat(model), f"{label}: topk parameters", gloo)
    st = state.stats()["total"]
    # Steps 2 and 3: DDP rebuilt its buckets after step 1, in gradient-ready order.
    assert st["calls"] >= 2 and 0 < st["wire_bytes"] < st["dense_bytes"] / 4, st
    state.close()

    # PowerSGD: a codec per gradient matrix (2 here) and one for the biases; ranks equal.
    model, data = model_and_data(rank, device=device)
    ddp = DDP(model, process_group=pg)
    state = sqt.CompressionState(process_group=pg, specs="powersgd:rank=2")
    ddp.register_comm_hook(state, sqt.compression_hook)
    train(ddp, torch.optim.SGD(ddp.parameters(), lr=0.1), data[:3])
    assert_same_on_every_rank(flat(model), f"{label}: powersgd parameters", gloo)
    assert [len(b.codecs) for b in state.buckets.values()] == [3], "powersgd: codecs per bucket"
    state.close()

    # Checkpoint after 3 steps; the original and a restored copy take the same 3 more steps and
    # must end bitwise equal. find_unused_parameters: DDP keeps its first bucket layout (no
    # rebuild), so the copy's buckets have the saved layout from its first step on.
    model, data = model_and_data(rank, device=device)
    ddp = DDP(model, process_group=pg, find_unused_parameters=True)
    state = sqt.CompressionState(process_group=pg, specs="topk:ratio=0.1")
    ddp.register_comm_hook(state, sqt.compression_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    train(ddp, opt, data[:3])
    ckpt = {"model": {k: v.clone() for k, v in model.state_dict().items()},
            "hook": state.state_dict()}
    train(ddp, opt, data[3:])
    model2, _ = model_and_data(rank, device=device)
    model2.load_state_dict(ckpt["model"])
    ddp2 = DDP(model2, process_group=pg, find_unused_parameters=True)
    state2 = sqt.CompressionState(process_group=pg, specs="topk:ratio=0.1")
    state2.load_state_dict(ckpt["hook"])
    ddp2.register_comm_hook(state2, sqt.compression_hook)
    train(ddp2, torch.optim.SGD(ddp2.parameters(), lr=0.1), data[3:])
    assert torch.equal(flat(model), flat(model2)), f"{label}: resumed training differs"
    # Without the saved state the copy would not match: the state is what makes it exact.
    model5, _ = model_and_data(rank, device=device)
    model5.load_state_dict(ckpt["model"])
    ddp5 = DDP(model5, process_group=pg, find_unused_parameters=True)
    state5 = sqt.CompressionState(process_group=pg, specs="topk:ratio=0.1")
    ddp5.register_comm_hook(state5, sqt.compression_hook)
    train(ddp5, torch.optim.SGD(ddp5.parameters(), lr=0.1), data[3:])
    assert not torch.equal(flat(model), flat(model5)), f"{label}: the state changed nothing"

    # A dense spec gives what DDP's own all-reduce gives (to rounding: sums may run in
    # another order).
    model3, _ = model_and_data(rank, device=device)
    ddp3 = DDP(model3, process_group=pg)
    state3 = sqt.CompressionState(process_group=pg, specs="dense")
    ddp3.register_comm_hook(state3, sqt.compression_hook)
    train(ddp3, torch.optim.SGD(ddp3.parameters(), lr=0.1), data[:3])
    model4, data4 = model_and_data(rank)  # gloo's on the CPU, whatever the device
    ddp4 = DDP(model4, process_group=gloo)
    train(ddp4, torch.optim.SGD(ddp4.parameters(), lr=0.1), data4[:3])
    tol = 1 if device == "cpu" else 10  # the GPU's matmul rounds otherwise
    assert torch.allclose(flat(model3), flat(model4), rtol=tol * 1e-5, atol=tol * 1e-6), \
        f"{label}: dense hook and DDP's all-reduce disagree"
    for s in (state, state2, state3, state5):
        s.close()


def check_lossy_float64(pg, rank):
    model, data = model_and_data(rank, torch.float64)
    ddp = DDP(model, process_group=pg)
    state = sqt.CompressionState(process_group=pg, specs="topk:ratio=0.1")
    ddp.register_comm_hook(state, sqt.compression_hook)
    x, y = data[0]
    try:
        nn.functional.cross_entropy(ddp(x), y).backward()
    except Exception as e:  # DDP re-raises the hook's error from backward()
        assert "float" in str(e), f"lossy codec on float64: unclear error: {e}"
    else:
        raise AssertionError("a lossy codec on float64 gradients was accepted")
    state.close()


def rank_main():
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    gloo = dist.new_group(backend="gloo")
    run_with(None, gloo, "gloo", rank)
    sq = dist.new_group(backend="squeeze")
    run_with(sq, gloo, "squeeze", rank, DEVICE)
    check_lossy_float64(gloo, rank)
    dist.barrier(group=gloo)
    if rank == 0:
        print("hook: topk ranks equal, checkpoint resumes bitwise, dense = DDP all-reduce, "
              "float64 refused; over gloo and squeeze", flush=True)
    os._exit(0)  # no teardown races between the groups' threads at exit


if __name__ == "__main__":
    if ranks.is_rank():
        rank_main()
    check_specs()
    sys.exit(ranks.run_ranks(4, __file__, deadline_s=240,
                             env={"GLOO_SOCKET_IFNAME": "lo"}))
