"""The records of a trace, and the :class:`TraceRecord` that holds them.

A trace is plain data: one :class:`GraphTaskInfo` per backward call (the
graph as it was when the call started, one :class:`NodeInfo` per node) and
one :class:`TraceEvent` per engine step, its tensors as
:class:`~autograd_viz.trace.summary.TensorSummary` values. Sources
(:mod:`autograd_viz.sources`) fill it; views read it and never need to know
which source it came from.

A trace is saved as JSON Lines (``docs/trace-format.md``) and loaded back
with full validation: :meth:`Trace.load` raises :class:`TraceFormatError`
naming the line and the problem for anything it does not understand.

:class:`TraceRecord` is the data alone: the file (:mod:`~autograd_viz.trace.file`,
:mod:`~autograd_viz.trace.writing`) and replay (:mod:`~autograd_viz.trace.replay`)
read and build it and import nothing above this module. The public
:class:`~autograd_viz.trace.document.Trace` adds loading, saving and replay on top
(Note [The trace and its record]).
"""

from __future__ import annotations

import gc
import html
import itertools
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, Self

from autograd_viz.trace.summary import TensorSummary, slot_twin
from autograd_viz.trace.text import count_words
from autograd_viz.version import __version__

FORMAT = "autograd-viz-trace"
"""The ``format`` field of every trace file's header."""
SCHEMA_VERSION = 14
"""The schema version this code writes."""
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)
"""The schema versions this code reads (2 added forward anomaly events; 3 the sources of
events: the header's ``sources``, ``graph_task_start``'s ``source``, any event's
``derived`` and the ``derived_mismatch`` kind; 4 the PyTorch fields of ``anomaly``:
``aten_op``, ``module``, ``input_ops`` and ``saved``; 5 the modules: a node's ``scope``
and a graph task's ``modules``; 6 the header's ``process``: rank, world size, host,
launcher and the clock that lines up several processes' traces, and a graph task's
``call``: its backward call's index in the run; 7 the ``comm`` kind: a distributed job's
collectives, such as DDP's bucket allreduces; 8 a graph task's ``cut``; 9 the header's
``values``: the tier of values a trace was recorded at; 10 the header's ``observe``:
``calls`` when each call's nodes were derived after it, not observed; 11 a leaf's
``aliases``: the other names of a parameter two modules share; 13 the ``grads`` kind: why
leaves got no gradient in a call, and each module's gradient norm; 14 the ``held_inputs``
and ``held_names`` of a forward ``anomaly``: parameters that held the value before the op)."""

DEFAULT_MAX_VALUES = 16
"""Tensors with at most this many elements keep their values in summaries by default."""

VALUES_TIERS = ("none", "leaves", "all")
"""What a recording keeps of the gradients (Note [Values tiers]): ``all`` (the default)
summarizes every tensor in every event, and the saved tensors; ``leaves`` only the
gradients of leaves (``AccumulateGrad``'s, a leaf's ``.grad`` before and after the call,
``grad()``'s results); ``none`` none."""

# Note [Values tiers]
# ~~~~~~~~~~~~~~~~~~~
# A summary (shape, dtype, min, max, mean, norm, NaN and Inf counts) costs a few
# reductions per tensor, several tensors per node: on small tensors it is most of
# what recording costs. A recording at a lower tier keeps the order, threads,
# times and graph of every call, and the bookkeeping derived from them, with
# ``None`` where a summary would be. The header's ``values`` says which tier a
# trace was recorded at (left out for ``all``, as in every trace before version
# 9), so that a view says "values not recorded" rather than showing a blank,
# and the NaN report, which reads values, says it needs them. Anomaly events
# (the NaN checks' findings) are kept whole at every tier: they are rare, and
# they are what the checks report.


class TraceFormatError(ValueError):
    """A trace file is malformed, truncated, of an unknown version or not a trace at all."""


