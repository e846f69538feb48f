"""Tensor summaries of PyTorch tensors, taken without holding the tensor.

The engine's :class:`~engine.events.LazySummary` holds a weak reference to a
NumPy array; :class:`TorchSummary` is the same contract for a ``torch.Tensor``
(tensors support weak references). Listeners resolve summaries inside their
callback, while PyTorch still holds the gradient; a weak reference never keeps
a gradient alive, so ``AccumulateGrad`` still steals the buffer it would steal
without us (see the field notes on keeping references to gradients).
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from typing import Any

import numpy as np
import torch

from engine import events
from engine.events import LazySummary, TensorSummary

_DTYPE_NAMES: dict[torch.dtype, str] = {}


def dtype_name(dtype: torch.dtype) -> str:
    """NumPy's name for a torch dtype where NumPy has one (``float32``), else torch's."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


_WIDENED = frozenset({torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2})
"""Dtypes NumPy lacks: their statistics are taken in ``float32``."""

LARGE = 1 << 14
"""Elements from which statistics are computed by PyTorch itself, where the tensor lives."""


def summarize_tensor(tensor: torch.Tensor, device: str, max_values: int = 0) -> TensorSummary:
    """The :class:`~engine.events.TensorSummary` of a tensor, computed now.

    Small tensors are summarized by :func:`engine.events.summarize` on a NumPy
    view (a host copy for a device tensor), so NaN and Inf are counted the
    same way as for our engine. Large floating-point tensors are reduced by
    PyTorch where they live (Note [Summaries of large tensors]). Dtypes NumPy lacks
    (``bfloat16``) are widened to ``float32``; the summary keeps the tensor's
    own dtype. Tensors that have no plain strided values (sparse, nested,
    complex, meta) get shape, dtype and device only.

    Args:
        tensor: the tensor; it is read through ``detach()`` (so nothing records a
            graph, even under ``create_graph``) and never kept.
        device: the device name to record.
        max_values: keep the flattened values up to this many elements.

    Returns:
        The summary; shape, dtype and device only if the values cannot be read
        (a tensor subclass), since a listener must never fail on one.
    """
    shape = tuple(tensor.shape)
    dtype = dtype_name(tensor.dtype)
    try:
        if (
            tensor.layout is not torch.strided
            or tensor.is_nested
            or tensor.is_complex()
            or tensor.device.type == "meta"
        ):
            return TensorSummary(shape, dtype, device)
        return _summarize_values(tensor.detach(), shape, dtype, device, max_values)
    except Exception:  # noqa: BLE001 - a tensor subclass we cannot read: describe, never fail
        return TensorSummary(shape, dtype, device)


def _summarize_values(
    values: torch.Tensor, shape: tuple[int, ...], dtype: str, device: str, max_values: int
) -> TensorSummary:
    count = values.numel()
    if count >= LARGE and count > max_values and values.is_floating_point():
        return _summarize_large(values, shape, dtype, device)
    if values.dtype in _WIDENED:
        values = values.float()
    if values.device.type != "cpu":
        values = values.cpu()
    try:
        array = values.numpy()
    except RuntimeError:  # a conjugate or negative view
        array = values.resolve_conj().resolve_neg().numpy()
    summary = None
    if count > _SMALL and array.dtype.kind == "f" and count > max_values:
        summary = _summarize_finite_floats(array, shape, dtype, device)
    if summary is None:
        summary = events.summarize(array, device, max_values)
    if summary.dtype != dtype:
        summary = dataclasses.replace(summary, dtype=dtype)
    return summary


_SMALL = 64
"""Up to this many elements :func:`engine.events.summarize` is fastest (and remembers)."""


def _summarize_finite_floats(
    array: np.ndarray, shape: tuple[int, ...], dtype: str, device: str
) -> TensorSummary | None:
    """:func:`engine.events.summarize` of a mid-size float array with no NaN or Inf.

    The same numbers (one float64 block: sum and dot product, exact minimum and
    maximum) in a quarter of the time: a gradient of a small layer is
    summarized several times per node. ``None`` when the sum is not finite;
    the general path then counts NaN and Inf.
    """
    wide = array.ravel().astype(np.float64)
    total = float(wide.sum())
    if not math.isfinite(total):
        return None
    return events._new_summary(  # the frozen record's fast builder (Note [Building frozen records])
        shape,
        dtype,
        device,
        float(array.min()),
        float(array.max()),
        total / wide.size,
        math.sqrt(float(wide @ wide)),
        0,
        0,
        None,
    )


