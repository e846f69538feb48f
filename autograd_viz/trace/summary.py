"""A tensor as a trace keeps it: :class:`TensorSummary`, numbers without the tensor.

Sources take summaries while a tensor exists
(:mod:`autograd_viz.sources.summaries`); a trace file holds them and views
read them. This module also holds the fast way to build the frozen records a
recorder or a loader makes by the thousand (Note [Building frozen records]).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TensorSummary", "new_summary", "slot_twin"]


@dataclass(frozen=True, slots=True)
class TensorSummary:
    """Numbers that describe a tensor without holding it."""

    shape: tuple[int, ...]
    """The tensor's shape."""
    dtype: str
    """NumPy's name for the dtype, such as ``"float32"``."""
    device: str
    """The device, such as ``"cpu"`` or ``"sim:0"``."""
    min: float | None = None
    """Smallest finite-or-not value; ``None`` for an empty tensor or when values are gone."""
    max: float | None = None
    """Largest value; ``None`` for an empty tensor or when values are gone."""
    mean: float | None = None
    """Mean value; ``None`` for an empty tensor or when values are gone."""
    norm: float | None = None
    """Euclidean norm of all elements; ``None`` when values are gone."""
    nan_count: int = 0
    """How many elements are NaN."""
    inf_count: int = 0
    """How many elements are +Inf or -Inf."""
    values: tuple[Any, ...] | None = None
    """The flattened values, when asked for and the tensor is small enough."""

    @property
    def numel(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def finite(self) -> bool:
        """Whether no element is NaN or Inf."""
        return self.nan_count == 0 and self.inf_count == 0


def slot_twin(cls: type) -> type:
    """A plain class with ``cls``'s slots, whose instances may become ``cls`` instances.

    Note [Building frozen records]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    The frozen dataclasses a recorder makes by the thousand (summaries, node
    snapshots) set each field in ``__init__`` through ``object.__setattr__``:
    two microseconds for a dozen fields. Their builders instead fill a twin
    with the same slots by plain attribute stores and then assign
    ``__class__``, which CPython allows between classes of the same slot
    layout; the result is an ordinary, immutable instance of ``cls``, five
    times sooner. Each builder is checked against the real constructor in
    the tests.
    """
    return type(f"_{cls.__name__}Fields", (), {"__slots__": cls.__dict__["__slots__"]})


_SummaryFields = slot_twin(TensorSummary)
_new_object = object.__new__


def new_summary(
    shape: tuple[int, ...],
    dtype: str,
    device: str,
    low: float | None,
    high: float | None,
    mean: float | None,
    norm: float | None,
    nan_count: int,
    inf_count: int,
    values: tuple[Any, ...] | None,
) -> TensorSummary:
    """``TensorSummary(...)`` with every field given, five times sooner.

    The arguments are taken as they are, unchecked (Note [Building frozen records]).
    """
    summary: Any = _new_object(_SummaryFields)
    summary.shape = shape
    summary.dtype = dtype
    summary.device = device
    summary.min = low
    summary.max = high
    summary.mean = mean
    summary.norm = norm
    summary.nan_count = nan_count
    summary.inf_count = inf_count
    summary.values = values
    summary.__class__ = TensorSummary
    return summary
