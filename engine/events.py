"""Instrumentation: one small immutable event per engine step.

The engine emits events only while somebody listens. Every emitting site in
the engine is guarded by ``if HUB.active:`` so that, with no listener, a step
costs a single attribute check (see Note [Free when nobody listens]).

Listeners are plain callables taking an :class:`Event`. They run on the thread
where the step happens (a device worker thread, a reentrant pool thread or the
caller's thread), synchronously, before the engine moves on; that is what lets
a debugger pause the engine at any event.

Tensors never travel inside events. An event carries :class:`LazySummary`
objects that hold only a weak reference to the array and compute the summary
(shape, dtype, device, min, max, mean, norm, NaN and Inf counts) the first
time somebody asks. A listener that wants the numbers asks inside its callback,
while the engine still holds the array.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "EVENT_KINDS",
    "HUB",
    "Event",
    "LazySummary",
    "Listener",
    "TensorSummary",
    "listen",
    "resolve_summaries",
    "slot_twin",
    "subscribe",
    "summarize",
    "unsubscribe",
]

EVENT_KINDS = frozenset(
    {
        "graph_task_start",
        "graph_task_end",
        "enqueue",
        "node_start",
        "node_end",
        "dependency_decrement",
        "accumulate",
        "capture",
        "hook",
        "skip",
        "release_variables",
        "anomaly",
        "error",
        "reentrant_enter",
        "reentrant_exit",
        "derived_mismatch",
        "comm",
    }
)
"""Every kind of event: the engine's, and two that only a source watching another
engine emits: ``derived_mismatch`` (the PyTorch bridge), when what it observes
contradicts what it derived, and ``comm``, a collective a distributed job's backward
launched or finished (DDP's gradient buckets)."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})


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


def _new_summary(
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
    """``TensorSummary(...)`` with every field given (Note [Building frozen records])."""
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


_DTYPE_NAMES: dict[Any, str] = {}
_SMALL = 64  # up to this many elements, plain Python beats NumPy's per-call overhead


def _dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


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
        return _new_summary(
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
    return _new_summary(
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
    return _new_summary(shape, dtype, device, low, high, mean, norm, nan_count, inf_count, values)


_INF = math.inf


class LazySummary:
    """A tensor summary computed on first use from a weakly held array.

    Shape, dtype and device are always known. The statistics are computed the
    first time :meth:`resolve` is called, if the array is still alive; a
    listener that wants them calls ``resolve()`` inside its callback.
    """

    __slots__ = ("_ref", "_strong", "_summary", "device", "dtype", "shape")

    def __init__(self, array: Any, device: str) -> None:
        shape = array.shape
        self.shape: tuple[int, ...] = shape if type(shape) is tuple else tuple(shape)
        self.dtype: str = _dtype_name(array.dtype)
        self.device: str = device
        self._summary: TensorSummary | None = None
        try:
            self._ref: Callable[[], Any] | None = weakref.ref(array)
        except TypeError:  # NumPy scalars cannot be weakly referenced; they are tiny.
            self._ref = None
            self._strong = array
        else:
            self._strong = None

    def resolve(self, max_values: int = 0) -> TensorSummary:
        """The summary; only shape, dtype and device if the array is already gone.

        Thread-safe without a lock: two threads resolving at once compute the
        same summary, and either may be kept.
        """
        summary = self._summary
        if summary is not None and (not max_values or summary.values is not None):
            return summary
        array = self._strong if self._ref is None else self._ref()
        if array is None:
            return summary or TensorSummary(self.shape, self.dtype, self.device)
        summary = self._summary = summarize(array, self.device, max_values)
        return summary

    def __repr__(self) -> str:
        return f"LazySummary(shape={self.shape}, dtype={self.dtype}, device={self.device})"


class Event(NamedTuple):
    """One step of the engine (immutable).

    Node events (``node_start``, ``node_end``, ``enqueue``, ...) name the node
    by ``node_id`` (stable for the node's lifetime and unique in the process),
    ``node_name``, ``sequence_nr`` and ``topological_nr``. Everything specific
    to a kind is in ``data``. A named tuple, because the engine makes one per
    step while somebody listens.
    """

    kind: str
    """What happened; one of :data:`EVENT_KINDS`."""
    seq: int
    """Global, strictly increasing order of emission."""
    t_ns: int
    """``time.perf_counter_ns()`` at emission."""
    thread: str
    """Name of the thread where the step happened."""
    device: str
    """The device of the engine thread (``cpu``, ``sim:0``, ``cuda:1``)."""
    graph_task: int
    """Id of the graph task (one per ``backward()`` / ``grad()`` call); 0 if none."""
    node_id: int | None = None
    """Stable id of the node concerned, if any."""
    node_name: str | None = None
    """``node.name()``, such as ``MulBackward0``."""
    sequence_nr: int | None = None
    """The node's sequence number."""
    topological_nr: int | None = None
    """The node's topological number."""
    data: Mapping[str, Any] = _EMPTY
    """Kind-specific fields (read-only)."""


_new_event = tuple.__new__
_NO_NODE = (None, None, None, None)


_thread_name = threading.local()
"""``_thread_name.name``: the current thread's name, looked up on the thread's first event.

A plain ``threading.local`` (a subclass's attributes cost twice as much to read)."""


def _current_thread_name() -> str:
    name: str = threading.current_thread().name
    _thread_name.name = name
    return name


def resolve_summaries(event: Event, max_values: int = 0) -> Event:
    """Compute every tensor summary in ``event.data`` now (call it inside a listener).

    Afterwards the summaries stay available after the arrays are freed.
    Returns the event, for chaining.
    """
    for value in event.data.values():
        if isinstance(value, LazySummary):
            value.resolve(max_values)
        elif isinstance(value, list | tuple):
            for item in value:
                if isinstance(item, LazySummary):
                    item.resolve(max_values)
    return event


Listener = Callable[[Event], None]


class _Hub:
    """The set of listeners and the flag the engine checks.

    Note [Free when nobody listens]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    ``active`` is a plain bool attribute, true exactly when at least one
    listener is subscribed. Every emit site in the engine reads it first and
    builds nothing (no dict, no summary, no Event) when it is false.
    """

    __slots__ = ("_lock", "active", "batch_max_values", "listeners", "seq")

    def __init__(self) -> None:
        self.active = False
        self.listeners: tuple[Listener, ...] = ()
        self.batch_max_values: int | None = None
        """Set when every listener takes events in batches (Note [Batched events])."""
        self._lock = threading.Lock()
        self.seq = itertools.count(1)
        """Where every event's ``seq`` comes from (also the batched ones')."""

    def subscribe(self, listener: Listener) -> None:
        with self._lock:
            self._set((*self.listeners, listener))

    def unsubscribe(self, listener: Listener) -> None:
        with self._lock:
            items = list(self.listeners)
            for i, item in enumerate(items):
                if item is listener:
                    del items[i]
                    break
            self._set(tuple(items))

    def _set(self, listeners: tuple[Listener, ...]) -> None:
        self.listeners = listeners
        self.batch_max_values = _batch_max_values(listeners)
        self.active = bool(listeners)

    def take_events(self, rows: list[tuple[Any, ...]], listeners: tuple[Listener, ...]) -> None:
        """Hand events a source built as rows to listeners that take batches.

        See Note [Batched events].

        Args:
            rows: each event's fields in :class:`Event`'s order, ``seq`` from
                :attr:`seq` when the step happened, ``data`` plain.
            listeners: the listeners the rows were built for; those of them
                still subscribed get them.
        """
        current = self.listeners
        for listener in listeners:
            if any(item is listener for item in current):
                try:
                    listener.take_events(rows)  # type: ignore[attr-defined]
                except BaseException as exc:  # noqa: BLE001 - _listener_failed re-raises what it must
                    self._listener_failed(listener, exc, rows[0][5] if rows else 0)

    def emit(
        self,
        kind: str,
        device: str,
        graph_task: int,
        node: Any = None,
        **data: Any,
    ) -> None:
        """Build one event and hand it to every listener (call only when ``active``)."""
        self.emit_data(kind, device, graph_task, node, data)

    def emit_data(
        self, kind: str, device: str, graph_task: int, node: Any, data: dict[str, Any]
    ) -> None:
        """:meth:`emit` with the kind-specific fields as a dict the event may keep."""
        if node is not None:
            node_fields = (node._id, node.name(), node.sequence_nr, node.topological_nr)
        else:
            node_fields = _NO_NODE
        try:
            thread = _thread_name.name
        except AttributeError:
            thread = _current_thread_name()
        event = _new_event(
            Event,
            (
                kind,
                next(self.seq),
                time.perf_counter_ns(),
                thread,
                device,
                graph_task,
                *node_fields,
                MappingProxyType(data) if data else _EMPTY,
            ),
        )
        for listener in self.listeners:
            try:
                listener(event)
            except BaseException as exc:  # noqa: BLE001 - _listener_failed re-raises what it must
                self._listener_failed(listener, exc, graph_task)

    def _listener_failed(self, listener: Listener, exc: BaseException, graph_task: int) -> None:
        """A listener raised: what is meant for the engine goes on (Note [Listener errors])."""
        if isinstance(exc, KeyboardInterrupt | SystemExit) or getattr(
            exc, "_engine_propagate", False
        ):
            raise exc
        on_error = getattr(listener, "on_error", None)
        if on_error is not None and isinstance(exc, Exception):
            try:
                on_error(exc, graph_task)
                return  # it handled its own failure and stays subscribed
            except Exception as inner:  # noqa: BLE001 - as any other listener's failure, below
                exc = inner
        self.unsubscribe(listener)
        warnings.warn(
            f"event listener {listener!r} raised {type(exc).__name__}: {exc}; it has "
            f"been unsubscribed\n" + "".join(traceback.format_exception(exc)),
            RuntimeWarning,
            stacklevel=3,
        )


def _batch_max_values(listeners: tuple[Listener, ...]) -> int | None:
    """The ``max_values`` every listener takes batches with, if they all do and agree."""
    found = None
    for listener in listeners:
        max_values = getattr(listener, "max_values", None)
        if getattr(listener, "take_events", None) is None or type(max_values) is not int:
            return None
        if found is not None and max_values != found:
            return None
        found = max_values
    return found


# Note [Listener errors]
# ~~~~~~~~~~~~~~~~~~~~~~
# A listener that raises never fails the backward pass. By default it is
# unsubscribed with a RuntimeWarning (a user's listener that is broken stays
# broken). A listener that must outlive its own failure (the recorder: one bad
# event must not end watching for the rest of a run) has an ``on_error(exc,
# graph_task)`` method: the hub calls it instead and the listener stays
# subscribed; ``graph_task`` is the event's (for a batch, its first row's).
# If ``on_error`` raises too, the listener is unsubscribed as above. Only the
# failure path looks for the attribute: the plain path costs nothing more.

# Note [Batched events]
# ~~~~~~~~~~~~~~~~~~~~~
# A listener that only stores events (a Recorder) does not need each one the
# moment it happens; it needs them in order, with their tensors summarized
# while the tensors exist. Such a listener has a ``take_events(rows)`` method
# and an int ``max_values`` attribute. While every listener has both, with
# the same ``max_values``, ``batch_max_values`` holds it, and a source that
# emits many events per step (the PyTorch bridge derives four for every node
# it observes) may build each event as a plain row instead: its ``seq`` from
# ``HUB.seq`` and its time when the step happens, its summaries resolved with
# ``batch_max_values`` at once, sequences as tuples. It hands the rows over
# with ``HUB.take_events`` before anything else of its graph task is emitted,
# and at the latest when the graph task ends. Order is the ``seq`` order, as
# for events emitted one by one. Rows go only to the listeners they were
# built for (a listener never gets events from before it subscribed); a
# source that sees the listeners change hands its rows over and emits one by
# one from then on.

HUB = _Hub()
"""The process-wide event hub the engine emits into."""


def subscribe(listener: Listener) -> None:
    """Subscribe ``listener`` to every event until :func:`unsubscribe` is called."""
    if not callable(listener):
        raise TypeError(f"an event listener must be callable, got {type(listener).__name__}")
    HUB.subscribe(listener)


def unsubscribe(listener: Listener) -> None:
    """Stop sending events to ``listener`` (no error if it is not subscribed)."""
    HUB.unsubscribe(listener)


@contextmanager
def listen(listener: Listener) -> Iterator[Listener]:
    """Subscribe ``listener`` for the duration of a ``with`` block.

    Several listeners may be subscribed at once; each receives every event, on
    the thread where the step happens. A listener that raises is reported with
    a ``RuntimeWarning`` and unsubscribed; the backward pass goes on. An
    exception whose ``_engine_propagate`` attribute is true (used by debuggers
    to cancel a live backward) is instead raised into the engine, which fails
    the graph task with it. A listener with an ``on_error(exc, graph_task)``
    method is told instead and stays subscribed (Note [Listener errors]).

    A listener that only stores events may take them in batches instead: one
    with a ``take_events(rows)`` method and an int ``max_values`` attribute
    (a :class:`~autograd_viz.Recorder`) gets the events of a source that
    builds rows (the PyTorch bridge) a batch at a time, in order, while every
    listener is such a one (Note [Batched events]).

    Example:
        >>> events = []
        >>> with engine.events.listen(events.append):
        ...     loss.backward()
    """
    subscribe(listener)
    try:
        yield listener
    finally:
        unsubscribe(listener)
