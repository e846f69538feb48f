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
import threading
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
        self._lock = threading.Lock()
        self._arrival_order = arrival_order

    def __call__(self, event: Event) -> None:
        """Record ``event``; call it on the engine thread that emitted it."""
        info = None
        if event[0] == "graph_task_start":
            build = event.data.get("graph_snapshot")
            info = snapshot(event, self.max_values) if build is None else build(self.max_values)
        data = _plain_data(event, self.max_values)
        with self._lock:
            trace = self.trace
            events_ = trace.events
            position = len(events_)
            if events_ and events_[-1][2] > event[1] and not self._arrival_order:
                # Another thread emitted later but recorded first; keep engine order.
                position = bisect.bisect(events_, event.seq, key=lambda e: e.seq)
            # The event's fields, kind to topological_nr, between the index and the data.
            record = _new_trace_event(TraceEvent, (position, *event[:10], data))
            if position == len(events_):
                events_.append(record)
            else:
                events_.insert(position, record)
                for i in range(position + 1, len(events_)):
                    events_[i] = _reindex(events_[i], i)
                _shift_first_events(trace, position)
                if position < trace._replayed_len:
                    trace._replayer = None  # it indexed the events that moved
            if info is not None:
                trace.graph_tasks[info.id] = _with_first_event(info, position)
                sources = trace.header.setdefault("sources", [])
                source = event.data.get("source", "engine")
                if source not in sources:
                    sources.append(source)


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
    with every_source(), events.listen(recorder):
        yield recorder.trace


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
    for value in data.values():
        if type(value) not in _KEPT_AS_IS:
            break
    else:
        if event[0] not in _DROPPED:
            return data
    dropped = _DROPPED.get(event[0], ())
    plain = {}
    for key, value in data.items():
        kind = type(value)
        if kind is LazySummary:  # the common cases without a call to _plain
            plain[key] = value.resolve(max_values)
        elif key in dropped:
            continue
        elif kind in _KEPT_AS_IS:
            plain[key] = value
        elif kind is list:
            plain[key] = tuple(
                [
                    v.resolve(max_values) if type(v) is LazySummary else _plain(v, max_values)
                    for v in value
                ]
            )
        else:
            plain[key] = _plain(value, max_values)
    return plain
