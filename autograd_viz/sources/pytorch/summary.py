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
import weakref
from typing import Any

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


def summarize_tensor(tensor: torch.Tensor, device: str, max_values: int = 0) -> TensorSummary:
    """The :class:`~engine.events.TensorSummary` of a tensor, computed now.

    Statistics come from :func:`engine.events.summarize` on a NumPy view of the
    tensor (a host copy for a device tensor), so NaN and Inf are counted the
    same way as for our engine. Dtypes NumPy lacks (``bfloat16``) are widened
    to ``float32`` for the numbers; the summary keeps the tensor's own dtype.
    Tensors that have no plain strided values (sparse, nested, complex, meta)
    get shape, dtype and device only.

    Args:
        tensor: the tensor; it is read under ``torch.no_grad()`` and never kept.
        device: the device name to record.
        max_values: keep the flattened values up to this many elements.

    Returns:
        The summary.
    """
    shape = tuple(tensor.shape)
    dtype = dtype_name(tensor.dtype)
    if (
        tensor.layout is not torch.strided
        or tensor.is_nested
        or tensor.is_complex()
        or tensor.device.type == "meta"
    ):
        return TensorSummary(shape, dtype, device)
    with torch.no_grad():
        values = tensor.detach()
        if values.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
            values = values.float()
        if values.device.type != "cpu":
            values = values.cpu()
        array = values.resolve_conj().resolve_neg().numpy()
        summary = events.summarize(array, device, max_values)
    if summary.dtype != dtype:
        summary = dataclasses.replace(summary, dtype=dtype)
    return summary


class TorchSummary(LazySummary):
    """A :class:`~engine.events.LazySummary` of a ``torch.Tensor``.

    Shape, dtype and device are read at once; the statistics the first time
    :meth:`resolve` is called, if the tensor is still alive.
    """

    __slots__ = ()

    def __init__(self, tensor: torch.Tensor, device: str | None = None) -> None:
        # LazySummary.__init__ reads NumPy attributes; the fields are set here instead.
        self.shape = tuple(tensor.shape)
        self.dtype = dtype_name(tensor.dtype)
        self.device = str(tensor.device) if device is None else device
        self._summary = None
        self._ref: Any = weakref.ref(tensor)
        self._strong = None

    def resolve(self, max_values: int = 0) -> TensorSummary:
        """The summary; only shape, dtype and device if the tensor is already gone."""
        summary = self._summary
        if summary is not None and (not max_values or summary.values is not None):
            return summary
        tensor = self._ref()
        if tensor is None:
            return summary or TensorSummary(self.shape, self.dtype, self.device)
        summary = self._summary = summarize_tensor(tensor, self.device, max_values)
        return summary

    def __repr__(self) -> str:
        return f"TorchSummary(shape={self.shape}, dtype={self.dtype}, device={self.device})"


def summary_of(tensor: torch.Tensor | None) -> TorchSummary | None:
    """A lazy summary of ``tensor``, ``None`` for an undefined gradient."""
    return None if tensor is None else TorchSummary(tensor)


def summaries_of(tensors: Any) -> list[TorchSummary | None]:
    """One summary per tensor, the same object where a tensor repeats."""
    made: dict[int, TorchSummary | None] = {}
    out: list[TorchSummary | None] = []
    for t in tensors:
        key = id(t)
        if key not in made:
            made[key] = summary_of(t)
        out.append(made[key])
    return out
