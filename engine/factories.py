"""Creating tensors: ``tensor`` and the factories, with PyTorch's defaults."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.devices import CPU, Device, device_context, device_of_array, move_array
from engine.tensor import Tensor

float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)
float = float32
double = float64
long = int64

_default_dtype = float32
_rng = np.random.default_rng()


def set_default_dtype(dtype: Any) -> None:
    """Set the dtype of tensors made from Python floats (``float32`` by default)."""
    global _default_dtype
    dt = np.dtype(dtype)
    if not np.issubdtype(dt, np.floating):
        raise TypeError(f"only floating-point types are supported as the default type, got {dt}")
    _default_dtype = dt


def get_default_dtype() -> np.dtype[Any]:
    """The dtype of tensors made from Python floats."""
    return _default_dtype


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
        if np.issubdtype(array.dtype, np.floating) and dtype is None:
            array = array.astype(_default_dtype)
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
        dtype: element type; Python floats default to ``float32``, ints to ``int64``.
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
        out.requires_grad = True
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
        out.requires_grad = True
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
