"""Tensor statistics: the :class:`~autograd_viz.trace.summary.TensorSummary` of an array.

Events never carry tensors. Our engine puts a :class:`~engine.events.LazySummary`
in an event instead: shape, dtype and device, and a weak reference to the
array. A listener that wants the numbers (min, max, mean, norm, NaN and Inf
counts, small tensors' values) calls :func:`resolve` inside its callback,
while the engine still holds the array; the summary is kept in the lazy one,
so that every listener gets the same and it outlives the array.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from autograd_viz.trace.summary import TensorSummary, new_summary
from engine.events import Event, LazySummary

if TYPE_CHECKING:
    import numpy as np
else:
    # NumPy is imported by the first summary: a watched process (a PyTorch program's child,
    # a data loader's worker) that never summarizes an array starts up without it.
    np = None

__all__ = ["resolve", "resolve_summaries", "summarize"]

_DTYPE_NAMES: dict[Any, str] = {}
_SMALL = 64  # up to this many elements, plain Python beats NumPy's per-call overhead


def _dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


def resolve(lazy: LazySummary, max_values: int = 0) -> TensorSummary:
    """The summary of the array ``lazy`` stands for; shape, dtype and device only if it is gone.

    Computed once and kept in ``lazy.summary`` (again if ``max_values`` asks
    for values it does not keep). A source's own kind of lazy summary (a
    subclass, such as the PyTorch bridge's) resolves itself with its
    ``resolve`` method. Thread-safe without a lock: two threads resolving at
    once compute the same summary, and either may be kept.

    Args:
        lazy: what an event carries for a tensor.
        max_values: also keep the flattened values when the array has at most
            this many elements.
    """
    if type(lazy) is not LazySummary:
        return lazy.resolve(max_values)  # type: ignore[attr-defined]
    summary = lazy.summary
    if summary is not None and (not max_values or summary.values is not None):
        return summary
    array = lazy.array()
    if array is None:
        return summary or TensorSummary(lazy.shape, lazy.dtype, lazy.device)
    summary = lazy.summary = summarize(array, lazy.device, max_values)
    return summary


def resolve_summaries(event: Event, max_values: int = 0) -> Event:
    """Compute every tensor summary in ``event.data`` now (call it inside a listener).

    Afterwards the summaries stay available after the arrays are freed.
    Returns the event, for chaining.
    """
    for value in event.data.values():
        if isinstance(value, LazySummary):
            resolve(value, max_values)
        elif isinstance(value, list | tuple):
            for item in value:
                if isinstance(item, LazySummary):
                    resolve(item, max_values)
    return event


def summarize(array: Any, device: str = "cpu", max_values: int = 0) -> TensorSummary:
    """Summarize an array (NumPy or CuPy) into a :class:`TensorSummary`.

    Args:
        array: the array to describe.
        device: the name of the device it lives on.
        max_values: also keep the flattened values when the array has at most
            this many elements.

    Returns:
        The summary. Statistics of non-numeric arrays (booleans) are taken on
        their integer values. Statistics are computed in float64.
    """
    if np is None:
        _import_numpy()
    if type(array) is np.ndarray and 0 < array.size <= _SMALL and array.dtype.kind in "fiub":
        # See Note [Remembered summaries]
        key = (array.tobytes(), array.shape, array.dtype, device, max_values)
        summary = _REMEMBERED.get(key)
        if summary is None:
            summary = _summarize_small(
                array, array.shape, _dtype_name(array.dtype), device, max_values
            )
            if len(_REMEMBERED) >= _REMEMBER:
                _REMEMBERED.clear()
            _REMEMBERED[key] = summary
        return summary
    shape = array.shape
    if type(shape) is not tuple or (shape and type(shape[0]) is not int):
        shape = tuple(int(d) for d in shape)
    dtype = _dtype_name(array.dtype)
    if array.size == 0:
        return TensorSummary(shape, dtype, device, norm=0.0)
    if isinstance(array, np.ndarray):  # first: hasattr() on an ndarray raises inside
        host = array
    elif hasattr(array, "get"):  # CuPy: statistics on a host copy
        host = array.get()
    else:
        host = np.asarray(array)
    kind = host.dtype.kind
    if host.size <= _SMALL and kind in "fiub":
        return _summarize_small(host, shape, dtype, device, max_values)
    if kind == "f":
        summary = _summarize_finite(host, shape, dtype, device, max_values)
        if summary is not None:
            return summary
    if host.dtype == np.bool_:
        host = host.astype(np.int8)
    if kind in "fc":
        nan_count = int(np.isnan(host).sum())
        inf_count = int(np.isinf(host).sum())
    else:
        nan_count = inf_count = 0
    with np.errstate(all="ignore"):
        as_float = host.astype(np.float64, copy=False)
        values = None
        if max_values and host.size <= max_values:
            values = tuple(as_float.ravel().tolist())
        return new_summary(
            shape,
            dtype,
            device,
            float(np.min(as_float)),
            float(np.max(as_float)),
            float(np.mean(as_float)),
            float(np.sqrt(np.sum(as_float * as_float))),
            nan_count,
            inf_count,
            values,
        )


_BLOCK = 1 << 15  # float64 elements: 256 KiB


def _summarize_finite(
    host: np.ndarray, shape: tuple[int, ...], dtype: str, device: str, max_values: int
) -> TensorSummary | None:
    """:func:`summarize` of a float array in four passes; ``None`` if it has a NaN or an Inf.

    The float64 sum comes first: it is finite exactly when no element is NaN or
    Inf (or the sum overflowed, which the general path then sorts out), so the
    NaN and Inf counts need no passes of their own. Minimum and maximum are
    taken in the array's dtype (exact), the norm with a float64 dot product
    (as ``np.linalg.norm`` does). Narrower floats are widened a block at a time.
    """
    flat = host.ravel()
    with np.errstate(all="ignore"):
        if flat.dtype == np.float64:
            total = float(np.add.reduce(flat))
            squares = float(np.dot(flat, flat))
        else:  # float64 in blocks that stay in cache, not a full-size copy
            total = squares = 0.0
            for start in range(0, flat.size, _BLOCK):
                block = flat[start : start + _BLOCK].astype(np.float64)
                total += float(np.add.reduce(block))
                squares += float(np.dot(block, block))
        if not math.isfinite(total):
            return None
    values = tuple(flat.tolist()) if max_values and flat.size <= max_values else None
    return new_summary(
        shape,
        dtype,
        device,
        float(np.min(host)),
        float(np.max(host)),
        total / flat.size,
        math.sqrt(squares),
        0,
        0,
        values,
    )


# Note [Remembered summaries]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A recorder asks for the summary of one gradient several times: as the
# output of the node that made it, as the gradient its consumer's buffer
# accumulates, and as that consumer's input. A summary is a pure function of
# the array's bytes, shape and dtype, the device and ``max_values``, so for a
# small array (where the bytes are cheap to take) those are the key of a
# bounded table of recent summaries. A hit is exact whatever happened to the
# array in between (an in-place change makes other bytes, another key); a
# NaN's bits compare equal to themselves, so NaN gradients hit too. The table
# is cleared when full, which no concurrent reader can mind.


def _import_numpy() -> None:
    import numpy

    globals()["np"] = numpy


_REMEMBERED: dict[tuple[Any, ...], TensorSummary] = {}
_REMEMBER = 1024


def _summarize_small(
    host: np.ndarray, shape: tuple[int, ...], dtype: str, device: str, max_values: int
) -> TensorSummary:
    """:func:`summarize` for a few real numbers, with NumPy's NaN and Inf semantics."""
    floats = host.ravel().tolist()
    if host.dtype.kind != "f":
        floats = [float(v) for v in floats]
    nan_count = inf_count = 0
    total = squares = 0.0
    for v in floats:  # one pass: NaN is the value unequal to itself
        if v != v:  # noqa: PLR0124 - NaN test without a call
            nan_count += 1
        elif v in (_INF, -_INF):
            inf_count += 1
        total += v
        squares += v * v
    if nan_count:
        low = high = mean = norm = math.nan
    else:
        low, high = min(floats), max(floats)
        mean = total / len(floats)
        norm = math.sqrt(squares)
    values = tuple(floats) if max_values and len(floats) <= max_values else None
    return new_summary(shape, dtype, device, low, high, mean, norm, nan_count, inf_count, values)


_INF = math.inf
