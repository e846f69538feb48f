"""Creating tensors: ``tensor`` and the factories, with PyTorch's defaults."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine import dtypes
from engine.devices import CPU, Device, device_context, device_of_array, move_array
from engine.dtypes import (
    bool_,
    complex64,
    complex128,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from engine.tensor import FACTORY_DTYPE_ERROR, Tensor

__all__ = [
    "arange",
    "as_array",
    "bool_",
    "complex64",
    "complex128",
    "double",
    "empty",
    "eye",
    "float",
    "float16",
    "float32",
    "float64",
    "full",
    "get_default_dtype",
    "half",
    "int8",
    "int16",
    "int32",
    "int64",
    "linspace",
    "long",
    "manual_seed",
    "ones",
    "ones_like",
    "rand",
    "randint",
    "randn",
    "set_default_dtype",
    "tensor",
    "uint8",
    "zeros",
    "zeros_like",
]

float = float32
double = float64
half = float16
long = int64

_default_dtype = np.dtype(np.float32)
_rng = np.random.default_rng()


def set_default_dtype(dtype: Any) -> None:
    """Set the dtype of tensors made from Python floats (``float32`` by default)."""
    global _default_dtype
    dt = np.dtype(dtype)
    if not np.issubdtype(dt, np.floating):
        raise TypeError(f"only floating-point types are supported as the default type, got {dt}")
    _default_dtype = dt


def get_default_dtype() -> dtypes.dtype:
    """The dtype of tensors made from Python floats."""
    return dtypes.of(_default_dtype)


def _default_complex() -> np.dtype[Any]:
    """The dtype of tensors made from Python complex numbers, PyTorch's for the default dtype.

    ``complex128`` under ``float64``, else ``complex64``: PyTorch's ``complex32`` for
    ``float16`` has no NumPy dtype.
    """
    return np.dtype(np.complex128 if _default_dtype == np.float64 else np.complex64)


def manual_seed(seed: int) -> None:
    """Seed the generator behind ``rand``, ``randn`` and friends."""
    global _rng
    _rng = np.random.default_rng(seed)


def _resolve_device(device: str | Device | None, fallback: Device = CPU) -> Device:
    return fallback if device is None else Device(device)


def as_array(data: Any, dtype: Any, device: str | Device | None) -> tuple[Any, Device]:
    """A copy of user data as an array on ``device``, with PyTorch's dtype inference.

    Host data (numbers, nested sequences, NumPy arrays) is converted on the host, then
    copied to the device; device arrays are cast on their device, then moved if needed.
    """
    if isinstance(data, Tensor):
        src, src_device = data.data, data.device
    else:
        src, src_device = data, device_of_array(data)
    target = _resolve_device(device, src_device)
    if src_device.type == "cuda":
        if dtype is not None and np.dtype(dtype) != src.dtype:
            with device_context(src_device):
                src = src.astype(np.dtype(dtype))
            if target is src_device:
                return src, target
        return move_array(src, src_device, target), target
    if isinstance(src, np.ndarray | np.generic):
        array = src
    else:
        array = np.asarray(src)
        if array.dtype == object:
            raise TypeError(
                f"Could not infer dtype of {type(data).__name__}: expected numbers, nested "
                f"sequences of numbers, or an array"
            )
        if dtype is None:
            if np.issubdtype(array.dtype, np.floating):
                array = array.astype(_default_dtype)
            elif np.issubdtype(array.dtype, np.complexfloating):
                array = array.astype(_default_complex())
    if dtype is not None:
        array = array.astype(np.dtype(dtype), copy=False)
    return move_array(array, CPU, target), target


def tensor(
    data: Any,
    dtype: Any = None,
    device: str | Device | None = None,
    requires_grad: bool = False,
    name: str | None = None,
) -> Tensor:
    """A new leaf tensor holding a copy of ``data``.

    Args:
        data: a number, nested sequences of numbers, a NumPy/CuPy array or a Tensor.
        dtype: element type; Python floats default to ``float32`` (the default dtype),
            complex numbers to ``complex64`` (``complex128`` when the default is
            ``float64``), ints to ``int64``.
        device: ``"cpu"`` (default), ``"sim:N"`` or ``"cuda:N"``.
        requires_grad: record operations on it for differentiation.
        name: an optional name shown by the visualizer.

    Raises:
        RuntimeError: ``requires_grad`` on an integer dtype, or an unknown device.
    """
    array, dev = as_array(data, dtype, device)
    out = Tensor._make(array, dev)
    out.name = name
    if requires_grad:
        out._set_requires_grad(True, FACTORY_DTYPE_ERROR)
    return out


def _size(size: tuple[Any, ...]) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], Sequence):
        return tuple(int(s) for s in size[0])
    return tuple(int(s) for s in size)


def _new(array: Any, device: Device, requires_grad: bool, name: str | None) -> Tensor:
    """A leaf holding ``array``, which already lives on ``device``."""
    out = Tensor._make(array, device)
    out.name = name
    if requires_grad:
        out._set_requires_grad(True, FACTORY_DTYPE_ERROR)
    return out


def _from_host(
    array: np.ndarray[Any, Any], device: str | Device | None, requires_grad: bool, name: str | None
) -> Tensor:
    """A leaf holding host values, copied to the GPU for a ``cuda`` device."""
    dev = _resolve_device(device)
    if dev.type == "cuda":
        array = move_array(array, CPU, dev)
    return _new(array, dev, requires_grad, name)


def _filled(
    fill: str,
    shape: tuple[int, ...],
    dtype: Any,
    device: str | Device | None,
    requires_grad: bool,
    name: str | None,
) -> Tensor:
    """``zeros`` or ``ones`` made directly in ``device``'s memory."""
    dev = _resolve_device(device)
    with device_context(dev):
        array = getattr(dev.xp, fill)(shape, dtype)
    return _new(array, dev, requires_grad, name)


