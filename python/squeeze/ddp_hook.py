"""A DistributedDataParallel communication hook that all-reduces gradient buckets through
Squeeze's codecs, compressed in flight (re-exported as squeeze.torch.compression_hook).

    state = squeeze.torch.CompressionState(specs={"0-1M": "dense", "1M-inf": "topk:ratio=0.01"})
    ddp.register_comm_hook(state, squeeze.torch.compression_hook)

The state holds the squeeze.Codecs of each gradient bucket, made the first time the bucket is
seen and sized to it, with the spec whose size range holds the bucket's bytes: one codec over
the bucket, or for PowerSGD one per gradient matrix. It runs on its own
Squeeze communicator, set up through DDP's process group, so the hook works whichever backend
that group has (squeeze or gloo). Codec states (error-feedback residuals, PowerSGD's Q) go into
state.state_dict(), so a checkpoint restores them.
"""
import math
import re

import torch
import torch.distributed as dist

import squeeze

__all__ = ["CompressionState", "compression_hook", "DEFAULT_SPECS"]

# Small buckets gain nothing from compression (latency-bound); large ones are sparsified.
DEFAULT_SPECS = {"0-1M": "dense", "1M-inf": "topk:ratio=0.01"}

# The codec stats that add up over codecs (the rest are ratios and norms).
_COUNTED = ("calls", "wire_bytes", "dense_bytes")

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _parse_bytes(text, key):
    if text.strip().lower() == "inf":
        return math.inf
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"CompressionState specs: '{key}' is not a byte range like '0-1M' or "
                         f"'1M-inf' ('{text}' is not a size)")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def _parse_specs(specs):
    """{"lo-hi": spec} (bytes, K/M/G suffixes, hi 'inf') -> sorted [(lo, hi, spec)], checked."""
    if isinstance(specs, str):
        return [(0, math.inf, specs)]
    ranges = []
    for key, spec in specs.items():
        lo, sep, hi = key.partition("-")
        if not sep:
            raise ValueError(f"CompressionState specs: '{key}' is not a byte range like '0-1M'")
        ranges.append((_parse_bytes(lo, key), _parse_bytes(hi, key), spec))
    ranges.sort(key=lambda r: r[0])
    for lo, hi, _ in ranges:
        if lo >= hi:
            raise ValueError(f"CompressionState specs: empty range {lo}-{hi} bytes")
    for (_, hi, _), (lo, _, _) in zip(ranges, ranges[1:]):
        if lo != hi:
            raise ValueError(f"CompressionState specs: the ranges leave a gap or overlap at "
                             f"{min(lo, hi)} bytes; every bucket size needs exactly one spec")
    if not ranges or ranges[0][0] != 0 or ranges[-1][1] != math.inf:
        raise ValueError("CompressionState specs: the ranges must cover 0 to inf bytes")
    return ranges


def _with_key(spec, key, value):
    """spec plus key=value, unless the spec sets key itself."""
    method, _, args = spec.partition(":")
    if any(kv.split("=")[0].strip() == key for kv in args.split(",") if kv.strip()):
        return spec
    return f"{method}:{args},{key}={value}" if args.strip() else f"{method}:{key}={value}"