# Note [Summaries of large tensors]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A gradient of a 1024-wide layer has a million elements; NumPy's float64
# passes over it cost milliseconds per summary, and a recorded backward makes
# several per node. PyTorch's own reductions are faster, and run where the
# tensor lives (no host copy of a CUDA tensor): the sum first (PyTorch's
# cascade summation, accurate without a float64 copy, which costs thirty
# times more here), finite exactly when no element is NaN or Inf, so the
# counts cost nothing in the common case; minimum and maximum exact in the
# tensor's dtype (NumPy's on the CPU, twice as fast as ``aminmax`` here); the
# norm by ``vector_norm``. Half-precision tensors are widened to float32
# first. The numbers equal NumPy's float64 ones up to float32 rounding.


def _summarize_large(
    values: torch.Tensor, shape: tuple[int, ...], dtype: str, device: str
) -> TensorSummary:
    if values.element_size() < 4:
        values = values.float()
    count = values.numel()
    total = float(values.sum())
    if math.isfinite(total):
        if values.device.type == "cpu":
            array = values.numpy()
            low, high = float(array.min()), float(array.max())
        else:
            low_t, high_t = torch.aminmax(values)
            low, high = float(low_t), float(high_t)
        norm = float(torch.linalg.vector_norm(values))
        return TensorSummary(shape, dtype, device, low, high, total / count, norm)
    nan_count = int(values.isnan().sum())
    inf_count = int(values.isinf().sum())
    if nan_count:
        nan = math.nan
        return TensorSummary(shape, dtype, device, nan, nan, nan, nan, nan_count, inf_count)
    low_t, high_t = torch.aminmax(values)
    return TensorSummary(
        shape, dtype, device, float(low_t), float(high_t), total / count, math.inf, 0, inf_count
    )


class TorchSummary(LazySummary):
    """A :class:`~engine.events.LazySummary` of a ``torch.Tensor``.

    Shape, dtype and device are read at once; the statistics the first time
    :meth:`resolve` is called, if the tensor is still alive.
    """

    __slots__ = ("version",)

    def __init__(self, tensor: torch.Tensor, device: str | None = None) -> None:
        # LazySummary.__init__ reads NumPy attributes; the fields are set here instead.
        self.version: int = tensor._version
        """The tensor's version counter when this summary was made."""
        self.shape = tuple(tensor.shape)
        self.dtype = dtype_name(tensor.dtype)
        self.device = str(tensor.device) if device is None else device
        self._summary = None
        self._ref: Any = weakref.ref(tensor)
        self._strong = None

    def resolve(self, max_values: int = 0) -> TensorSummary:
        """The summary; only shape, dtype and device if the tensor is already gone."""
        summary = self._summary
        if summary is not None and (
            summary.values is not None or not max_values or summary.numel > max_values
        ):
            return summary  # it already holds everything asked for
        tensor = self._ref()
        if tensor is None:
            return summary or TensorSummary(self.shape, self.dtype, self.device)
        summary = self._summary = summarize_tensor(tensor, self.device, max_values)
        return summary

    def __repr__(self) -> str:
        return f"TorchSummary(shape={self.shape}, dtype={self.dtype}, device={self.device})"


# Note [One summary per gradient]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A gradient appears in several events: as the output of the node that made
# it, as the gradient a buffer accumulates, and as the input of the node
# that takes it. The same tensor object, unchanged, gets the same summary
# object, so a listener computes its numbers once. "Unchanged" is PyTorch's
# version counter: an input buffer that adds in place (it does, when nothing
# else holds the gradient) bumps it, and the sum gets a summary of its own.

_RECENT: dict[int, TorchSummary] = {}
_RECENT_MAX = 4096


def summary_of(tensor: torch.Tensor | None) -> TorchSummary | None:
    """A lazy summary of ``tensor``, ``None`` for an undefined gradient.

    The same object for the same unchanged tensor (Note [One summary per gradient]).
    """
    if tensor is None:
        return None
    key = id(tensor)
    summary = _RECENT.get(key)
    if summary is not None and summary._ref() is tensor and summary.version == tensor._version:
        return summary
    summary = TorchSummary(tensor)
    if len(_RECENT) >= _RECENT_MAX:
        _RECENT.clear()
    _RECENT[key] = summary
    return summary


def summaries_of(tensors: Any) -> list[TorchSummary | None]:
    """One summary per tensor (:func:`summary_of`)."""
    return [summary_of(t) for t in tensors]