def zeros(
    *size: Any,
    dtype: Any = None,
    device: str | Device | None = None,
    requires_grad: bool = False,
    name: str | None = None,
) -> Tensor:
    """A tensor of zeros."""
    return _filled("zeros", _size(size), dtype or _default_dtype, device, requires_grad, name)


def ones(
    *size: Any,
    dtype: Any = None,
    device: str | Device | None = None,
    requires_grad: bool = False,
    name: str | None = None,
) -> Tensor:
    """A tensor of ones."""
    return _filled("ones", _size(size), dtype or _default_dtype, device, requires_grad, name)


def full(
    size: Sequence[int],
    fill_value: Any,
    dtype: Any = None,
    device: str | Device | None = None,
    requires_grad: bool = False,
    name: str | None = None,
) -> Tensor:
    """A tensor filled with ``fill_value`` (dtype inferred from it, as in PyTorch)."""
    if dtype is None:
        dtype = np.asarray(fill_value).dtype
        if np.issubdtype(dtype, np.floating):
            dtype = _default_dtype
        elif np.issubdtype(dtype, np.complexfloating):
            dtype = _default_complex()
    return _from_host(np.full(tuple(size), fill_value, dtype), device, requires_grad, name)


def arange(
    start: Any,
    end: Any = None,
    step: Any = 1,
    dtype: Any = None,
    device: str | Device | None = None,
    requires_grad: bool = False,
    name: str | None = None,
) -> Tensor:
    """Evenly spaced values in ``[start, end)``; integer inputs give ``int64``."""
    if end is None:
        start, end = 0, start
    array = np.arange(start, end, step)
    if dtype is None and np.issubdtype(array.dtype, np.floating):
        dtype = _default_dtype
    if dtype is not None:
        array = array.astype(dtype)
    return _from_host(array, device, requires_grad, name)


def rand(
    *size: Any,
    dtype: Any = None,
    device: str | Device | None = None,
    requires_grad: bool = False,
    name: str | None = None,
) -> Tensor:
    """Uniform samples in ``[0, 1)`` (drawn on the host: one seed, the same values anywhere)."""
    array = _rng.random(_size(size)).astype(dtype or _default_dtype)
    return _from_host(array, device, requires_grad, name)


def randn(
    *size: Any,
    dtype: Any = None,
    device: str | Device | None = None,
    requires_grad: bool = False,
    name: str | None = None,
) -> Tensor:
    """Standard normal samples (drawn on the host: one seed, the same values anywhere)."""
    array = _rng.standard_normal(_size(size)).astype(dtype or _default_dtype)
    return _from_host(array, device, requires_grad, name)


def zeros_like(
    input: Tensor,
    dtype: Any = None,
    device: str | Device | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """Zeros with ``input``'s shape, dtype and device."""
    return _filled(
        "zeros", input.shape, dtype or input.dtype, device or input.device, requires_grad, None
    )


def ones_like(
    input: Tensor,
    dtype: Any = None,
    device: str | Device | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """Ones with ``input``'s shape, dtype and device."""
    return _filled(
        "ones", input.shape, dtype or input.dtype, device or input.device, requires_grad, None
    )


def empty(
    *size: Any,
    dtype: Any = None,
    device: str | Device | None = None,
    requires_grad: bool = False,
    name: str | None = None,
) -> Tensor:
    """A tensor whose values are whatever the memory held (as ``torch.empty``: fill it first)."""
    return _filled("empty", _size(size), dtype or _default_dtype, device, requires_grad, name)


def eye(
    n: int,
    m: int | None = None,
    *,
    dtype: Any = None,
    device: str | Device | None = None,
    requires_grad: bool = False,
    name: str | None = None,
) -> Tensor:
    """An ``n`` by ``m`` (default ``n``) matrix with ones on the diagonal, zeros elsewhere."""
    array = np.eye(n, n if m is None else m, dtype=dtype or _default_dtype)
    return _from_host(array, device, requires_grad, name)


def linspace(
    start: Any,
    end: Any,
    steps: int,
    *,
    dtype: Any = None,
    device: str | Device | None = None,
    requires_grad: bool = False,
    name: str | None = None,
) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end``, both included.

    Raises:
        RuntimeError: for a negative number of steps, with PyTorch's message.
    """
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    array = np.linspace(start, end, steps).astype(dtype or _default_dtype)
    return _from_host(array, device, requires_grad, name)


def randint(
    low: int,
    high: int | Sequence[int] | None = None,
    size: Sequence[int] | None = None,
    *,
    dtype: Any = None,
    device: str | Device | None = None,
    requires_grad: bool = False,
    name: str | None = None,
) -> Tensor:
    """Integers drawn uniformly from ``[low, high)``: ``randint(high, size)`` or
    ``randint(low, high, size)``, ``int64`` unless ``dtype`` says otherwise.

    Raises:
        RuntimeError: for an empty range, with PyTorch's message.
    """
    if size is None:  # randint(high, size)
        if high is None or isinstance(high, int):
            raise TypeError("randint() missing 1 required positional argument: 'size'")
        shape, low, top = tuple(high), 0, low
    elif isinstance(high, int):
        shape, top = tuple(size), high
    else:
        raise TypeError("randint(): argument 'high' must be an int")
    if low >= top:
        raise RuntimeError(
            f"random_ expects 'from' to be less than 'to', but got from={low} >= to={top}"
        )
    array = _rng.integers(low, top, shape).astype(dtype or int64)
    return _from_host(array, device, requires_grad, name)
