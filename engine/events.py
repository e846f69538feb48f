"""Instrumentation: one small immutable event per engine step.

The engine emits events only while somebody listens. Every emitting site in
the engine is guarded by ``if HUB.active:`` so that, with no listener, a step
costs a single attribute check (see Note [Free when nobody listens]).

Listeners are plain callables taking an :class:`Event`. They run on the thread
where the step happens (a device worker thread, a reentrant pool thread or the
caller's thread), synchronously, before the engine moves on; that is what lets
a debugger pause the engine at any event.

Tensors never travel inside events. An event carries :class:`LazySummary`
objects: the tensor's shape, dtype and device, and only a weak reference to
its array. The engine takes no statistics; an observer that wants them
(``autograd_viz.sources.summaries.resolve``) takes them inside its callback,
while the engine still holds the array, and may keep them in the lazy summary.
"""

from __future__ import annotations

import itertools
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, NamedTuple

__all__ = [
    "DATA",
    "DEVICE",
    "EVENT_KINDS",
    "GRAPH_TASK",
    "HUB",
    "KIND",
    "NODE_ID",
    "NODE_NAME",
    "SEQ",
    "SEQUENCE_NR",
    "THREAD",
    "TOPOLOGICAL_NR",
    "T_NS",
    "Event",
    "LazySummary",
    "Listener",
    "label_thread",
    "listen",
    "subscribe",
    "thread_name",
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
        "grads",
    }
)
"""Every kind of event: the engine's, and two that only a source watching another
engine emits: ``derived_mismatch`` (the PyTorch bridge), when what it observes
contradicts what it derived, and ``comm``, a collective a distributed job's backward
launched or finished (DDP's gradient buckets); and ``grads``, which no engine emits: what
a gradient watch found about a call, recorded after it."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})


_DTYPE_NAMES: dict[Any, str] = {}


def _dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


class LazySummary:
    """A tensor in an event: its shape, dtype and device, and a weak reference to its array.

    The engine takes no statistics of a tensor; an observer that wants them
    takes them from :meth:`array` inside its callback, while the engine still
    holds the array, and may keep what it took in :attr:`summary`, so that
    every listener shares it and it outlives the array.
    """

    __slots__ = ("_ref", "_strong", "device", "dtype", "shape", "summary")

    def __init__(self, array: Any, device: str) -> None:
        shape = array.shape
        self.shape: tuple[int, ...] = shape if type(shape) is tuple else tuple(shape)
        """The array's shape."""
        self.dtype: str = _dtype_name(array.dtype)
        """NumPy's name for its dtype, such as ``"float32"``."""
        self.device: str = device
        """The device it lives on."""
        self.summary: Any = None
        """Left to observers: the summary one took of the array (the engine never reads it)."""
        try:
            self._ref: Callable[[], Any] | None = weakref.ref(array)
        except TypeError:  # NumPy scalars cannot be weakly referenced; they are tiny.
            self._ref = None
            self._strong = array
        else:
            self._strong = None

    def array(self) -> Any:
        """The array, or ``None`` once it is freed."""
        return self._strong if self._ref is None else self._ref()

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


(KIND, SEQ, T_NS, THREAD, DEVICE, GRAPH_TASK,
 NODE_ID, NODE_NAME, SEQUENCE_NR, TOPOLOGICAL_NR, DATA) = range(11)  # fmt: skip
"""The position of each of :class:`Event`'s fields, for a plain row of them.

Note [Rows of events]
~~~~~~~~~~~~~~~~~~~~~
An event is read by name (``event.graph_task``). A source that builds many
events at once may build each as a plain tuple in :class:`Event`'s order
instead (a row, Note [Batched events] in ``autograd_viz/sources/batches.py``):
a tuple display costs a quarter of ``tuple.__new__(Event, ...)``, which the
PyTorch bridge would pay four times per node. Code that reads a row reads it
with these positions (``row[GRAPH_TASK]``), never with a bare number; reading a
position costs what reading a name of an ``Event`` does, within 2 ns.
"""

_new_event = tuple.__new__
_NO_NODE = (None, None, None, None)


_thread_name = threading.local()
"""``_thread_name.name``: the current thread's name, looked up on the thread's first event.

A plain ``threading.local`` (a subclass's attributes cost twice as much to read)."""


def _current_thread_name() -> str:
    name: str = threading.current_thread().name
    _thread_name.name = name
    return name


def label_thread(name: str) -> None:
    """Name the current thread's events ``name`` from now on, instead of its Python name.

    For a thread Python did not start (a communication library's callback
    thread), which Python calls ``Dummy-N``: the thread itself, and what the
    program sees of it, are left as they are.
    """
    _thread_name.name = name


def thread_name() -> str:
    """The name events emitted on this thread carry as their ``thread``.

    Read once per thread and kept: a source that emits for the engine's
    threads names them as the engine does.
    """
    try:
        return _thread_name.name
    except AttributeError:
        return _current_thread_name()


Listener = Callable[[Event], None]


class _Hub:
    """The set of listeners and the flag the engine checks.

    Note [Free when nobody listens]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    ``active`` is a plain bool attribute, true exactly when at least one
    listener is subscribed. Every emit site in the engine reads it first and
    builds nothing (no dict, no summary, no Event) when it is false.
    """

    __slots__ = ("_lock", "active", "listeners", "seq")

    def __init__(self) -> None:
        self.active = False
        """Whether anybody listens (Note [Free when nobody listens])."""
        self.listeners: tuple[Listener, ...] = ()
        """The subscribed listeners, in order; replaced, never changed in place."""
        self._lock = threading.Lock()
        self.seq = itertools.count(1)
        """Where every event's ``seq`` comes from, also a source's that builds its own."""

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
        self.active = bool(listeners)

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
            except BaseException as exc:  # noqa: BLE001 - listener_failed re-raises what it must
                self.listener_failed(listener, exc, graph_task)

    def listener_failed(self, listener: Listener, exc: BaseException, graph_task: int) -> None:
        """``listener`` raised ``exc`` on an event of ``graph_task``; the engine goes on.

        What is meant for the engine (``KeyboardInterrupt``, ``SystemExit``, an
        exception marked ``_engine_propagate``) is raised again; otherwise the
        listener is told or unsubscribed (Note [Listener errors]). A source that
        hands events over itself calls it when a listener raises.
        """
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
    listener is such a one (Note [Batched events] in ``autograd_viz/sources/batches.py``).

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
