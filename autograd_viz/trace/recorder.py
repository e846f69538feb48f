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
import itertools
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from autograd_viz.sources.engine import snapshot
from autograd_viz.sources.once import program_stacklevel
from autograd_viz.sources.summaries import resolve
from autograd_viz.trace.calls import CallSelection
from autograd_viz.trace.document import Trace
from autograd_viz.trace.readers import INT_LIMIT
from autograd_viz.trace.records import (
    DEFAULT_MAX_VALUES,
    GraphTaskInfo,
    TraceEvent,
    check_observe,
    check_values,
    new_header,
    paused_gc,
)
from autograd_viz.trace.summary import TensorSummary
from autograd_viz.trace.text import count_words, one_line
from engine import events
from engine.calls import CALLS
from engine.events import DATA, GRAPH_TASK, SEQ, Event, LazySummary

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
        calls: which backward calls to record (Note [Recording some calls]);
            ``None`` records every event.
        on_calls: called as ``on_calls(part, calls)`` each time every
            recorded call has ended, with a :class:`Trace` of what was
            recorded since the last time (``calls`` backward calls, and any
            event outside a call, such as a forward anomaly); the recorder
            then forgets it, so that :attr:`trace` holds only the calls in
            flight. ``None`` keeps everything in :attr:`trace`. It is called
            under the recorder's lock: it must not wait for the recorder.
        values: which summaries to keep: ``"all"``, ``"leaves"`` (leaf
            gradients only) or ``"none"`` (Note [Values tiers] in
            ``autograd_viz/trace/records.py``).
        observe: what is watched: ``"nodes"`` (each node as it runs) or
            ``"calls"`` (each call's start and end; its nodes are derived after
            it, Note [Observation levels] in ``autograd_viz/trace/records.py``),
            which keeps no values: ``values`` must then be ``"none"``.

    Raises:
        ValueError: ``max_values`` is not a count, ``values`` not a tier,
            ``observe`` not a level, or ``"calls"`` with values.
    """

    def __init__(
        self,
        max_values: int = DEFAULT_MAX_VALUES,
        arrival_order: bool = False,
        calls: CallSelection | None = None,
        on_calls: Callable[[Trace, int], object] | None = None,
        values: str = "all",
        observe: str = "nodes",
    ) -> None:
        if (
            isinstance(max_values, bool)
            or not isinstance(max_values, int)
            or not 0 <= max_values <= INT_LIMIT  # past it, no reader takes the header
        ):
            raise ValueError(
                f"max_values must be a non-negative integer, got {max_values!r} "
                f"(the most a trace holds: {INT_LIMIT})"
            )
        self.max_values = max_values
        """The element count below which values are kept."""
        self.values = check_values(values)
        """The tier of values kept (Note [Values tiers]); a source that builds rows for this
        recorder (Note [Batched events]) summarizes only what it keeps."""
        self._tier = _TIERS[self.values]
        self.observe = check_observe(observe)
        """What is watched (Note [Observation levels]); the PyTorch bridge reads it."""
        if self.observe == "calls" and self.values != "none":
            raise ValueError(
                f"observe='calls' keeps no values: values must be 'none', got {self.values!r} "
                "(observe='nodes' records values)"
            )
        self.trace = Trace(new_header(max_values, self.values, self.observe))
        """The trace being filled."""
        self._lock = self.trace.lock  # Trace.copy takes it: a save never sees half a change
        self._arrival_order = arrival_order
        self.closed = False
        """Set by :meth:`close`: events that arrive later are not recorded."""
        self.calls = calls
        """Which backward calls are recorded (``None``: every event)."""
        self.calls_seen = 0
        """Backward calls from user code seen so far (recorded or not)."""
        self._on_calls = on_calls
        self._kept: set[int] | None = set() if calls is not None and calls.filters else None
        self._local = threading.local()  # .call: the index of this thread's call, if recorded
        self._counter = itertools.count()
        self._in_flight = 0  # recorded calls running
        self._ended = 0  # recorded calls ended since the last part handed on
        self._gated = False
        self._listening: bool | None = None  # gated: subscribed, idle, or neither
        self._cut: set[int] = set()  # graph tasks whose recording failed (on_error)
        self._said: set[str] = set()  # the errors on_error has warned about
        self.cut_calls = 0
        """How many graph tasks were cut short by an error of the recorder itself."""
        self.takes_calls = False
        """Whether a source may hand it whole calls to derive later (:meth:`take_call`):
        set for a flight recorder at the call level (Note [Calls derived later] in
        ``autograd_viz/sources/pytorch/call_level.py``)."""
        self._calls_held: list[tuple[Any, int | None]] = []  # (call, its index) not derived yet
        self.first_cut: str | None = None
        """The line said for the first of them (:attr:`GraphTaskInfo.cut`)."""

    @contextmanager
    def listening(self, gated: bool = False) -> Iterator[Recorder]:
        """Listen to the engine's events inside the block, then :meth:`close`.

        Args:
            gated: listen only while a recorded call runs (Note [Recording
                some calls]): an unrecorded call then runs as unwatched. Only
                for a recorder that needs no event outside the calls it keeps.
        """
        watch_calls = self.calls is not None or self._on_calls is not None
        if watch_calls:
            CALLS.add(self)
        try:
            if gated and self._kept is not None:
                with self._lock:
                    self._gated = True
                    self._expect_next()
                yield self
            else:
                with events.listen(self):
                    yield self
        finally:
            CALLS.remove(self)
            with self._lock:
                if self._gated:
                    self._gated = False
                    self._listen(None)
            events.unsubscribe(self)
            self.close()

    # -- calls (Note [Recording some calls]) ---------------------------------------------
    def call_started(self) -> None:
        """A backward call from user code starts on this thread (:data:`engine.calls.CALLS`)."""
        index = next(self._counter)  # atomic: calls on several threads get distinct indices
        self.calls_seen = index + 1
        calls = self.calls
        keep = not self.closed and (calls is None or calls.wants(index))
        self._local.call = index if keep else None
        self._local.graph_task = None  # set when its graph_task_start is recorded
        if keep:
            with self._lock:
                self._in_flight += 1
                if self._gated:
                    self._listen(True)

    def wants_call(self) -> bool:
        """Whether the backward call this thread runs is one to record: a source may run a
        call no listener wants as unwatched (Note [Calls no listener wants] in
        ``autograd_viz/sources/pytorch/chokepoint.py``)."""
        return self._kept is None or getattr(self._local, "call", None) is not None

    def set_call(self, index: int | None) -> None:
        """Number the call this thread runs ``index`` (``None``: none), for a watcher of
        :data:`~engine.calls.CALLS` that counts calls itself (a live session)."""
        self._local.call = index

    def call_ended(self) -> None:
        """The call this thread started has ended: hand on what is finished."""
        local = self._local
        if getattr(local, "call", None) is None:  # not recorded (or started before we watched)
            if self._gated and self.calls is not None and self.calls.wants(self.calls_seen):
                with self._lock:
                    if not self._in_flight:
                        self._expect_next()  # the next call is recorded: its forward too
            return
        local.call = None
        with self._lock:
            self._in_flight -= 1
            self._ended += 1
            if self._in_flight or self.closed:
                # Closed: :meth:`close` handed on what there was, and whoever owns the
                # trace may have filled it since (a flight recorder's calls); a call that
                # ends later (a daemon thread's, at exit) must not take them away.
                return
            self._cut.clear()  # every call has ended: no event of a cut one is still to come
            if self._gated:
                self._expect_next()
            if self._kept is not None:
                self._kept.clear()
            self._hand_on()

    def _expect_next(self) -> None:
        """Listen from now on if the next call is one to record, else wait (under the lock).

        From the end of the previous call, so that the recorded call's forward
        pass is watched too (Note [Backward calls] in ``engine/calls.py``).
        """
        assert self.calls is not None
        self._listen(not self.closed and self.calls.wants(self.calls_seen))

    def _listen(self, listen: bool | None) -> None:
        """Subscribe to the events (``True``), wait idle for a call to record (``False``) or
        neither (``None``, when recording ends); gated only, under the lock."""
        was = self._listening
        if listen == was:
            return
        self._listening = listen
        if listen:
            events.subscribe(self)
        elif was:
            events.unsubscribe(self)
        if was is False:
            CALLS.set_idle(False)
        if listen is False:
            CALLS.set_idle(True)

    def _hand_on(self) -> None:
        """Give what is recorded so far to ``on_calls`` and start afresh (under the lock).

        Under the lock, so that parts arrive in order and a signal that
        stops the program while a part is handed on leaves no lock held.
        """
        trace = self.trace
        held = self._calls_held
        if self._on_calls is None or not (len(trace) or held):
            return
        part = Trace(trace.header, trace.graph_tasks)
        part.share_events_of(trace)  # read or not (Note [Rows until read])
        trace.graph_tasks = {}
        trace.events = []
        trace._replayer = None
        if held:
            self._calls_held = []
            part = HeldCalls(part, held, self)
        calls, self._ended = self._ended, 0
        try:
            self._on_calls(part, calls)
        except Exception as exc:  # noqa: BLE001 - recording never fails the program's backward
            self.cut_calls += calls
            error = one_line(f"{type(exc).__name__}: {exc}")
            if self.first_cut is None:
                self.first_cut = f"keeping {count_words(calls, 'backward call')}: {error}"
            warnings.warn(
                f"autograd-viz: keeping the last {calls} backward call(s) failed ({error}); "
                f"they are not in the trace, later backward calls are recorded",
                RuntimeWarning,
                stacklevel=program_stacklevel(),
            )

    def close(self) -> None:
        """Record nothing more, not even an event a thread is handing over right now.

        An engine thread may be inside :meth:`__call__` when its listener is
        unsubscribed; after ``close`` returns, the trace no longer changes.
        With ``on_calls``, what is left (a call cut short, events outside any
        call) is handed on first. A call cut short counts as a call: a flight
        recorder's ``last`` N then holds N calls, the cut one the last of them,
        whether the stop reached it inside a node (where the call ends with the
        error) or anywhere else (where it never ends).
        """
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._ended += self._in_flight
            self._hand_on()

    def __call__(self, event: Event) -> None:
        """Record ``event``; call it on the engine thread that emitted it."""
        if self.closed:
            return
        if event.kind == "graph_task_start":
            self._record_start(event)
            return
        kept = self._kept
        graph_task = event.graph_task
        if kept is not None and graph_task not in kept and graph_task != 0:
            return  # a graph task of a call not recorded (0: an event outside any)
        if self._cut and graph_task in self._cut:
            return  # its recording failed: it ends where it failed (on_error)
        data = event.data
        for value in data.values():
            if type(value) not in _KEPT_AS_IS:
                data = (
                    _plain_values(data, self.max_values)
                    if self._tier is None or _tier_keeps(self._tier, event)
                    else _without_values(data)
                )
                break
        with self._lock:
            if self.closed:
                return
            if not self._goes_last(event.seq):
                self._insert(event, data)
            else:  # the event's fields, kind to topological_nr, then the data
                self.trace.add_row(event[:DATA], data)

    def take_events(
        self, rows: list[tuple[Any, ...]], data: list[dict[str, Any]] | None = None
    ) -> None:
        """Record events a source built as plain rows (Note [Batched events] in ``batches.py``).

        Args:
            rows: each event's fields in :class:`~engine.events.Event`'s
                order, in ``seq`` order; the data plain, summaries resolved
                with this recorder's :attr:`max_values`. Without the data
                when ``data`` is given.
            data: each row's data, kept apart from the rows (Note [Rows apart
                from their data] in ``sources/pytorch/emitter.py``).
        """
        if self.closed or not rows:
            return
        if data is None:
            data = [row[DATA] for row in rows]
            rows = [row[:DATA] for row in rows]
        kept = self._kept
        if kept is not None or self._cut:
            kept_rows = []
            kept_data = []
            cut = self._cut
            for row, row_data in zip(rows, data, strict=True):
                task = row[GRAPH_TASK]
                if (kept is None or task in kept or task == 0) and task not in cut:
                    kept_rows.append(row)
                    kept_data.append(row_data)
            if not kept_rows:
                return
            rows, data = kept_rows, kept_data
        with self._lock:
            if self.closed:
                return
            if not self._goes_last(rows[0][SEQ]):
                self._merge([(*row, row_data) for row, row_data in zip(rows, data, strict=True)])
                return
            self.trace.add_rows(rows, data)  # Note [Rows until read] in records.py

    def note_call(self, kind: str, data: dict[str, Any], graph_task: int | None = None) -> bool:
        """Record an event of ``kind`` about the backward call this thread made last, after it.

        For what a watcher finds once a call has returned (``grads``, Note
        [Gradient findings in a trace] in ``autograd_viz/grads/recorded.py``):
        the event belongs to that call's graph task, so that it is read with the
        call. Nothing is recorded when that call was not (or is not yet) recorded.

        Args:
            kind: the event kind (one of the trace schema's).
            data: its plain fields.
            graph_task: the call's graph task, where this thread did not record the call
                itself (a live session records on the thread that lets events through).

        Returns:
            Whether it was recorded.
        """
        if graph_task is None:
            graph_task = getattr(self._local, "graph_task", None)
        if self.closed or graph_task is None or graph_task in self._cut:
            return False
        seq = next(events.HUB.seq)
        row = (kind, seq, time.perf_counter_ns(), events.thread_name(), "cpu",
               graph_task, None, None, None, None, data)  # fmt: skip
        with self._lock:
            if self.closed:
                return False
            if not self._goes_last(seq):
                self._merge([row])
            else:
                self.trace.add_row(row[:DATA], data)
        return True

    def take_call(self, call: Any) -> None:
        """Hold a whole backward call a source derives only when it is read (:attr:`takes_calls`).

        Args:
            call: has ``source`` (its ``graph_task_start``'s) and
                ``emit_into(recorder)``, which derives it into a recorder.
        """
        if self.closed:
            return
        index = getattr(self._local, "call", None)
        if self._kept is not None and index is None:
            return  # a call not recorded
        with self._lock:
            if self.closed:
                return
            sources = self.trace.header.setdefault("sources", [])
            if call.source not in sources:
                sources.append(call.source)
            self._calls_held.append((call, index))

    def on_error(self, exc: Exception, graph_task: int) -> None:
        """Recording an event of ``graph_task`` failed: cut that graph task there, go on.

        The hub calls it instead of unsubscribing the recorder (Note [Listener
        errors] in ``engine/events.py``), so that later backward calls are
        recorded whole. The graph task keeps what was recorded of it before
        the failure and nothing after; its :attr:`GraphTaskInfo.cut` holds the
        line said, which is a ``RuntimeWarning`` (once per distinct error).
        """
        with self._lock:
            if self.closed:
                return
            error = one_line(f"{type(exc).__name__}: {exc}")
            info = self.trace.graph_tasks.get(graph_task) if graph_task else None
            if graph_task and graph_task in self._cut:
                return  # said already: a later event of the same graph task
            if not graph_task:
                where = "an event outside any backward call"
            elif info is not None and info.call is not None:
                where = f"backward call {info.call} (graph task {graph_task})"
            else:
                where = f"graph task {graph_task}"
            line = f"{where}: {error}"
            if graph_task:
                self._cut.add(graph_task)
                if info is not None:
                    self.trace.graph_tasks[graph_task] = _with_cut(info, line)
                self.cut_calls += 1
                if self.first_cut is None:
                    self.first_cut = line
            said = error not in self._said
            if said and len(self._said) < 100:  # bounded, however many kinds of errors
                self._said.add(error)
        if said:
            warnings.warn(
                f"autograd-viz: recording {where} failed ({error}); what came before is "
                f"kept, later backward calls are recorded",
                RuntimeWarning,
                stacklevel=program_stacklevel(),
            )

    def _goes_last(self, seq: int) -> bool:
        """Whether an event numbered ``seq`` goes after every recorded one (under the lock)."""
        last = self.trace.last_seq()
        return last is None or self._arrival_order or last < seq

    def _merge(self, rows: list[tuple[Any, ...]]) -> None:
        """Rows of one thread reach the recorder after later events of another (under the lock)."""
        trace = self.trace
        events_ = trace.events
        first = bisect.bisect(events_, rows[0][SEQ], key=lambda e: e.seq)
        later = events_[first:]
        # A recorded event without its index is a row (TraceEvent: index, then Event's fields).
        merged = sorted([*[e[1:] for e in later], *rows], key=lambda fields: fields[SEQ])
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
        parent = event.data.get("parent_graph_task") or None
        call = getattr(self._local, "call", None)
        kept = self._kept
        if kept is not None:
            if call is None and parent not in kept:
                return
            kept.add(event.graph_task)
        build = event.data.get("graph_snapshot")
        failed: Exception | None = None
        # A leaf's .grad before the call is a leaf's gradient: kept from the tier leaves up.
        max_values = self.max_values if self.values != "none" else None
        try:
            info = (
                snapshot(event, self.max_values, self.values)
                if build is None
                else build(max_values, self.values)
            )
        except Exception as exc:  # noqa: BLE001 - raised again below, once the call is in the trace
            failed, info = exc, _bare_info(event)
        if parent is None and call is not None:
            info = _with_call(info, call)
            self._local.graph_task = info.id
        data = _plain_data(event, self.max_values)
        if self._tier is not None and not _tier_keeps(self._tier, event):
            data = _without_values(data)
        with self._lock:
            if self.closed:
                return
            trace = self.trace
            position = len(trace)
            goes_last = self._goes_last(event.seq)
            started = _with_first_event(info, position)
            try:
                if not goes_last:
                    position = self._insert(event, data)
                    started = _with_first_event(info, position)
                else:
                    trace.add_row(event[:DATA], data)
                trace.graph_tasks[info.id] = started
            except BaseException:
                # A signal handler of the program's raised (sys.exit from SIGTERM) after the
                # event went in: its call goes in too, or the file would hold a start with no
                # call to start (Note [A call goes in whole]).
                if goes_last and len(trace) > position and trace.last_seq() == event.seq:
                    trace.graph_tasks[info.id] = started
                raise
            sources = trace.header.setdefault("sources", [])
            source = event.data.get("source", "engine")
            if source not in sources:
                sources.append(source)
        if failed is not None:
            raise failed  # the hub hands it to on_error, which marks the call cut

    # Note [A call goes in whole]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # A Python signal handler runs between two bytecodes of the main thread, which
    # is where our engine's CPU work and its events run, so a program's own
    # ``signal.signal(SIGTERM, lambda *_: sys.exit(7))`` can raise inside the
    # recorder. A ``graph_task_start`` recorded without its call made the file
    # unreadable ("graph_task_start of 50 without its graph_task record"), once
    # under load. The event and the call go in together: a handler raising between
    # the two puts the call in before the exception goes on.

    def _insert(self, event: Event, data: Mapping[str, Any]) -> int:
        """Another thread emitted later but recorded first; keep engine order (under the lock)."""
        trace = self.trace
        events_ = trace.events
        position = bisect.bisect(events_, event.seq, key=lambda e: e.seq)
        events_.insert(position, _new_trace_event(TraceEvent, (position, *event[:DATA], data)))
        for i in range(position + 1, len(events_)):
            events_[i] = _reindex(events_[i], i)
        _shift_first_events(trace, position)
        if position < trace._replayed_len:
            trace._replayer = None  # it indexed the events that moved
        return position


class HeldCalls(Trace):
    """A part of a recording whose calls are derived when it is first read (:meth:`trace`).

    Its own events are the ones recorded as they came (none, mostly); the
    held calls follow them once derived (Note [Calls derived later] in
    ``autograd_viz/sources/pytorch/call_level.py``).
    """

    def __init__(self, part: Trace, held: list[tuple[Any, int | None]], recorder: Recorder) -> None:
        super().__init__(part.header, part.graph_tasks, part.events)
        self.held = held
        """Each call not derived yet, with its index in the run."""
        self._recorder = (recorder.max_values, recorder.values, recorder.observe)

    def trace(self) -> Trace:
        """The part with its calls derived (once: later reads get the same trace)."""
        if self.held:
            max_values, values, observe = self._recorder
            into = Recorder(max_values, values=values, observe=observe)
            with paused_gc():  # a few rows and records per node, none in a cycle
                for call, index in self.held:
                    into.set_call(index)
                    call.emit_into(into)
            into.set_call(None)
            self.held = []
            derived = into.trace
            offset = len(self.events)
            if not offset:  # the usual part: nothing but held calls
                self.events, self.graph_tasks = derived.events, derived.graph_tasks
                return self
            self.events = [
                *self.events,
                *(e._replace(index=e.index + offset) for e in derived.events),
            ]
            for gid, info in derived.graph_tasks.items():
                self.graph_tasks[gid] = _with_first_event(info, info.first_event + offset)
        return self


def _reindex(event: TraceEvent, index: int) -> TraceEvent:
    return event._replace(index=index)


def _with_first_event(info: GraphTaskInfo, index: int) -> GraphTaskInfo:
    fields = {name: getattr(info, name) for name in GraphTaskInfo.__slots__}
    fields["first_event"] = index
    return GraphTaskInfo(**fields)


def _with_call(info: GraphTaskInfo, call: int) -> GraphTaskInfo:
    fields = {name: getattr(info, name) for name in GraphTaskInfo.__slots__}
    fields["call"] = call
    return GraphTaskInfo(**fields)


def _bare_info(event: Event) -> GraphTaskInfo:
    """A graph task whose graph could not be read: its call, roots and options, no nodes."""
    data = event.data
    return GraphTaskInfo(
        id=event.graph_task,
        parent=data.get("parent_graph_task") or None,
        reentrant_depth=data.get("reentrant_depth", 0),
        keep_graph=bool(data.get("keep_graph")),
        create_graph=bool(data.get("create_graph")),
        root=event.node_id if event.node_id is not None else -1,
        roots=tuple(tuple(r) for r in data.get("roots", ())),
        outputs=tuple(tuple(o) for o in data.get("outputs", ())),
        thread=event.thread,
        first_event=0,
    )


def _with_cut(info: GraphTaskInfo, line: str) -> GraphTaskInfo:
    fields = {name: getattr(info, name) for name in GraphTaskInfo.__slots__}
    fields["cut"] = line
    return GraphTaskInfo(**fields)


def _shift_first_events(trace: Trace, position: int) -> None:
    for gid, info in list(trace.graph_tasks.items()):
        if info.first_event >= position:
            trace.graph_tasks[gid] = _with_first_event(info, info.first_event + 1)


# -- values tiers (Note [Values tiers] in autograd_viz/trace/records.py) ---------------

_LEAF_NODES = frozenset({"AccumulateGrad", "torch::autograd::AccumulateGrad"})
_TIERS: dict[str, frozenset[str] | None] = {
    "all": None,
    # The events whose summaries a tier keeps, besides anomaly (kept at every tier).
    "leaves": frozenset({"capture", "graph_task_end", "graph_task_start"}),
    "none": frozenset(),
}


def _tier_keeps(kinds: frozenset[str], event: Event) -> bool:
    """Whether a recorder at a tier below ``all`` keeps ``event``'s summaries."""
    kind = event.kind
    if kind == "anomaly":
        return True
    if not kinds:
        return False
    if kind in kinds:
        return True
    # A leaf's gradient: AccumulateGrad's events (its accumulate, its hooks) and .grad.
    return event.node_name in _LEAF_NODES or (
        kind == "accumulate" and event.data.get("target") == "leaf"
    )


def _without_values(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with every summary in it (alone or in a sequence) as ``None``."""
    plain: dict[str, Any] = {}
    for key, value in data.items():
        kind = type(value)
        if kind in _KEPT_AS_IS:
            plain[key] = value
        elif kind is list or kind is tuple:
            plain[key] = tuple([None if _is_summary(v) else v for v in value])
        elif _is_summary(value):
            plain[key] = None
        else:
            plain[key] = value
    return plain


def _is_summary(value: Any) -> bool:
    return isinstance(value, LazySummary | TensorSummary)


# -- turning live objects into plain values -------------------------------------------

_DROPPED = {
    "graph_task_start": ("graph_root", "graph_snapshot", "dependencies", "needed", "captures")
}


def _plain(value: Any, max_values: int) -> Any:
    if isinstance(value, LazySummary):
        return resolve(value, max_values)
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
    dropped = _DROPPED.get(event.kind)
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
                    resolve(v, max_values) if isinstance(v, LazySummary) else _plain(v, max_values)
                    for v in value
                ]
            )
        elif isinstance(value, LazySummary):
            plain[key] = resolve(value, max_values)
        else:
            plain[key] = _plain(value, max_values)
    return plain
