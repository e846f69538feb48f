"""NumPy views of CPU tensors that leave the tensor's storage as it was.

Note [Reading a storage without pinning it]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
``Tensor.numpy()`` marks the tensor's storage as not resizable, for good:
the array it returns may outlive the call, and must not point at freed
memory. FSDP2 (``fully_shard``) frees each gathered parameter after use
with ``untyped_storage().resize_(0)``, which then fails with "Trying to
resize storage that is not resizable". Watching must not change what is
watched, so the bridge reads values through :func:`host_view` instead: the
same memory, dtype, shape and strides that ``numpy()`` would give (so the
same numbers, bit for bit), described to NumPy through
``__array_interface__``, and the storage left resizable. The view keeps the
tensor alive but cannot stop its storage being freed, so it is never kept:
summaries are computed, or copied into rows of their own
(:func:`autograd_viz.sources.deferred.defer`), before the caller returns.
A tensor whose storage has been freed (data pointer null) has no view:
reading it would crash PyTorch itself, so it is described by shape, dtype
and device only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class _Described:
    """What NumPy reads a tensor's memory through (its ``__array_interface__``)."""

    __slots__ = ("__array_interface__", "tensor")

    def __init__(self, interface: dict[str, Any], tensor: torch.Tensor) -> None:
        self.__array_interface__ = interface
        self.tensor = tensor  # the view's base holds the tensor, as numpy()'s does


def _numpy_dtypes() -> dict[torch.dtype, np.dtype[Any]]:
    dtypes = {}
    for kind in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.float16,
        torch.float32,
        torch.float64,
    ):
        dtypes[kind] = np.dtype(torch.empty(0, dtype=kind).numpy().dtype)
    return dtypes


_NUMPY_DTYPES = _numpy_dtypes()
_TYPESTRS = {dtype: dtype.str for dtype in _NUMPY_DTYPES.values()}


class FreedStorageError(RuntimeError):
    """The tensor's storage has been freed (``resize_(0)``): it has no values to read."""


def host_view(tensor: torch.Tensor) -> np.ndarray:
    """A read-only NumPy view of a CPU strided tensor, leaving its storage resizable.

    The same array ``tensor.numpy()`` gives, without marking the storage as not
    resizable (Note [Reading a storage without pinning it]). Keep nothing that
    points into it past the call that reads it.

    Args:
        tensor: a plain CPU strided tensor that does not require grad.

    Returns:
        The view.

    Raises:
        RuntimeError: as ``numpy()`` does, for a dtype NumPy lacks or a
            negative view (the caller resolves those).
        FreedStorageError: for a tensor whose storage has been freed.
    """
    dtype = _NUMPY_DTYPES.get(tensor.dtype)
    if dtype is None or tensor.is_neg():
        # numpy() raises for these (bfloat16, a negative view), as the caller expects; a
        # complex tensor (the bridge reads none) is read by numpy(), which minds its
        # conjugate bit.
        return tensor.numpy()
    address = tensor.data_ptr()
    shape = tensor.shape
    if not address:
        if tensor.numel():
            raise FreedStorageError("the tensor's storage has been freed")
        return np.empty(shape, dtype)
    if tensor.is_contiguous():
        strides = None  # C order: NumPy reads a description without strides faster
    else:
        size = dtype.itemsize
        strides = tuple([stride * size for stride in tensor.stride()])
    return np.asarray(
        _Described(
            {
                "data": (address, True),
                "shape": shape,
                "strides": strides,
                "typestr": _TYPESTRS[dtype],
                "version": 3,
            },
            tensor,
        )
    )