@dataclass(frozen=True, slots=True)
class LeafInfo:
    """The tensor behind an ``AccumulateGrad`` node."""

    name: str | None
    """The tensor's ``name``, if it was given one."""
    shape: tuple[int, ...]
    """The tensor's shape."""
    dtype: str
    """NumPy's name for its dtype."""
    device: str
    """Where it lives."""
    grad: TensorSummary | None = None
    """Its ``.grad`` before this backward call, if it had one."""
    aliases: tuple[str, ...] = ()
    """Its other names: a parameter two modules share (GPT-2's ``lm_head.weight``, named
    ``transformer.wte.weight``) by the names after the first ``named_parameters(
    remove_duplicate=False)`` gives it."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One backward node as it was when a graph task started."""

    id: int
    """The node's stable id (``Event.node_id``)."""
    name: str
    """``MulBackward0``, ``AccumulateGrad``, ..."""
    sequence_nr: int
    """The node's sequence number."""
    topological_nr: int
    """The node's topological number (longest path to a leaf)."""
    device: str
    """The device its input buffer, and so its task, lives on."""
    next_edges: tuple[tuple[int, int] | None, ...]
    """``(node_id, input_nr)`` per output; ``None`` where no gradient flows."""
    inputs: tuple[tuple[tuple[int, ...], str, str], ...]
    """``(shape, dtype, device)`` of each gradient the node takes (its input slots)."""
    dependencies: int
    """How many edges of this graph task arrive at the node."""
    status: str
    """``"needed"``, or ``"pruned"`` when exec_info or topological pruning skips it."""
    captures: tuple[tuple[int, int], ...] = ()
    """``(input slot, output index)`` captured here for ``grad()``."""
    saved: tuple[TensorSummary | None, ...] = ()
    """Saved tensors; ``None`` for one already released, an empty PyTorch slot, or one a
    saved-tensors hook owns (not read, so that the hook does not run)."""
    hooks: tuple[tuple[str, int], ...] = ()
    """``(kind, count)`` of registered hooks: ``pre``, ``post``, ``tensor_pre``, ``retain_grad``."""
    traceback: tuple[str, ...] | None = None
    """The forward stack recorded by anomaly mode, if any."""
    leaf: LeafInfo | None = None
    """For ``AccumulateGrad``: the leaf tensor."""
    scope: tuple[tuple[str, int], ...] = ()
    """The module calls that enclosed the node's creation in the forward, outermost first:
    ``(path, call)`` each, ``path`` the module's dotted name in its model
    (``"transformer.h.3.attn"``), ``call`` which call of that module it was within this
    graph (0, 1, ...). Empty for a node made outside any module. For ``AccumulateGrad``,
    the module that owns the parameter."""


Scope = tuple[tuple[str, int], ...]
"""A node's :attr:`NodeInfo.scope`."""

_NodeInfoFields = slot_twin(NodeInfo)
_new_object = object.__new__


def new_node_info(
    node_id: int,
    name: str,
    sequence_nr: int,
    topological_nr: int,
    device: str,
    next_edges: tuple[tuple[int, int] | None, ...],
    inputs: tuple[tuple[tuple[int, ...], str, str], ...],
    dependencies: int,
    status: str,
    captures: tuple[tuple[int, int], ...],
    saved: tuple[TensorSummary | None, ...],
    hooks: tuple[tuple[str, int], ...],
    traceback: tuple[str, ...] | None,
    leaf: LeafInfo | None,
    scope: Scope = (),
) -> NodeInfo:
    """``NodeInfo(...)`` with every field given (Note [Building frozen records])."""
    info: Any = _new_object(_NodeInfoFields)
    info.id = node_id
    info.name = name
    info.sequence_nr = sequence_nr
    info.topological_nr = topological_nr
    info.device = device
    info.next_edges = next_edges
    info.inputs = inputs
    info.dependencies = dependencies
    info.status = status
    info.captures = captures
    info.saved = saved
    info.hooks = hooks
    info.traceback = traceback
    info.leaf = leaf
    info.scope = scope
    info.__class__ = NodeInfo
    return info


