"""Recording engine events into a :class:`Trace`, and trace files.

A :class:`Recorder` is an engine event listener. At every ``graph_task_start``
it snapshots the graph reachable from the roots (a :class:`GraphTaskInfo`
with one :class:`NodeInfo` per node); every event becomes a
:class:`TraceEvent` whose tensors are :class:`~engine.events.TensorSummary`
values computed while the engine still holds the arrays.

A trace is saved as JSON Lines (``docs/trace-format.md``) and loaded back
with full validation: :meth:`Trace.load` raises :class:`TraceFormatError`
naming the line and the problem for anything it does not understand.
"""

from __future__ import annotations

import bisect
import gc
import math
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

import engine
from engine import events
from engine.events import Event, LazySummary, TensorSummary

if TYPE_CHECKING:
    from autograd_viz.replay import ExecutionState, Replayer

FORMAT = "autograd-viz-trace"
"""The ``format`` field of every trace file's header."""
SCHEMA_VERSION = 2
"""The schema version this code writes."""
READABLE_VERSIONS = (1, 2)
"""The schema versions this code reads (version 2 added forward anomaly events)."""

DEFAULT_MAX_VALUES = 16
"""Tensors with at most this many elements keep their values in summaries by default."""


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
    """Saved tensors; ``None`` for one already released."""
    hooks: tuple[tuple[str, int], ...] = ()
    """``(kind, count)`` of registered hooks: ``pre``, ``post``, ``tensor_pre``, ``retain_grad``."""
    traceback: tuple[str, ...] | None = None
    """The forward stack recorded by anomaly mode, if any."""
    leaf: LeafInfo | None = None
    """For ``AccumulateGrad``: the leaf tensor."""


_NodeInfoFields = events.slot_twin(NodeInfo)
_new_object = object.__new__


