"""Squeeze for Python: collective communication (NCCL's calls) with gradient compression reduced
in flight inside the all-reduce.

This package is a thin layer over Squeeze's C API (the extension squeeze._squeeze); the
torch.distributed backend and the DDP hook are in squeeze.torch.

    import numpy as np, squeeze
    comm = squeeze.Comm.from_env()            # under torchrun or sqzrun
    x = np.ones(1024, np.float32)
    comm.allreduce(x)                          # in place, op "sum"
    codec = squeeze.Codec("topk:ratio=0.01", x.size, x.dtype, comm)
    codec.allreduce(x, op="avg")               # compressed, with error feedback

Data calls take numpy arrays (C-contiguous buffer protocol) and torch tensors (DLPack), host or
CUDA memory; they release the GIL while they run. Failures raise squeeze.Error subclasses
carrying Squeeze's message and the sqzResult_t code as `.result`.
"""
import enum as _enum

from . import _squeeze
from ._squeeze import (
    Codec,
    Comm,
    CudaError,
    Error,
    InternalError,
    InvalidArgument,
    InvalidUsage,
    RemoteError,
    SystemFailure,
    Timeout,
    __version__,
    unique_id,
)

# Built from the extension's table so that the values are sqzRedOp_t's, not copies of them.
ReduceOp = _enum.IntEnum("ReduceOp", _squeeze.REDUCE_OPS, module=__name__)
ReduceOp.__doc__ = ("Reduction operators (sqzRedOp_t). Data calls also take their names: "
                    "\"sum\", \"prod\", \"max\", \"min\", \"avg\".")

__all__ = [
    "Codec", "Comm", "CudaError", "Error", "InternalError", "InvalidArgument", "InvalidUsage",
    "ReduceOp", "RemoteError", "SystemFailure", "Timeout", "unique_id",
]