class BucketCodecs:
    """The codecs of one gradient bucket, made for its layout (its parameters, in order).

    Element-wise codecs (casts, quantizers, sparsifiers) run once over the whole bucket. A
    low-rank codec (powersgd) approximates a matrix, so, as PowerSGD does, each gradient of two
    or more dimensions gets its own codec over its (rows x rest) matrix, and the bucket's
    vectors (biases) travel together through one dense codec.
    """

    def __init__(self, spec, tensor, params, comm):
        self.count, self.dtype = tensor.numel(), _dtype_name(tensor.dtype)
        self.owners = tuple(p.data_ptr() for p in params)
        self.layout = [list(p.shape) for p in params]
        self.per_matrix = spec.partition(":")[0].strip() == "powersgd" and len(params) > 0
        self.codecs = []
        try:
            if not self.per_matrix:
                self.codecs.append(squeeze.Codec(spec, self.count, tensor.dtype, comm))
                return
            for p in params:
                if p.dim() >= 2:
                    spec_p = _with_key(spec, "cols", p.numel() // p.shape[0])
                    self.codecs.append(squeeze.Codec(spec_p, p.numel(), tensor.dtype, comm))
            vectors = sum(p.numel() for p in params if p.dim() < 2)
            if vectors:
                self.codecs.append(squeeze.Codec("dense", vectors, tensor.dtype, comm))
        except Exception:
            self.close()
            raise

    def fits(self, tensor, params):
        return (self.count == tensor.numel() and self.dtype == _dtype_name(tensor.dtype)
                and self.owners == tuple(p.data_ptr() for p in params))

    def allreduce(self, tensor, gradients, op):
        if not self.per_matrix:
            self.codecs[0].allreduce(tensor, op=op)
            return
        codecs = iter(self.codecs)
        vectors = []
        for g in gradients:  # views into the bucket's buffer, in the layout's order
            if g.dim() >= 2:
                next(codecs).allreduce(g, op=op)
            else:
                vectors.append(g)
        if vectors:
            joined = torch.cat([v.reshape(-1) for v in vectors])
            next(codecs).allreduce(joined, op=op)
            offset = 0
            for v in vectors:
                v.copy_(joined[offset:offset + v.numel()].view_as(v))
                offset += v.numel()

    def stats(self):
        each = [c.stats() for c in self.codecs]
        return {k: sum(s[k] for s in each) for k in _COUNTED}

    def state_dict(self):
        return {"layout": self.layout, "codecs": [c.state_dict() for c in self.codecs]}

    def load_state_dict(self, state):
        for codec, codec_state in zip(self.codecs, state["codecs"], strict=True):
            codec.load_state_dict(codec_state)

    def close(self):
        for codec in self.codecs:
            codec.close()
        self.codecs = []


class CompressionState:
    """The hook's state: the codecs of each bucket, and the communicator they run on.

    Collective: every rank of `process_group` (default: the default group) constructs it, in
    the same order relative to other collectives on that group.
    specs: one spec string for every bucket, or {"lo-hi": spec} by bucket bytes.
    op: "avg" (DDP's semantics) or "sum".
    comm: a squeeze.Comm to run on instead of making one.
    """

    def __init__(self, process_group=None, specs=None, op="avg", comm=None):
        self.process_group = process_group
        self.ranges = _parse_specs(DEFAULT_SPECS if specs is None else specs)
        self.op = op
        self.buckets = {}  # bucket index -> BucketCodecs
        self._pending = {}  # bucket index -> saved state not yet matched by a bucket
        self.comm = comm if comm is not None else self._make_comm(process_group)

    @staticmethod
    def _make_comm(group):
        if not dist.is_initialized():
            raise RuntimeError("CompressionState needs torch.distributed initialized "
                               "(dist.init_process_group) or a squeeze.Comm passed as comm=")
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        box = [squeeze.unique_id() if rank == 0 else None]
        dist.broadcast_object_list(box, src=_global_rank(group, 0), group=group)
        return squeeze.Comm(box[0], rank, size)

    def spec_for(self, nbytes):
        for lo, hi, spec in self.ranges:
            if lo <= nbytes < hi:
                return spec
        raise AssertionError("ranges cover every size")  # _parse_specs guarantees it

    def codecs_for(self, index, tensor, params=()):
        """The bucket's codecs; made (or remade, when DDP rebuilt its buckets) to fit it.

        params are the bucket's parameters in order. DDP rebuilds its buckets once, after the
        first iteration, in the order gradients became ready: a residual kept for the old order
        would feed values back into the wrong elements, so a new order gets new codecs. A saved
        state is restored only into a bucket of the layout (parameter shapes) it was saved from.
        """
        bucket = self.buckets.get(index)
        if bucket is not None and bucket.fits(tensor, params):
            return bucket
        if bucket is not None:
            bucket.close()
            del self.buckets[index]
        spec = self.spec_for(tensor.numel() * tensor.element_size())
        bucket = BucketCodecs(spec, tensor, params, self.comm)
        self.buckets[index] = bucket
        pending = self._pending.get(index)
        if pending is not None and pending["layout"] == bucket.layout:
            bucket.load_state_dict(pending)
            del self._pending[index]
        return bucket

    def stats(self):
        """Per-bucket totals of the codec stats (calls, wire_bytes, dense_bytes), and their
        sums under 'total'."""
        per_bucket = {i: b.stats() for i, b in sorted(self.buckets.items())}
        total = {k: sum(s[k] for s in per_bucket.values()) for k in _COUNTED}
        return {"buckets": per_bucket, "total": total}

    def state_dict(self):
        return {"buckets": {i: b.state_dict() for i, b in self.buckets.items()}}

    def load_state_dict(self, state):
        """Restores codec states, each when a bucket of its layout is next seen."""
        self._pending = dict(state["buckets"])

    def close(self):
        for bucket in self.buckets.values():
            bucket.close()
        self.buckets.clear()
        self.comm.close()


def _global_rank(group, group_rank):
    if group is None:
        return group_rank
    # torch 2.x: get_global_rank; 1.13: the private _get_global_rank.
    get = getattr(dist, "get_global_rank", None) or dist.distributed_c10d._get_global_rank
    return get(group, group_rank)


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _bucket_tensor(bucket):
    # torch 1.13 and 2.x: buffer(); older: get_tensor().
    return bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()


def compression_hook(state, bucket):
    """DDP comm hook: averages the bucket through its codec; returns a completed Future."""
    tensor = _bucket_tensor(bucket)
    params = bucket.parameters() if hasattr(bucket, "parameters") else ()
    codecs = state.codecs_for(bucket.index(), tensor, params)
    codecs.allreduce(tensor, bucket.gradients() if codecs.per_matrix else None, state.op)
    fut = torch.futures.Future()
    fut.set_result(tensor)
    return fut
