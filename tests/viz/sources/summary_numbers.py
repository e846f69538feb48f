"""Comparing recorded summaries: exact where a summary is exact, close where it is rounded.

A summary's minimum, maximum, NaN and Inf counts, shape, dtype, device and
values are exact; its mean and norm are float64 sums whose last bits depend on
the order they were summed in (PyTorch's reductions for held gradients, NumPy's
for the rest: Note [Held summaries in tensor ops] in
``autograd_viz/sources/pytorch/held.py``). Those two are compared to a
relative 1e-12 (the mean against the tensor's scale, its norm over the square
root of its size, since a mean near zero is a difference of large sums).
"""

from __future__ import annotations

import math
from typing import Any

from autograd_viz.trace.summary import TensorSummary

RELATIVE = 1e-12
"""How far apart two float64 sums of the same values may be, relative to their scale."""

_EXACT = ("shape", "dtype", "device", "min", "max", "nan_count", "inf_count", "values")


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """Where ``a`` and ``b`` differ, walking tuples, lists and dicts; ``None`` if they agree.

    Summaries agree when their exact fields are equal (NaN equal to NaN) and their
    mean and norm are within :data:`RELATIVE`.
    """
    if isinstance(a, TensorSummary) and isinstance(b, TensorSummary):
        for field in _EXACT:
            if not _same(getattr(a, field), getattr(b, field)):
                return f"{where}.{field}: {a!r} != {b!r}"
        count = math.prod(a.shape) or 1
        scale = a.norm / math.sqrt(count) if _finite(a.norm) else 0.0
        if not _close(a.mean, b.mean, scale) or not _close(a.norm, b.norm, 0.0):
            return f"{where} mean or norm: {a!r} != {b!r}"
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            found = first_difference(a[key], b[key], f"{where}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and type(a) is type(b):
        if len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if _same(a, b) else f"{where}: {a!r} != {b!r}"


def _finite(x: Any) -> bool:
    return isinstance(x, float) and math.isfinite(x)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def _close(a: Any, b: Any, scale: float) -> bool:
    if not (_finite(a) and _finite(b)):
        return _same(a, b)
    return abs(a - b) <= RELATIVE * max(abs(a), abs(b), scale)


def count_large_summaries(monkeypatch: Any) -> list[tuple[int, ...]]:
    """The shapes of the large tensors summarized from now on (``_summarize_large`` calls),
    in order; the list fills as the test runs."""
    from autograd_viz.sources.pytorch import summary

    computed: list[tuple[int, ...]] = []
    real = summary._summarize_large

    def counting(values: Any, shape: tuple[int, ...], *rest: Any) -> Any:
        computed.append(shape)
        return real(values, shape, *rest)

    monkeypatch.setattr(summary, "_summarize_large", counting)
    return computed
