"""Summaries of float arrays whose numbers are computed later, many at a time.

Note [Deferred summaries]
~~~~~~~~~~~~~~~~~~~~~~~~~
A recorder summarizes every gradient while the engine still holds it. For a
float array of a few hundred or thousand elements the five NumPy calls of a
summary (widen to float64, sum, sum of squares, minimum, maximum) cost far
more in call overhead than in arithmetic, several times what the node that
made the gradient cost. So :func:`defer` copies the values into the next
row of a block kept for arrays of that length and dtype, and returns a
:class:`DeferredSummary`: a :class:`~autograd_viz.trace.summary.TensorSummary` whose
statistics are computed the first time one of them is read, or by
:func:`settle_waiting` for a whole block at once, five NumPy calls for all
its rows. A block is settled when it is full, and every block when a
watched backward call ends; its rows are then reused, so the copies cost
no allocation.

NumPy reduces each contiguous row of a C-ordered 2-D array with the same
pairwise loop it uses for a 1-D array, so a row reduced with others is bit
for bit the row reduced alone (the tests check it): a summary's numbers do
not depend on when, or beside which others, it was settled, and
:func:`float_summary` is the definition of those numbers.

Settled, a summary becomes a plain ``TensorSummary``: its numbers are stored
in the slots the two classes share and its class is switched (Note
[Building frozen records] in ``trace/summary.py``). Until then its ``values``
slot holds where its row is, which no reader sees: every statistic of a
``DeferredSummary`` is read through a property that settles it first. Rows
are written, read and reused only under one lock, so a summary read on one
thread while another settles its block gets the numbers of its own row.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from autograd_viz.sources.summaries import summarize
from autograd_viz.trace.summary import TensorSummary, slot_twin

_FIELDS = ("min", "max", "mean", "norm", "nan_count", "inf_count", "values")
_SLOTS = {name: TensorSummary.__dict__[name] for name in (*_FIELDS, "shape", "dtype", "device")}
_VALUES = _SLOTS["values"]
_values_of = _VALUES.__get__
_set_min, _set_max, _set_mean, _set_norm, _set_nan, _set_inf, _set_values = (
    _SLOTS[name].__set__ for name in _FIELDS
)
_set_class = object.__setattr__
_Fields: Any = slot_twin(TensorSummary)
_new_object = object.__new__

BLOCK_BYTES = 1 << 18
"""The size of one block of rows (at least two rows); full, it is settled."""
BLOCKS = 64
"""Blocks kept at most (one per length and dtype); past that all are settled and dropped."""


def float_summary(
    flat: np.ndarray, shape: tuple[int, ...], dtype: str, device: str
) -> TensorSummary:
    """The summary of a 1-D float array, with NaN and Inf counted: the numbers deferring keeps.

    Args:
        flat: the values, in the order they are summed (C order of the tensor).
        shape: the tensor's shape.
        dtype: the dtype name to record (the tensor's own, if ``flat`` was widened).
        device: the device name to record.
    """
    summary = _unsettled(shape, dtype, device)
    with _LOCK:
        _settle_rows(flat.reshape(1, -1), [summary])
    return summary


def _unsettled(shape: tuple[int, ...], dtype: str, device: str) -> Any:
    """A :class:`DeferredSummary` that knows only what the tensor is, not its numbers."""
    summary = _new_object(_Fields)  # plain slots, then the class (Note [Building frozen records])
    summary.shape = shape
    summary.dtype = dtype
    summary.device = device
    summary.nan_count = 0  # no NaN, no Inf until settling finds one
    summary.inf_count = 0
    summary.__class__ = DeferredSummary
    return summary


class DeferredSummary(TensorSummary):
    """A :class:`~autograd_viz.trace.TensorSummary` of a float array, its numbers computed later.

    Made by :func:`defer`. Shape, dtype and device are read at once; reading
    any statistic settles it (Note [Deferred summaries]), after which it is a
    plain ``TensorSummary``.
    """

    __slots__ = ()

    def settle(self) -> None:
        """Compute the numbers now (nothing to do if its block was settled meanwhile)."""
        with _LOCK:
            where = _values_of(self)
            if type(where) is _Row:
                block = where.block
                _settle_rows(block.rows[where.index : where.index + 1], [self])
            elif where is not None:
                where.settle_held()  # a source holds its tensor (Note [Held tensors])
            if type(self) is DeferredSummary:  # its values were lost: never a summary without slots
                no_numbers(self)

    def __eq__(self, other: object) -> bool:
        self.settle()
        if isinstance(other, DeferredSummary):
            other.settle()
        return self == other

    def __hash__(self) -> int:
        self.settle()
        return hash(self)

    def __repr__(self) -> str:
        self.settle()
        return repr(self)

    def __reduce_ex__(self, protocol: Any) -> Any:
        self.settle()
        return self.__reduce_ex__(protocol)


def _deferred_field(name: str) -> property:
    slot = _SLOTS[name]

    def read(self: DeferredSummary) -> Any:
        self.settle()
        return slot.__get__(self)

    return property(read, doc=slot.__doc__)


for _name in _FIELDS:
    setattr(DeferredSummary, _name, _deferred_field(_name))
del _name


class _Row:
    """Where a summary's values wait (kept in its ``values`` slot until it is settled)."""

    __slots__ = ("block", "index")

    def __init__(self, block: _Block, index: int) -> None:
        self.block = block
        self.index = index


class _Block:
    """Rows of one length and dtype, and the summaries waiting on them, in order."""

    __slots__ = ("places", "rows", "views", "waiting")

    def __init__(self, length: int, dtype: np.dtype[Any]) -> None:
        count = max(2, BLOCK_BYTES // max(1, length * dtype.itemsize))
        self.rows = np.empty((count, length), dtype)
        self.views = list(self.rows)
        """Each row as an array of its own, made once (indexing ``rows`` makes one per call)."""
        self.places = [_Row(self, index) for index in range(count)]
        """Where each row is, made once: a summary points at one only while it waits."""
        self.waiting: list[DeferredSummary] = []

    def settle(self) -> None:
        """Settle every summary waiting here; the rows are free again."""
        waiting = self.waiting
        if waiting:
            _settle_rows(self.rows[: len(waiting)], waiting)
            waiting.clear()


_LOCK = threading.Lock()
"""Held to write, read or reuse rows, and to settle (which uses the scratch memory)."""
LOCK = _LOCK
_scratch = [np.empty(0)]
_BLOCKS: dict[tuple[int, np.dtype[Any]], _Block] = {}


def defer(array: np.ndarray, shape: tuple[int, ...], dtype: str, device: str) -> DeferredSummary:
    """A summary of a float array, its numbers computed later (Note [Deferred summaries]).

    Args:
        array: the values (copied here: the caller may change or free them next).
        shape: the tensor's shape.
        dtype: the dtype name to record (the tensor's own, if ``array`` was widened).
        device: the device name to record.

    Returns:
        The summary; its numbers are computed when first read, or when its
        block is settled.
    """
    summary = _unsettled(shape, dtype, device)
    key = (array.size, array.dtype)
    with _LOCK:
        block = _BLOCKS.get(key)
        if block is None:
            if len(_BLOCKS) >= BLOCKS:
                _settle_all()
                _BLOCKS.clear()
            block = _BLOCKS[key] = _Block(array.size, array.dtype)
        waiting = block.waiting
        index = len(waiting)
        if index == len(block.views):
            block.settle()
            index = 0
        block.views[index][...] = array.ravel()  # in C order
        _set_values(summary, block.places[index])
        waiting.append(summary)
    return summary


def settle_waiting() -> None:
    """Settle every waiting summary, a block at a time (Note [Deferred summaries])."""
    with _LOCK:
        _settle_all()


def _settle_all() -> None:
    for settle in _HOLDERS:
        settle()
    for block in _BLOCKS.values():
        block.settle()


# Note [Held tensors]
# ~~~~~~~~~~~~~~~~~~~
# Copying a small gradient into a row costs more in Python calls than in
# arithmetic. A source that can keep the tensor itself for a while, safely
# (the PyTorch bridge: ``sources/pytorch/held.py``), makes its summary with
# :func:`unsettled` and puts in its ``values`` slot a place whose
# ``settle_held()`` settles it (and every summary held beside it), and
# registers with :func:`add_holder` a function that settles all it holds;
# :func:`settle_waiting` calls it. Both run holding the lock.

_HOLDERS: list[Any] = []


def add_holder(settle_all: Any) -> None:
    """Register a source's function that settles every summary it holds (Note [Held tensors])."""
    if settle_all not in _HOLDERS:
        _HOLDERS.append(settle_all)


def unsettled(shape: tuple[int, ...], dtype: str, device: str, place: Any) -> DeferredSummary:
    """A :class:`DeferredSummary` whose numbers ``place.settle_held()`` computes."""
    summary = _unsettled(shape, dtype, device)
    _set_values(summary, place)
    return summary


def settle_rows(rows: np.ndarray, summaries: list[Any]) -> None:
    """Store the numbers of each row of ``rows`` in its summary (call it holding :data:`LOCK`).

    The numbers are those :func:`float_summary` gives each row alone.
    """
    _settle_rows(rows, summaries)


def no_numbers(summary: Any) -> None:
    """Settle ``summary`` without numbers: its values could not be read (hold :data:`LOCK`)."""
    _set_min(summary, None)
    _set_max(summary, None)
    _set_mean(summary, None)
    _set_norm(summary, None)
    _set_values(summary, None)
    _set_class(summary, "__class__", TensorSummary)


_isfinite = math.isfinite


def _settle_rows(rows: np.ndarray, summaries: list[Any]) -> None:
    """Store the numbers of each row of ``rows`` (C-ordered 2-D floats) in its summary.

    Call it holding ``_LOCK``.
    """
    count = rows.shape[1]
    with np.errstate(all="ignore"):
        # Widened and squared into memory kept for it: no allocation, no page to fault in.
        size = rows.size
        if _scratch[0].size < size:
            _scratch[0] = np.empty(size)
        wide = _scratch[0][:size].reshape(rows.shape)
        np.copyto(wide, rows)
        totals = np.add.reduce(wide, axis=1)
        squares = np.add.reduce(np.multiply(wide, wide, out=wide), axis=1)
        lows = np.minimum.reduce(rows, axis=1).tolist()
        highs = np.maximum.reduce(rows, axis=1).tolist()
        # IEEE division and square root: the same bits as Python's, for all rows at once.
        means = np.divide(totals, count).tolist()
        norms = np.sqrt(squares).tolist()
        finite = np.isfinite(totals).all()
    if finite:  # the common case: no NaN, no Inf, no overflow
        # Stored through the twin's plain slots (Note [Building frozen records]).
        for summary, low, high, mean, norm in zip(
            summaries, lows, highs, means, norms, strict=True
        ):
            _set_class(summary, "__class__", _Fields)
            summary.min = low
            summary.max = high
            summary.mean = mean
            summary.norm = norm
            summary.values = None
            summary.__class__ = TensorSummary
        return
    for i, summary in enumerate(summaries):
        if _isfinite(means[i]):
            low, high, mean, norm = lows[i], highs[i], means[i], norms[i]
            nan_count = inf_count = 0
        else:  # a NaN or an Inf (or a sum that overflowed): the general path counts them
            general = summarize(rows[i], summary.device)
            low, high, mean, norm = general.min, general.max, general.mean, general.norm
            nan_count, inf_count = general.nan_count, general.inf_count
        _set_min(summary, low)
        _set_max(summary, high)
        _set_mean(summary, mean)
        _set_norm(summary, norm)
        _set_nan(summary, nan_count)
        _set_inf(summary, inf_count)
        _set_values(summary, None)
        _set_class(summary, "__class__", TensorSummary)