@dataclass(frozen=True, slots=True)
class GraphTaskInfo:
    """One backward call: its options, its roots and the graph it runs."""

    id: int
    """The graph task id (``Event.graph_task``)."""
    parent: int | None
    """The graph task whose node started this one (reentrant backward), if any."""
    reentrant_depth: int
    """0 for a call from user code, deeper for reentrant calls."""
    keep_graph: bool
    """``retain_graph``."""
    create_graph: bool
    """``create_graph``."""
    root: int
    """Id of the node the engine starts from (a ``GraphRoot`` when there are several roots)."""
    roots: tuple[tuple[int, str, int], ...]
    """``(node_id, name, input_nr)`` of each root edge."""
    outputs: tuple[tuple[int, int], ...]
    """``(node_id, input_nr)`` of each input of ``grad()``; empty for ``backward()``."""
    thread: str
    """The thread that called backward."""
    first_event: int
    """Index in :attr:`Trace.events` of its ``graph_task_start``."""
    nodes: Mapping[int, NodeInfo] = field(default_factory=dict)
    """Every node reachable from the root, by id, in discovery order from the root."""
    modules: Mapping[str, str] = field(default_factory=dict)
    """For every path in its nodes' :attr:`NodeInfo.scope`: the module's class name
    (``"transformer.h.3" -> "GPT2Block"``)."""
    call: int | None = None
    """Which backward call of the run this is, from 0 (Note [Backward calls] in
    ``engine/calls.py``), when the recorder counted calls; ``None`` for a reentrant one."""
    cut: str | None = None
    """Set when the recorder failed while recording this call (Note [Listener errors] in
    ``engine/events.py``): the one line it said, such as ``call 1: ValueError: ...``. The
    call is recorded up to the event that failed, and nothing of it after."""


_NO_DATA: Mapping[str, Any] = MappingProxyType({})


class GraphViewError(ValueError):
    """What was asked for cannot be drawn: a tensor without a backward graph, an empty
    trace, a name that names nothing."""


@dataclass(frozen=True, slots=True)
class GraphOutput:
    """A tensor whose graph is drawn before backward, drawn as a box above its node."""

    node: int
    """Id of its ``grad_fn``."""
    name: str | None
    """The name the user gave it, if any."""
    shape: tuple[int, ...]
    """Its shape."""
    dtype: str
    """Its dtype's name."""


@dataclass(frozen=True, slots=True)
class UnrunGraph:
    """A backward graph as the forward pass built it, before any backward call.

    What a source reads of tensors (our engine's, PyTorch's) for a picture of
    their graph: numbered as the engine will number it when backward starts.
    """

    nodes: tuple[NodeInfo, ...]
    """Every node, each with its dependency count."""
    outputs: tuple[GraphOutput, ...]
    """The tensors drawn, one box each."""
    modules: Mapping[str, str]
    """Class name of each module path in the nodes' scopes."""


def check_has_graph(tensors: Sequence[Any]) -> None:
    """Raise :class:`GraphViewError` for a tensor (ours or PyTorch's) without a ``grad_fn``."""
    for i, tensor in enumerate(tensors):
        if tensor.grad_fn is None:
            what = "a leaf" if tensor.requires_grad else "does not require grad"
            raise GraphViewError(
                f"tensor {i} has no grad_fn ({what}), so there is no backward graph to draw; "
                "pass a tensor computed from tensors that require grad"
            )


class TraceEvent(NamedTuple):
    """An engine event as recorded: its tensors are summaries, its data plain values.

    A named tuple (immutable, and cheap to make: a recorder makes one per event).
    """

    index: int  # type: ignore[assignment]  # the field shadows tuple.index, on purpose
    """Position in the trace (step ``index + 1`` is the state after this event)."""
    kind: str
    """One of the event kinds (``schema.EVENT_DATA``'s keys)."""
    seq: int
    """The engine's global event order."""
    t_ns: int
    """``perf_counter_ns`` at emission."""
    thread: str
    """The engine thread it happened on."""
    device: str
    """That thread's device."""
    graph_task: int
    """The graph task it belongs to."""
    node_id: int | None = None
    """The node concerned, if any."""
    node_name: str | None = None
    """Its name."""
    sequence_nr: int | None = None
    """Its sequence number."""
    topological_nr: int | None = None
    """Its topological number."""
    data: Mapping[str, Any] = _NO_DATA
    """Kind-specific fields (see ``docs/trace-format.md``)."""


@dataclass(frozen=True, slots=True)
class TraceStats:
    """What :meth:`Trace.stats` counts."""

    graph_tasks: int
    """Backward calls, reentrant ones included."""
    nodes: int
    """Node executions (``node_start`` events)."""
    events: int
    """All events."""
    duration_ns: int
    """From the first event to the last."""
    errors: int
    """Graph tasks that failed."""
    anomalies: int
    """Anomaly events (non-finite values found)."""


