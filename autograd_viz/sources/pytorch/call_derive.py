"""Deriving a call-level backward call: its graph walked, PyTorch's scheduler run over it.

A backward call seen at its ends (a :class:`CallSeen`, which
:mod:`~autograd_viz.sources.pytorch.call_level` makes) is derived when it has
returned, or later: its events go to
every listener at once (:class:`ToListeners`), or to one recorder when a
flight recorder writes the calls it held (:class:`ToRecorder`, Note [Calls
derived later] in ``call_level.py``); a reentrant call is derived inside the
node that made it (Note [Reentrant calls at the call level], there too).
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import torch

from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch.bookkeeping import Bookkeeping
from autograd_viz.sources.pytorch.emitter import Emitter, nones
from autograd_viz.sources.pytorch.graph import GraphPlan, plan_graph_task, release
from autograd_viz.sources.pytorch.module_calls import thread_modules
from engine.events import HUB, Event, thread_name
from engine.graph_task import new_graph_task_id

if TYPE_CHECKING:
    from autograd_viz.sources.pytorch.leaf_names import LeafNamer


class CallSeen:
    """One backward call seen at its ends: what deriving its nodes needs, nothing more.

    Made when the call starts, completed when it ends; derived then or later
    (Note [Calls derived later] in ``call_level.py``).
    """

    __slots__ = (
        "accumulate_grad",
        "captured",
        "children",
        "create_graph",
        "depth",
        "end",
        "failed",
        "graph_task",
        "keep_graph",
        "modules",
        "namer",
        "nesting",
        "parent",
        "roots",
        "running",
        "start",
        "targets",
        "thread",
    )

    def __init__(
        self,
        roots: Sequence[tuple[Any, int]],
        targets: Sequence[Any],
        bound: dict[str, Any],
        namer: LeafNamer,
        parent: CallSeen | None,
    ) -> None:
        self.roots = list(roots)
        """``(grad_fn, input_nr)`` of each root (they hold the graph's nodes)."""
        self.targets = list(targets)
        """Each ``inputs=`` / ``grad()`` target, as the node level plans it."""
        self.accumulate_grad = bool(bound["accumulate_grad"])
        self.keep_graph = bool(bound.get("keep_graph"))
        self.create_graph = bool(bound.get("create_graph"))
        namer.module_variables()  # the calling code's names, read now: no frame is kept
        self.namer = namer
        self.modules = thread_modules()
        """The calling thread's module calls (Note [Module calls own sequence ranges])."""
        self.graph_task = new_graph_task_id()
        """Our id of its graph task, taken when it starts: ids follow the calls' order."""
        self.parent = parent
        """The call-level call this one runs inside (a reentrant backward), if any."""
        if parent is not None:
            self.depth: int = parent.depth + 1
        else:  # a call from inside an unwatched graph task is reentrant too
            self.depth = 0 if torch._C._current_graph_task_id() == -1 else 1
        self.nesting = 0
        """How many call-level calls this thread runs around it."""
        self.running: Any = torch._C._current_autograd_node() if parent is not None else None
        """The outer call's node that started it (Note [Reentrant calls at the call level]
        in ``call_level.py``)."""
        self.thread = thread_name()
        self.start = _clock()
        self.end = self.start
        self.captured = 0
        """How many ``grad()`` results it returned."""
        self.failed: tuple[str, str] | None = None
        """What it raised: the exception's type name and message."""
        self.children: list[CallSeen] = []
        """The reentrant calls its nodes made, in order."""

    def ended(self, result: Any, failed: BaseException | None) -> None:
        """The call returned ``result`` or raised ``failed``: note it, keep neither."""
        self.end = _clock()
        self.captured = len(result) if isinstance(result, tuple | list) else 0
        if failed is not None:
            self.failed = (type(failed).__name__, str(failed))

    @property
    def source(self) -> str:
        """The ``source`` its ``graph_task_start`` names."""
        return f"torch {torch.__version__}"

    def emit_into(self, recorder: Any) -> None:
        """Derive this call and hand its events to ``recorder`` (a Recorder), on this thread.

        A call whose graph cannot be read, or whose derivation fails, is left
        out with one warning; the other calls go on.
        """
        emit_call(self, ToRecorder(recorder), [])


class ToListeners:
    """Derived events to every listener of the hub, now."""

    def start(self, call: CallSeen, node: Any, data: dict[str, Any]) -> None:
        _to_listeners("graph_task_start", call.start, call.thread, call.graph_task, node, data)

    def emitter(self, call: CallSeen) -> Emitter:
        return _AtCallEnd(call)


class _AtCallEnd(Emitter):
    """An :class:`Emitter` whose every event, in rows or one by one, has the call's end time
    and thread: the nodes' own times were not observed, and the derivation's own time is
    no part of the call (``run --print`` says how long each call took)."""

    __slots__ = ()

    def __init__(self, call: CallSeen) -> None:
        super().__init__(call.graph_task)
        self.thread = call.thread
        self.clock = itertools.repeat(call.end).__next__

    def __call__(self, kind: str, node: Any, data: dict[str, Any]) -> None:
        hub = HUB
        if hub.active and self.max_values is not None and hub.listeners is not self.listeners:
            self.flush()  # the listeners changed: one by one from now on, as Emitter does
            self.max_values = None
        if self.max_values is not None or not hub.active:
            super().__call__(kind, node, data)  # rows take self.clock
            return
        _to_listeners(kind, self.clock(), self.thread, self.graph_task, node, data)


def _to_listeners(
    kind: str, t_ns: int, thread: str, graph_task: int, node: Any, data: dict[str, Any]
) -> None:
    """One derived event, built as the engine builds its own, to every listener of the hub."""
    if node is None:
        fields: tuple[Any, Any, Any, Any] = (None, None, None, None)
    else:
        fields = (node._id, node.name(), node.sequence_nr, node.topological_nr)
    event = Event(
        kind, next(HUB.seq), t_ns, thread, "cpu", graph_task, *fields, MappingProxyType(data)
    )
    for listener in HUB.listeners:
        try:
            listener(event)
        except BaseException as exc:  # noqa: BLE001 - listener_failed re-raises what it must
            HUB.listener_failed(listener, exc, graph_task)


class ToRecorder(ToListeners):
    """Derived events to one recorder, whoever listens now (Note [Calls derived later])."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder

    def start(self, call: CallSeen, node: Any, data: dict[str, Any]) -> None:
        fields = (node._id, node.name(), node.sequence_nr, node.topological_nr)
        self.recorder(
            Event(
                "graph_task_start",
                next(HUB.seq),
                call.start,
                call.thread,
                "cpu",
                call.graph_task,
                *fields,
                MappingProxyType(data),
            )
        )

    def emitter(self, call: CallSeen) -> Emitter:
        return _Rows(call, self.recorder)


class _Rows(Emitter):
    """An :class:`Emitter` that builds every row for one recorder, listening or not."""

    __slots__ = ("recorder",)

    def __init__(self, call: CallSeen, recorder: Any) -> None:
        super().__init__(call.graph_task)
        self.recorder = recorder
        self.listeners = (recorder,)
        self.max_values = recorder.max_values
        self.keep_leaves = self.keep_all = False
        self.thread = call.thread
        self.clock = itertools.repeat(call.end).__next__

    def __call__(self, kind: str, node: Any, data: dict[str, Any]) -> None:
        if node is None:
            fields: tuple[Any, Any, Any, Any] = (None, None, None, None)
        else:
            fields = (node._id, node._name, node.sequence_nr, node.topological_nr)
        task, thread = self.graph_task, self.thread
        self.rows.append((kind, next(HUB.seq), self.clock(), thread, "cpu", task, *fields))
        self.data.append(data)

    def flush(self) -> None:
        rows, data = self.rows, self.data
        if rows:
            self.rows, self.data = [], []
            self.recorder.take_events(rows, data)


def emit_call(call: CallSeen, out: ToListeners, queue: list[Any]) -> None:
    """Walk ``call``'s graph and emit it: its start, its nodes (derived), its end.

    ``queue`` is the model of the thread's ready queue, shared with the
    reentrant calls derived inside this one, as PyTorch shares its own.
    """
    try:
        plan = plan_graph_task(
            call.roots,
            call.targets,
            call.accumulate_grad,
            call.namer,
            call.modules,
            reuse=True,  # Note [Plans made again] in graph.py
        )
    except Exception as exc:  # noqa: BLE001 - never break the user's backward for a view
        warn_once(f"autograd-viz: cannot read this backward graph ({exc!r}); not recording it")
        return
    try:
        _derive(call, plan, out, queue)
    except Exception as exc:
        if getattr(exc, "_engine_propagate", False):
            raise
        warn_once(f"autograd-viz: stopped deriving a backward call after {exc!r}")
    finally:
        release(plan)


def _derive(call: CallSeen, plan: GraphPlan, out: ToListeners, queue: list[Any]) -> None:
    """Emit the call: its start (observed time), its nodes (derived), its end."""
    gid, depth = call.graph_task, call.depth
    parent = call.parent.graph_task if call.parent is not None else None

    def snapshot(max_values: int | None, values: str = "none") -> Any:
        # The saved tensors are gone once the call has returned: no tensor is read.
        return plan.snapshot(
            gid, parent, depth, call.keep_graph, call.create_graph, call.thread, None
        )

    out.start(
        call,
        plan.root,
        {
            "graph_snapshot": snapshot,
            "source": call.source,
            "roots": [(n._id, n.name(), nr) for n, nr in plan.roots],
            "root_grads": (None,) * len(plan.roots),
            "outputs": [(n._id, nr) for n, nr in plan.outputs],
            "keep_graph": call.keep_graph,
            "create_graph": call.create_graph,
            "reentrant_depth": depth,
            "parent_graph_task": parent or 0,
            "dependencies": {n._id: c for n, c in plan.dependencies.items()},
            "needed": sorted(n._id for n in plan.needed) if plan.pruned else None,
            "captures": sorted(
                (n._id, slot, index) for n, caps in plan.captures.items() for slot, index in caps
            )
            if plan.pruned
            else None,
            "derived": True,
        },
    )
    emit = out.emitter(call)
    if depth:
        emit(
            "reentrant_enter",
            None,
            {
                "parent_graph_task": parent,
                "depth": depth,
                "current_depth": call.nesting,
                "on_pool": False,
            },
        )
    derived = Bookkeeping(plan, gid, depth, emit, copies=False, queue=queue)
    children = list(call.children)
    try:
        if call.failed is None:
            _replay(plan, derived, emit, children, out, queue)
            ending: dict[str, Any] = {"status": "ok", "exc_type": None, "message": None}
        else:  # which node failed was not watched: the call's end says why, no node does
            exc_type, message = call.failed
            ending = {"status": "error", "exc_type": exc_type, "message": message}
        for child in children:  # made by a node the replay did not meet
            emit.flush()
            emit_call(child, out, queue)
        emit("graph_task_end", None, {**ending, "captured": (None,) * call.captured})
        if depth:
            emit(
                "reentrant_exit",
                None,
                {"parent_graph_task": parent, "depth": depth, "ok": call.failed is None},
            )
        emit.flush()
    finally:
        derived.release()


def _replay(
    plan: GraphPlan,
    derived: Bookkeeping,
    emit: Emitter,
    children: list[CallSeen],
    out: ToListeners,
    queue: list[Any],
) -> None:
    """Pop the model ready queue to its end, as PyTorch's engine popped it during the call.

    A reentrant call is emitted inside the node that made it; it is taken
    off ``children``.
    """
    derived.push(plan.root, "root")
    while queue and queue[0].task[0] is derived:
        node = heapq.heappop(queue).task[1]
        if not derived.runs(node):
            derived.run_unseen(node)  # a grad() target's capture
            continue
        edges = node._next_edges
        emit("node_start", node, {"inputs": nones(node.num_inputs), "derived": True})
        if children and node.fn is not None:
            for child in [c for c in children if c.running is node.fn]:
                children.remove(child)
                emit.flush()  # this call's rows first (Note [Batched events])
                emit_call(child, out, queue)
        emit("node_end", node, {"outputs": nones(len(edges)), "derived": True})
        # Which outputs were None is not known: every edge is taken to carry a gradient.
        derived.pass_outputs(node, (True,) * len(edges), [None] * len(edges))


_clock = time.perf_counter_ns
