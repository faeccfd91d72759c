"""Squeeze for PyTorch: the "squeeze" torch.distributed backend.

Importing this module registers the backend once per process::

    import squeeze.torch
    torch.distributed.init_process_group("squeeze")          # or dist.new_group(backend="squeeze")

The process group (squeeze._torch_backend.ProcessGroupSqueeze) runs each operation on one
Squeeze communicator from its own progress thread and returns asynchronous works whose
get_future() DDP and comm hooks use. It takes one dense contiguous CPU (or, where built for it,
CUDA) tensor per call of int8, uint8, int32, int64, float16, float32, float64 or bfloat16, and
implements all_reduce (SUM, PRODUCT, MIN, MAX, AVG), all_reduce_coalesced, broadcast, reduce,
all_gather, all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor, all_to_all_single,
send, recv and barrier; other operations raise RuntimeError. Squeeze's SQZ_TIMEOUT_MS bounds every
wait: a lost peer makes the pending operations raise instead of hang.

It also holds the compressing DDP communication hook (squeeze.ddp_hook), which works with any
process group DDP runs on::

    state = squeeze.torch.CompressionState(specs={"0-1M": "dense", "1M-inf": "topk:ratio=0.01"})
    ddp.register_comm_hook(state, squeeze.torch.compression_hook)
"""
import inspect

import torch  # noqa: F401  (first: the extension derives from torch's registered c10d types)
import torch.distributed as dist

from . import _torch_backend
from ._torch_backend import ProcessGroupSqueeze

BACKEND_NAME = "squeeze"


def _create_process_group(store, rank, size, timeout):
    """torch.distributed's creator function for the "squeeze" backend."""
    return _torch_backend.create(store, rank, size, timeout)


def _register():
    if hasattr(dist.Backend, BACKEND_NAME.upper()):
        return  # registered already (this module was reloaded)
    kwargs = {}
    # torch >= 2.1 asks which devices the backend serves (it warns and guesses without them).
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        kwargs["devices"] = ["cpu", "cuda"]
    dist.Backend.register_backend(BACKEND_NAME, _create_process_group, **kwargs)


_register()

from . import ddp_hook  # noqa: E402
from .ddp_hook import DEFAULT_SPECS, CompressionState, compression_hook  # noqa: E402

__all__ = ["BACKEND_NAME", "ProcessGroupSqueeze", "CompressionState", "compression_hook",
           "DEFAULT_SPECS"]