# Note [Rows until read]
# ~~~~~~~~~~~~~~~~~~~~~~
# A recorder hands a trace the events of a watched call as rows, plain
# tuples of an event's fields (Note [Batched events]), and the trace keeps
# them until something reads ``events``, which makes them :class:`TraceEvent`
# then, numbered by position: what is read is what was recorded, whenever it
# is read. A training loop that records every step and reads the trace at the
# end makes its events then, not inside each backward call. Each row is kept
# as two parts, its fields (ints and strings) and its data (a dict), because
# Python's cyclic collector stops following a tuple of plain values at the
# first collection that sees it, but never a tuple that holds a dict nor a
# ``TraceEvent`` (a tuple subclass): two thousand of those a call, kept until
# the trace went, made the collector's full collections of the whole process
# come sooner and take longer ("The collector's share" in
# docs/performance.md). The data of a tier without values is a dict of plain
# values, which the collector never tracks (Note [Objects a recorded call
# keeps] in ``autograd_viz/sources/pytorch/emitter.py``). One lock serves
# every trace, so a reader on another thread takes a recorder's rows whole or
# not at all; and an exception between two steps (a signal's, raised in the
# thread that holds the lock) leaves the rows and their data consistent.

_ROWS_LOCK = threading.Lock()


class TraceRecord:
    """Graph snapshots and events of one or more backward calls, in engine order:
    the data of a :class:`~autograd_viz.trace.document.Trace`, without its file
    or its replay (Note [The trace and its record])."""

    def __init__(
        self,
        header: Mapping[str, Any] | None = None,
        graph_tasks: Mapping[int, GraphTaskInfo] | None = None,
        events: list[TraceEvent] | None = None,
    ) -> None:
        self.header: dict[str, Any] = dict(header or new_header(DEFAULT_MAX_VALUES))
        """Format, schema version and recording options."""
        self.graph_tasks: dict[int, GraphTaskInfo] = dict(graph_tasks or {})
        """Every graph task, by id, in the order they started."""
        self._events: list[TraceEvent] = events if events is not None else []
        self._rows: list[tuple[Any, ...]] = []
        """Events recorded after :attr:`_events` and not read yet: each one's fields but its
        data (Note [Rows until read])."""
        self._data: list[Mapping[str, Any]] = []
        """Their data, in the same order."""
        self.lock = threading.Lock()
        """Held by whoever fills the trace (a recorder) while it changes it; see :meth:`copy`."""
        self.tail_cut = 0
        """Bytes :meth:`Trace.load` dropped from the end of a file cut short while it was
        streamed: the calls that were not finished (Note [Streamed traces])."""

    @property
    def events(self) -> list[TraceEvent]:
        """Every event, in engine order (``seq``)."""
        if self._rows:
            self._settle_rows()
        return self._events

    @events.setter
    def events(self, events: list[TraceEvent]) -> None:
        with _ROWS_LOCK:
            self._rows = []
            self._events = events
            self._data = []

    def add_rows(
        self, rows: Sequence[tuple[Any, ...]], data: Sequence[Mapping[str, Any]] | None = None
    ) -> None:
        """Append events given as rows (:class:`~engine.events.Event`'s fields), in the
        order the trace keeps them (``seq``, or a live session's arrival order), after
        every event already in; made :class:`TraceEvent` when first read (Note [Rows until
        read]). With ``data``, the rows are the fields but the data, and ``data`` each
        row's data."""
        if data is None:
            fields: Sequence[tuple[Any, ...]] = [row[:-1] for row in rows]
            data = [row[-1] for row in rows]
        else:
            fields = rows
        with _ROWS_LOCK:
            # Data first, rows last: rows are the truth, and data an exception left behind
            # them (a signal's, between two of these steps) is dropped here.
            del self._data[len(self._rows) :]
            self._data += data
            self._rows += fields

    def add_row(self, fields: tuple[Any, ...], data: Mapping[str, Any]) -> None:
        """:meth:`add_rows` for one event: its fields but its data, then its data.

        With no row waiting, the event is made at once, as a recorder of events that come
        one by one (our engine's) always made them: its writers hold the recorder's lock,
        and a reader only changes the events when rows wait.
        """
        if not self._rows:
            events = self._events
            events.append(tuple.__new__(TraceEvent, (len(events), *fields, data)))
            return
        with _ROWS_LOCK:
            del self._data[len(self._rows) :]  # as in add_rows
            self._data.append(data)
            self._rows.append(fields)

    def share_events_of(self, other: TraceRecord) -> None:
        """Hold ``other``'s events, read or not, as they are (the same lists; this one had
        none). ``other`` is left as it was, so that an exception before its owner starts it
        afresh loses nothing."""
        with _ROWS_LOCK:
            self._events, self._rows, self._data = other._events, other._rows, other._data

    def last_seq(self) -> int | None:
        """The ``seq`` of the last event, read or not (``None`` when there is none)."""
        rows = self._rows
        if rows:
            return rows[-1][1]  # a row starts with kind, seq
        events = self._events
        return events[-1].seq if events else None

    def _settle_rows(self) -> None:
        with _ROWS_LOCK:
            rows = self._rows
            if not rows:
                return  # another thread read them first
            events = self._events
            # An exception between the steps below (a signal's) leaves the rows made, or
            # not, and still there: made already when the last event is their last row
            # (each has its own seq; with arrival_order, seq need not grow).
            if not events or events[-1][1:-1] != rows[-1]:
                new = tuple.__new__
                made = zip(itertools.count(len(events)), rows, self._data, strict=False)
                events.extend([new(TraceEvent, (i, *f, d)) for i, f, d in made])
            self._rows = []
            self._data = []

    def __len__(self) -> int:
        return len(self._events) + len(self._rows)

    def __eq__(self, other: object) -> bool:
        """Same header, graph tasks and events; a NaN equals a NaN (see Note [NaN in traces])."""
        if not isinstance(other, TraceRecord):
            return NotImplemented
        mine = (self.header, self.graph_tasks, self.events)
        theirs = (other.header, other.graph_tasks, other.events)
        return mine == theirs or _same(mine, theirs)

    __hash__ = None  # type: ignore[assignment]  # mutable while recording

    def __repr__(self) -> str:
        return f"<Trace: {self.summary()}>"

    def summary(self) -> str:
        """One line a reader wants first: calls, nodes run, events, errors and anomalies."""
        stats = self.stats()
        calls = sum(1 for info in self.graph_tasks.values() if info.parent is None)
        words = [
            count_words(calls, "backward call"),
            count_words(stats.nodes, "node") + " run",
            count_words(stats.events, "event"),
        ]
        if stats.graph_tasks > calls:
            words.insert(1, count_words(stats.graph_tasks - calls, "reentrant call"))
        words.append(count_words(stats.errors, "error") if stats.errors else "no errors")
        if stats.anomalies:
            words.append(count_words(stats.anomalies, "anomaly", "anomalies"))
        return ", ".join(words)

    def _repr_html_(self) -> str:
        """A notebook shows the summary and each backward call's roots, as text (names are data)."""
        rows = []
        for info in list(self.graph_tasks.values())[:_HTML_CALLS]:
            roots = ", ".join(name for _, name, _ in info.roots)
            call = "reentrant" if info.call is None else f"call {info.call}"
            cut = f" (cut: {info.cut})" if info.cut else ""
            rows.append(
                f"<tr><td>{info.id}</td><td>{html.escape(call)}</td><td>{len(info.nodes):,}</td>"
                f"<td>{html.escape(roots + cut)}</td></tr>"
            )
        more = len(self.graph_tasks) - len(rows)
        if more > 0:
            rows.append(f"<tr><td colspan=4>... and {more:,} more graph tasks</td></tr>")
        table = (
            "<table><tr><th>graph task</th><th>call</th><th>nodes</th><th>roots</th></tr>"
            + "".join(rows)
            + "</table>"
            if rows
            else ""
        )
        return f"<div><b>Trace</b>: {html.escape(self.summary())}{table}</div>"

    def copy(self) -> Self:
        """The trace as it is now, unchanged by a recorder that goes on filling this one.

        Taken under :attr:`lock`, so it never holds half of a change: a
        graph task without its start event, or an event twice.
        """
        with self.lock:
            header = {k: list(v) if isinstance(v, list) else v for k, v in self.header.items()}
            return type(self)(header, self.graph_tasks, list(self.events))

    def stats(self) -> TraceStats:
        """Counts for a one-line summary."""
        kinds: dict[str, int] = {}
        errors = 0
        for event in self.events:
            kinds[event.kind] = kinds.get(event.kind, 0) + 1
            if event.kind == "graph_task_end" and event.data["status"] == "error":
                errors += 1
        duration = self.events[-1].t_ns - self.events[0].t_ns if self.events else 0
        return TraceStats(
            graph_tasks=len(self.graph_tasks),
            nodes=kinds.get("node_start", 0),
            events=len(self.events),
            duration_ns=duration,
            errors=errors,
            anomalies=kinds.get("anomaly", 0),
        )

    def events_of(self, graph_task: int) -> Iterator[TraceEvent]:
        """The events of one graph task, in order."""
        return (e for e in self.events if e.graph_task == graph_task)