def _new_node_info(
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


_NO_DATA: Mapping[str, Any] = MappingProxyType({})


class TraceEvent(NamedTuple):
    """An engine event as recorded: its tensors are summaries, its data plain values.

    A named tuple (immutable, and cheap to make: a recorder makes one per event).
    """

    index: int  # type: ignore[assignment]  # the field shadows tuple.index, on purpose
    """Position in the trace (step ``index + 1`` is the state after this event)."""
    kind: str
    """One of :data:`engine.events.EVENT_KINDS`."""
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


class Trace:
    """Graph snapshots and events of one or more backward calls, in engine order.

    Build one with :func:`record` or a :class:`Recorder`, or load one with
    :meth:`load`. ``trace.state_at(k)`` is the engine's state after ``k``
    events (see :mod:`autograd_viz.replay`).
    """

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
        self.events: list[TraceEvent] = events if events is not None else []
        """Every event, in engine order (``seq``)."""
        self._replayer: Replayer | None = None
        self._replayed_len = -1

    def __len__(self) -> int:
        return len(self.events)

    def __eq__(self, other: object) -> bool:
        """Same header, graph tasks and events; a NaN equals a NaN (see Note [NaN in traces])."""
        if not isinstance(other, Trace):
            return NotImplemented
        mine = (self.header, self.graph_tasks, self.events)
        theirs = (other.header, other.graph_tasks, other.events)
        return mine == theirs or _same(mine, theirs)

    __hash__ = None  # type: ignore[assignment]  # mutable while recording

    def __repr__(self) -> str:
        return f"<Trace: {len(self.graph_tasks)} graph tasks, {len(self.events)} events>"

    def state_at(self, step: int) -> ExecutionState:
        """The engine's state after the first ``step`` events (0 is before any).

        Raises:
            IndexError: ``step`` is outside ``0 .. len(trace)``.
        """
        from autograd_viz.replay import Replayer

        if self._replayer is None or self._replayed_len != len(self.events):
            if self._replayer is None:
                self._replayer = Replayer(self)
            else:
                self._replayer.extend()
            self._replayed_len = len(self.events)
        return self._replayer.state_at(step)

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

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the trace as JSON Lines (see ``docs/trace-format.md``)."""
        from autograd_viz.trace_file import save

        save(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Trace:
        """Read and validate a trace file.

        Raises:
            TraceFormatError: the file is not a trace this version understands;
                the message names the line and what was wrong.
            OSError: the file cannot be read.
        """
        from autograd_viz.trace_file import load

        return load(path)


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


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many acyclic objects.

    Loading or indexing a trace allocates millions of small objects, none in a
    reference cycle; each generation-2 collection the allocations trigger would
    scan all of them again (a fifth of a load's time). The previous setting is
    restored afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def new_header(max_values: int) -> dict[str, Any]:
    """The header of a new trace."""
    return {
        "format": FORMAT,
        "version": SCHEMA_VERSION,
        "engine": engine.__version__,
        "max_values": max_values,
    }


# -- recording -------------------------------------------------------------------------


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
            info = snapshot(event, self.max_values)
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
    """Record every backward call made inside the ``with`` block.

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
    with events.listen(recorder):
        yield recorder.trace


# -- turning live objects into plain values -------------------------------------------

_DROPPED = {"graph_task_start": ("graph_root", "dependencies", "needed", "captures")}


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


def snapshot(event: Event, max_values: int) -> GraphTaskInfo:
    """The graph of a ``graph_task_start`` event, walked from its root (iteratively)."""
    data = event.data
    root = data["graph_root"]()
    dependencies: Mapping[int, int] = data["dependencies"]
    needed = None if data["needed"] is None else set(data["needed"])
    captures: dict[int, list[tuple[int, int]]] = {}
    for node_id, slot, output_index in data["captures"] or ():
        captures.setdefault(node_id, []).append((slot, output_index))
    nodes: dict[int, NodeInfo] = {}
    for node in walk_graph([] if root is None else [root]):
        in_task = node is root or node._id in dependencies
        is_needed = in_task and (needed is None or node._id in needed)
        nodes[node._id] = node_info(
            node,
            dependencies.get(node._id, 0),
            "needed" if is_needed else "pruned",
            tuple(captures.get(node._id, ())),
            max_values,
        )
    return GraphTaskInfo(
        id=event.graph_task,
        parent=data["parent_graph_task"] or None,
        reentrant_depth=data["reentrant_depth"],
        keep_graph=data["keep_graph"],
        create_graph=data["create_graph"],
        root=event.node_id if event.node_id is not None else -1,
        roots=tuple(tuple(r) for r in data["roots"]),
        outputs=tuple(tuple(o) for o in data["outputs"]),
        thread=event.thread,
        first_event=0,
        nodes=nodes,
    )


def walk_graph(roots: Iterable[engine.Node]) -> Iterator[engine.Node]:
    """Every node reachable from ``roots``, once each, in depth-first discovery order.

    Iterative, so a million-node chain does not reach the recursion limit.
    """
    stack = list(reversed(list(roots)))
    seen = {node._id for node in stack}
    while stack:
        node = stack.pop()
        yield node
        for edge in reversed(node._next_edges):
            if edge is not None and edge.function._id not in seen:
                seen.add(edge.function._id)
                stack.append(edge.function)


def node_info(
    node: engine.Node,
    dependencies: int,
    status: str,
    captures: tuple[tuple[int, int], ...],
    max_values: int,
) -> NodeInfo:
    """What a trace keeps of ``node``: names, numbers, edges, saved tensors, hooks, leaf."""
    metadata = node._input_metadata
    device = metadata[0][2]._str if metadata else "cpu"
    saved = (
        tuple(
            None if s.data is None else events.summarize(s.data, str(s._device), max_values)
            for s in node._saved
        )
        if node._saved
        else ()
    )
    hooks = []
    if node._pre_hooks:
        hooks.append(("pre", len(node._pre_hooks)))
    if node._post_hooks:
        hooks.append(("post", len(node._post_hooks)))
    tensor_hooks = (
        sum(len(node.tensor_pre_hooks(i) or ()) for i in range(node.num_inputs))
        if node.has_tensor_hooks()
        else 0
    )
    if tensor_hooks:
        hooks.append(("tensor_pre", tensor_hooks))
    if node._retains_grad_hooks:
        hooks.append(("retain_grad", len(node._retains_grad_hooks)))
    stack = node._metadata.get("traceback_") if node._metadata else None
    leaf = None
    variable = getattr(node, "variable", None)
    if variable is not None:
        grad = variable._grad
        leaf = LeafInfo(
            name=variable.name,
            shape=tuple(variable.shape),
            dtype=str(variable.data.dtype),
            device=str(variable.device),
            grad=None
            if grad is None
            else events.summarize(grad.data, str(grad.device), max_values),
        )
    return _new_node_info(  # NodeInfo's fields in order
        node._id,
        node.name(),
        node.sequence_nr,
        node.topological_nr,
        device,
        tuple([None if e is None else (e.function._id, e.input_nr) for e in node._next_edges]),
        tuple([_slot_info(m) for m in metadata]),
        dependencies,
        status,
        captures,
        saved,
        tuple(hooks),
        None if stack is None else tuple(stack),
        leaf,
    )


_SLOT_INFOS: dict[Any, tuple[tuple[int, ...], str, str]] = {}


def _slot_info(metadata: Any) -> tuple[tuple[int, ...], str, str]:
    """``(shape, dtype, device)`` of an input slot; equal metadata share one tuple."""
    info = _SLOT_INFOS.get(metadata)
    if info is None:
        shape, dtype, device = metadata
        info = (tuple(shape), _dtype_name(dtype), str(device))
        if len(_SLOT_INFOS) >= 4096:
            _SLOT_INFOS.clear()
        _SLOT_INFOS[metadata] = info
    return info


_DTYPE_NAMES: dict[Any, str] = {}


def _dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        import numpy as np

        try:
            name = str(np.dtype(dtype))
        except TypeError:
            name = str(dtype)
        _DTYPE_NAMES[dtype] = name
    return name
