"""The call level (``observe="calls"``): a backward call watched at its ends, its nodes derived.

No hook is put on any node: PyTorch runs the call as unwatched, and only its
roots, its ``inputs=`` targets, its thread and its start and end times are
kept. Once the call has returned, its graph is still there (the saved tensors
are freed, the ``next_functions`` stay), so it is walked as the node level
walks it before a call (:func:`~autograd_viz.sources.pytorch.graph.plan_graph_task`)
and PyTorch's scheduler (``engine/scheduler.py``, through
:class:`~autograd_viz.sources.pytorch.bookkeeping.Bookkeeping`) is run over
it: the ready queue pops in PyTorch's order, and each node's start, end,
dependency counts and buffers are emitted as ``derived`` events. See Note
[Observation levels] in ``autograd_viz/trace/records.py``.

What is not known without watching: which of a node's outputs were ``None``
(every edge is taken to carry a gradient), the nodes' times (every derived
event has the call's end time) and values (none are kept).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any

import torch

from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch.bookkeeping import Bookkeeping
from autograd_viz.sources.pytorch.emitter import Emitter
from autograd_viz.sources.pytorch.graph import GraphPlan, plan_graph_task
from autograd_viz.sources.pytorch.naming import LeafNamer
from engine.events import HUB, Event
from engine.graph_task import new_graph_task_id


def observes_calls() -> bool:
    """Whether a listener asks for the call level (``observe == "calls"``).

    Such a recorder says so in its header; a listener beside it that wants
    nodes (``run --print``'s NaN checks) then reads derived events too.
    """
    return any(getattr(listener, "observe", "nodes") == "calls" for listener in HUB.listeners)


def run_call_level(
    original: Callable[..., Any],
    t_outputs: Any,
    args: Any,
    kwargs: Any,
    roots: Sequence[tuple[Any, int]],
    targets: Sequence[Any],
    bound: dict[str, Any],
    namer: LeafNamer,
) -> Any:
    """Run one backward call unwatched, then emit its graph task, derived from its graph.

    Args:
        original: PyTorch's ``_engine_run_backward``.
        t_outputs: the root tensors, as PyTorch got them.
        args: the call's other arguments, as PyTorch got them.
        kwargs: the call's keyword arguments, as PyTorch got them.
        roots: ``(grad_fn, input_nr)`` of each root.
        targets: each ``inputs=`` / ``grad()`` target, as the node level plans it.
        bound: the call's arguments by name.
        namer: names the leaves (from the caller's frame).

    Returns:
        What PyTorch returned; what it raised goes on to the caller.
    """
    thread = threading.current_thread().name
    depth = 0 if torch._C._current_graph_task_id() == -1 else 1
    start = _clock()
    failed: BaseException | None = None
    try:
        result = original(t_outputs, *args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - raised again below, once the call is recorded
        failed, result = exc, None
    end = _clock()
    try:
        plan = plan_graph_task(roots, targets, bool(bound["accumulate_grad"]), namer)
    except Exception as exc:  # noqa: BLE001 - never break the user's backward for a view
        warn_once(f"autograd-viz: cannot read this backward graph ({exc!r}); not recording it")
        plan = None
    if plan is not None and HUB.active:
        try:
            _derive(plan, bound, result, failed, depth, (start, end), thread)
        except Exception as exc:  # the call has returned; a view must not fail it
            if failed is None and getattr(exc, "_engine_propagate", False):
                raise
            warn_once(f"autograd-viz: stopped deriving a backward call after {exc!r}")
    if failed is not None:
        raise failed
    return result


def _derive(
    plan: GraphPlan,
    bound: dict[str, Any],
    result: Any,
    failed: BaseException | None,
    depth: int,
    times: tuple[int, int],
    thread: str,
) -> None:
    """Emit the call: its start (observed time), its nodes (derived), its end."""
    start, end = times
    gid = new_graph_task_id()
    keep_graph = bool(bound.get("keep_graph"))
    create_graph = bool(bound.get("create_graph"))

    def snapshot(max_values: int | None) -> Any:
        # The saved tensors are gone once the call has returned: no tensor is read.
        return plan.snapshot(gid, None, depth, keep_graph, create_graph, thread, None)

    _emit_at(
        start,
        thread,
        "graph_task_start",
        gid,
        plan.root,
        {
            "graph_snapshot": snapshot,
            "source": f"torch {torch.__version__}",
            "roots": [(n._id, n.name(), nr) for n, nr in plan.roots],
            "root_grads": (None,) * len(plan.roots),
            "outputs": [(n._id, nr) for n, nr in plan.outputs],
            "keep_graph": keep_graph,
            "create_graph": create_graph,
            "reentrant_depth": depth,
            "parent_graph_task": 0,
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
    emit = Emitter(gid)
    # Every derived row takes the call's end: the nodes' own times were not observed.
    emit.clock = itertools.repeat(end).__next__
    derived = Bookkeeping(plan, gid, depth, emit, copies=False)
    try:
        if failed is None:
            _replay(plan, derived, emit)
            results = list(result) if result is not None else []
            ending: dict[str, Any] = {"status": "ok", "exc_type": None, "message": None}
        else:  # which node failed was not watched: the call's end says why, no node does
            results = [None] * sum(len(c) for c in plan.captures.values())
            ending = {"status": "error", "exc_type": type(failed).__name__, "message": str(failed)}
        emit("graph_task_end", None, {**ending, "captured": (None,) * len(results)})
        emit.flush()
    finally:
        derived.release()


def _replay(plan: GraphPlan, derived: Bookkeeping, emit: Emitter) -> None:
    """Pop the model ready queue to its end, as PyTorch's engine popped it during the call."""
    root = plan.root
    derived.push(root, "root")
    queue = derived._queue
    while queue and queue[0].task[0] is derived:
        node = heapq.heappop(queue).task[1]
        if not derived.runs(node):
            derived._run_unseen(node)  # a grad() target's capture
            continue
        edges = node._next_edges
        emit("node_start", node, {"inputs": (None,) * node.num_inputs, "derived": True})
        emit("node_end", node, {"outputs": (None,) * len(edges), "derived": True})
        # Which outputs were None is not known: every edge is taken to carry a gradient.
        derived.pass_outputs(node, (True,) * len(edges), [None] * len(edges))


def _emit_at(
    at: int, thread: str, kind: str, graph_task: int, node: Any, data: dict[str, Any]
) -> None:
    """:meth:`engine.events.EventHub.emit_data` at a time taken earlier (the call's start)."""
    if node is not None:
        fields = (node._id, node.name(), node.sequence_nr, node.topological_nr)
    else:
        fields = (None, None, None, None)
    event = Event(
        kind, next(HUB.seq), at, thread, "cpu", graph_task, *fields, MappingProxyType(data)
    )
    for listener in HUB.listeners:
        try:
            listener(event)
        except BaseException as exc:  # noqa: BLE001 - listener_failed re-raises what it must
            HUB.listener_failed(listener, exc, graph_task)


_clock = time.perf_counter_ns