# Note [NaN in traces]
# ~~~~~~~~~~~~~~~~~~~~
# A trace records NaN gradients as float NaN, and NaN != NaN. Containers
# compare items by identity first, so the same NaN object compares equal in a
# tuple but two NaNs read from different places do not (and dataclasses
# compare fields with == since Python 3.13). Equal traces must stay equal
# after a save and load, so Trace.__eq__ falls back to a walk where NaN
# equals NaN.


def _same(a: Any, b: Any) -> bool:
    """Deep equality in which NaN equals NaN (see Note [NaN in traces])."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if type(a) is not type(b):
        return bool(a == b)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    slots = getattr(type(a), "__dataclass_fields__", None)
    if slots is not None:
        return all(_same(getattr(a, name), getattr(b, name)) for name in slots)
    return bool(a == b)


# Note [A pause of the collector is counted]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The TUI builds rows, pictures and the replay's index in threads, each in a
# pause, and their pauses overlap. The collector is one switch for the whole
# process: a pause that restored the setting it saw on entry would switch the
# collector back on while another thread's pause still wants it off, or leave
# it off for good when two pauses end in the other order. So pauses are
# counted under a lock: the first to begin saves the setting and switches the
# collector off, the last to end restores it.

_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many acyclic objects.

    Loading or indexing a trace allocates millions of small objects, none in a
    reference cycle; each generation-2 collection the allocations trigger would
    scan all of them again (a fifth of a load's time). Pauses may nest and
    overlap across threads: the setting before the first is restored when the
    last ends (Note [A pause of the collector is counted]).
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


def new_header(max_values: int, values: str = "all", observe: str = "nodes") -> dict[str, Any]:
    """The header of a new trace (``values``: its tier, Note [Values tiers]; ``observe``:
    what was watched, Note [Observation levels])."""
    header: dict[str, Any] = {
        "format": FORMAT,
        "version": SCHEMA_VERSION,
        "engine": __version__,
        "max_values": max_values,
        "sources": [],
    }
    if values != "all":
        header["values"] = values
    if observe != "nodes":
        header["observe"] = observe
    return header


def check_values(values: object) -> str:
    """``values`` if it names a tier (:data:`VALUES_TIERS`).

    Raises:
        ValueError: it does not.
    """
    return _one_of("values", values, VALUES_TIERS)


# Note [Observation levels]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# ``nodes`` (the default): every node of a recorded backward call is watched as
# it runs (hooks), so its order, thread and times are observed. ``calls``: no
# node is watched; each recorded call keeps its roots, and after the call its
# graph is walked and PyTorch's scheduler run over it (engine/scheduler.py) to
# derive the nodes' order, dependencies and buffers: every node event is then
# ``derived``, its time is the call's end, and only the call's start and end are
# observed. No values are kept at this level. A flight recorder at this level
# holds its calls and derives only those it writes (Note [Calls derived later] in
# autograd_viz/sources/pytorch/call_level.py). Our engine's calls are recorded as
# at ``nodes``: the engine emits every step while somebody listens.

OBSERVE_LEVELS = ("nodes", "calls")
"""What a recording watches (Note [Observation levels])."""

DERIVED_ORDER = "order derived, not observed (recorded with --observe calls)"
"""What the views say of a trace recorded at the call level."""


def check_observe(observe: object) -> str:
    """``observe`` if it names a level (:data:`OBSERVE_LEVELS`).

    Raises:
        ValueError: it does not.
    """
    return _one_of("observe", observe, OBSERVE_LEVELS)


def _one_of(name: str, value: object, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``; else a ValueError naming argument ``name``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"{name} must be one of {', '.join(repr(v) for v in choices)}, got {value!r}"
        )
    return value


def observed(header: Mapping[str, Any]) -> str:
    """What a trace's recording watched: its header's ``observe``, ``nodes`` when left out."""
    level = header.get("observe", "nodes")
    return level if level in OBSERVE_LEVELS else "nodes"


def values_recorded(header: Mapping[str, Any]) -> str:
    """The tier a trace was recorded at: its header's ``values``, ``all`` when left out."""
    values = header.get("values", "all")
    return values if isinstance(values, str) else "all"


_HTML_CALLS = 20
"""Graph tasks a notebook's table lists before saying how many more there are."""
