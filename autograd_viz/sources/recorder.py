"""Recording events into a :class:`~autograd_viz.trace.Trace`.

A :class:`Recorder` is an event listener (``engine.events.listen``). At every
``graph_task_start`` it takes a snapshot of the graph the task runs (a
:class:`~autograd_viz.trace.GraphTaskInfo`): from our engine's nodes
(:mod:`autograd_viz.sources.engine`), or through the ``graph_snapshot``
callable a source that watches another engine puts in the event. Every event
becomes a :class:`~autograd_viz.trace.TraceEvent` whose tensors are
summaries computed while the engine still holds the arrays.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from autograd_viz.sources.arming import every_source
from autograd_viz.sources.engine import snapshot
from autograd_viz.trace.records import (
    DEFAULT_MAX_VALUES,
    GraphTaskInfo,
    Trace,
    TraceEvent,
    new_header,
)
from engine import events
from engine.events import Event, LazySummary

_new_trace_event = tuple.__new__


class Recorder:
    """An engine listener that records every event into :attr:`trace`.

    Use it with ``engine.events.listen(recorder)``, or through :func:`record`.
    It is safe to call from several engine threads at once.

    Args:
        max_values: tensors with at most this many elements keep their values
            in summaries; 0 keeps none.
        arrival_order: keep events in the order they reach the recorder
            instead of the engine's emission order (``seq``). A debugger that
            lets paused threads go one by one records in the order it chose.
    """

    def __init__(self, max_values: int = DEFAULT_MAX_VALUES, arrival_order: bool = False) -> None:
        if isinstance(max_values, bool) or not isinstance(max_values, int) or max_values < 0:
            raise ValueError(f"max_values must be a non-negative integer, got {max_values!r}")
        self.max_values = max_values
        """The element count below which values are kept."""
        self.trace = Trace(new_header(max_values))
        """The trace being filled."""
        self._lock = self.trace.lock  # Trace.copy takes it: a save never sees half a change
        self._arrival_order = arrival_order
        self.closed = False
        """Set by :meth:`close`: events that arrive later are not recorded."""

    def close(self) -> None:
        """Record nothing more, not even an event a thread is handing over right now.

        An engine thread may be inside :meth:`__call__` when its listener is
        unsubscribed; after ``close`` returns, the trace no longer changes.
        """
        with self._lock:
            self.closed = True

    def __call__(self, event: Event) -> None:
        """Record ``event``; call it on the engine thread that emitted it."""
        if self.closed:
            return
        if event[0] == "graph_task_start":
            self._record_start(event)
            return
        data = event[10]
        for value in data.values():
            if type(value) not in _KEPT_AS_IS:
                data = _plain_values(data, self.max_values)
                break
        with self._lock:
            if self.closed:
                return
            events_ = self.trace.events
            position = len(events_)
            if not self._goes_last(event[1]):
                self._insert(event, data)
            elif data is event[10]:  # plain already: the event's own fields, after the index
                events_.append(_new_trace_event(TraceEvent, (position, *event)))
            else:  # the event's fields, kind to topological_nr, between the index and the data
                events_.append(_new_trace_event(TraceEvent, (position, *event[:10], data)))

    def take_events(self, rows: list[tuple[Any, ...]]) -> None:
        """Record events a source built as plain rows (Note [Batched events], ``engine/events.py``).

        Args:
            rows: each event's fields in :class:`~engine.events.Event`'s
                order, in ``seq`` order; the data plain, summaries resolved
                with this recorder's :attr:`max_values`.
        """
        if self.closed or not rows:
            return
        with self._lock:
            if self.closed:
                return
            if not self._goes_last(rows[0][1]):
                self._merge(rows)
                return
            events_ = self.trace.events
            new = _new_trace_event
            events_.extend([new(TraceEvent, (i, *row)) for i, row in enumerate(rows, len(events_))])

    def _goes_last(self, seq: int) -> bool:
        """Whether an event numbered ``seq`` goes after every recorded one (under the lock)."""
        events_ = self.trace.events
        return not events_ or self._arrival_order or events_[-1][2] < seq

    def _merge(self, rows: list[tuple[Any, ...]]) -> None:
        """Rows of one thread reach the recorder after later events of another (under the lock)."""
        trace = self.trace
        events_ = trace.events
        first = bisect.bisect(events_, rows[0][1], key=lambda e: e.seq)
        later = events_[first:]
        merged = sorted([*[e[1:] for e in later], *rows], key=lambda fields: fields[1])
        events_[first:] = [
            _new_trace_event(TraceEvent, (i, *f)) for i, f in enumerate(merged, first)
        ]
        for event in events_[first:]:  # a graph task that starts later moves on
            if event.kind == "graph_task_start":
                info = trace.graph_tasks.get(event.graph_task)
                if info is not None and info.first_event != event.index:
                    trace.graph_tasks[event.graph_task] = _with_first_event(info, event.index)
        if first < trace._replayed_len:
            trace._replayer = None  # it indexed the events that moved

    def _record_start(self, event: Event) -> None:
        build = event.data.get("graph_snapshot")
        info = snapshot(event, self.max_values) if build is None else build(self.max_values)
        data = _plain_data(event, self.max_values)
        with self._lock:
            if self.closed:
                return
            trace = self.trace
            events_ = trace.events
            position = len(events_)
            if not self._goes_last(event[1]):
                position = self._insert(event, data)
            else:
                events_.append(_new_trace_event(TraceEvent, (position, *event[:10], data)))
            trace.graph_tasks[info.id] = _with_first_event(info, position)
            sources = trace.header.setdefault("sources", [])
            source = event.data.get("source", "engine")
            if source not in sources:
                sources.append(source)

    def _insert(self, event: Event, data: Mapping[str, Any]) -> int:
        """Another thread emitted later but recorded first; keep engine order (under the lock)."""
        trace = self.trace
        events_ = trace.events
        position = bisect.bisect(events_, event.seq, key=lambda e: e.seq)
        events_.insert(position, _new_trace_event(TraceEvent, (position, *event[:10], data)))
        for i in range(position + 1, len(events_)):
            events_[i] = _reindex(events_[i], i)
        _shift_first_events(trace, position)
        if position < trace._replayed_len:
            trace._replayer = None  # it indexed the events that moved
        return position


def _reindex(event: TraceEvent, index: int) -> TraceEvent:
    return event._replace(index=index)


def _with_first_event(info: GraphTaskInfo, index: int) -> GraphTaskInfo:
    fields = {name: getattr(info, name) for name in GraphTaskInfo.__slots__}
    fields["first_event"] = index
    return GraphTaskInfo(**fields)


def _shift_first_events(trace: Trace, position: int) -> None:
    for gid, info in list(trace.graph_tasks.items()):
        if info.first_event >= position:
            trace.graph_tasks[gid] = _with_first_event(info, info.first_event + 1)


@contextmanager
def record(max_values: int = DEFAULT_MAX_VALUES) -> Iterator[Trace]:
    """Record every backward call made inside the ``with`` block: our engine's and PyTorch's.

    Example:
        >>> with autograd_viz.record() as trace:
        ...     loss.backward()
        >>> trace.state_at(len(trace)).leaves

    Args:
        max_values: tensors with at most this many elements keep their values.

    Yields:
        The :class:`Trace`, filled as the engine runs.
    """
    recorder = Recorder(max_values)
    try:
        with every_source(), events.listen(recorder):
            yield recorder.trace
    finally:
        recorder.close()  # a thread still handing over an event records nothing more


# -- turning live objects into plain values -------------------------------------------

_DROPPED = {
    "graph_task_start": ("graph_root", "graph_snapshot", "dependencies", "needed", "captures")
}


def _plain(value: Any, max_values: int) -> Any:
    if isinstance(value, LazySummary):
        return value.resolve(max_values)
    if isinstance(value, list | tuple):
        return tuple(_plain(v, max_values) for v in value)
    return value


_KEPT_AS_IS = frozenset({int, float, str, bool, type(None)})


def _plain_data(event: Event, max_values: int) -> Mapping[str, Any]:
    """``event.data`` with summaries resolved and sequences as tuples.

    Data that is already plain (an ``enqueue``'s, a ``dependency_decrement``'s)
    is kept as it is: the engine's read-only mapping, which nothing changes.
    """
    data = event.data
    dropped = _DROPPED.get(event[0])
    if dropped is None:
        for value in data.values():
            if type(value) not in _KEPT_AS_IS:
                return _plain_values(data, max_values)
        return data
    return _plain_values({k: v for k, v in data.items() if k not in dropped}, max_values)


def _plain_values(data: Mapping[str, Any], max_values: int) -> dict[str, Any]:
    plain = {}
    for key, value in data.items():
        kind = type(value)
        if kind in _KEPT_AS_IS:
            plain[key] = value
        elif kind is list:  # of summaries, mostly: resolved without a call to _plain
            plain[key] = tuple(
                [
                    v.resolve(max_values) if isinstance(v, LazySummary) else _plain(v, max_values)
                    for v in value
                ]
            )
        elif isinstance(value, LazySummary):
            plain[key] = value.resolve(max_values)
        else:
            plain[key] = _plain(value, max_values)
    return plain
