"""``autograd-viz grads TRACE.jsonl``: what a recorded trace can say about gradients.

A trace holds each backward call's graph and the summary of every gradient a
node received and gave (with ``--values all``), so it says, per call: the
leaves whose gradient was exact zeros and the node where they became zeros
(the same search as a watched run, :func:`~autograd_viz.grads.plan.zeros_born_at`,
over the summaries), the leaves the call pruned, a node that returned no
gradient for a leaf, and each module's gradient norm. It holds no forward and
no parameter off the graph, so the other reasons (never used, no_grad, cut,
never reaching the loss) need the script; parameter norms are not recorded
either, so the flow has no ratios and only the relative vanishing flag. A call
recorded with the watch on (``grads -o``, ``record --why``) holds what the watch
found (Note [Gradient findings in a trace] in ``autograd_viz/grads/recorded.py``),
which is read instead, whole.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from autograd_viz.grads.plan import Stats, no_gradient_from, zeros_born_at
from autograd_viz.grads.recorded import KIND, call_grads, decode_call
from autograd_viz.grads.report import (
    NO_GRADIENT,
    PRUNED,
    ZEROS,
    CallGrads,
    Finding,
    FlowRow,
    Where,
    flag_flow,
)
from autograd_viz.trace import Trace
from autograd_viz.trace.records import GraphTaskInfo, NodeInfo
from autograd_viz.trace.text import shape_name

_FRAME = re.compile(r'\s*File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<function>.*)')


@dataclass(frozen=True)
class _Node:
    """A recorded node, read as the plan reads a live one."""

    info: NodeInfo

    def name(self) -> str:
        return self.info.name


def _where_made(node: _Node) -> Where | None:
    for entry in reversed(node.info.traceback or ()):
        match = _FRAME.match(entry)
        if match:
            return Where(match["file"], int(match["line"]), match["function"].strip())
    return None


def _module_made(node: _Node) -> str | None:
    scope = node.info.scope
    return ".".join(path for path, _ in scope[1:]) or (scope[0][0] if scope else None)


def _unused(*_: Any) -> Any:
    raise AssertionError("a recorded call is not hooked")


TRACE_STATS = Stats(_unused, _unused, _unused, _unused, _where_made, _module_made)
"""How a recorded call's nodes are read (its gradients are summaries, read below)."""


def _nonzero(summary: Any) -> bool | None:
    """Whether a gradient's summary holds a non-zero (``True`` when it cannot tell)."""
    if summary is None:
        return None
    if summary.nan_count or summary.inf_count or summary.min is None or summary.max is None:
        return True
    return not (summary.min == 0 and summary.max == 0)


class RecordedCall:
    """One recorded backward call, shaped as :class:`~autograd_viz.grads.plan.CallPlan` is
    for the searches it shares with a watched run."""

    def __init__(self, task: GraphTaskInfo, events: list[Any]) -> None:
        self.stats = TRACE_STATS
        self.asked = bool(task.outputs)
        """Whether the call had ``inputs=`` (or was a ``grad()``)."""
        infos = list(task.nodes.values())
        self.nodes = [_Node(info) for info in infos]
        self.index = {info.id: i for i, info in enumerate(infos)}
        self.parents: list[list[tuple[int, int]]] = [[] for _ in infos]
        for i, info in enumerate(infos):
            for slot, edge in enumerate(info.next_edges):
                if edge is not None and edge[0] in self.index:
                    self.parents[self.index[edge[0]]].append((i, slot))
        self.received: list[Any] = [None] * len(infos)
        self.produced: list[Any] = [None] * len(infos)
        self.summaries: dict[int, Any] = {}
        for event in events:
            found = self.index.get(event.node_id) if event.node_id is not None else None
            if found is None:
                continue
            i = found
            if event.kind == "node_start":
                inputs = event.data.get("inputs") or ()
                self.received[i] = [_nonzero(s) for s in inputs]
                if infos[i].leaf is not None and inputs:
                    self.summaries[i] = inputs[0]
            elif event.kind == "node_end":
                self.produced[i] = [_nonzero(s) for s in event.data.get("outputs") or ()]

    @staticmethod
    def nonzero(flags: list[Any] | None) -> bool:
        return any(bool(f) for f in flags or ())


def recorded_calls(trace: Trace, first: int = 0) -> Iterator[CallGrads]:
    """What each outermost backward call of ``trace`` gave its leaves, numbered from ``first``."""
    by_task: dict[int, list[Any]] = {}
    for event in trace.events:
        by_task.setdefault(event.graph_task, []).append(event)
    tasks = [t for t in trace.graph_tasks.values() if not t.parent]
    children: dict[int, list[GraphTaskInfo]] = {}
    for t in trace.graph_tasks.values():
        if t.parent:
            children.setdefault(t.parent, []).append(t)
    for number, task in enumerate(tasks, start=first):
        events = by_task.get(task.id, [])
        noted = [e for e in events if e.kind == KIND]
        if noted:  # what the watch found while the script ran: every reason, with its line
            yield decode_call(noted[-1], number)
        else:
            nested = [RecordedCall(t, by_task.get(t.id, [])) for t in _inside(task, children)]
            yield explain_recorded(RecordedCall(task, events), number, nested)


def _inside(task: GraphTaskInfo, children: dict[int, list[GraphTaskInfo]]) -> list[GraphTaskInfo]:
    """The graph tasks of the backward calls made inside ``task`` (a reentrant checkpoint's),
    at any depth."""
    found: list[GraphTaskInfo] = []
    todo = list(children.get(task.id, ()))
    while todo:
        t = todo.pop()
        found.append(t)
        todo.extend(children.get(t.id, ()))
    return found


def explain_recorded(
    call: RecordedCall, index: int, nested: Sequence[RecordedCall] = ()
) -> CallGrads:
    """The findings and the flow of one recorded call; ``nested``: the calls made inside it,
    whose leaves are in the flow too (Note [Nested backward calls] in ``torch_calls.py``)."""
    result = CallGrads(index, "backward", None)
    flow: dict[str, list[float]] = {}
    reached: set[str] = set()
    for i, node in enumerate(call.nodes):
        leaf = node.info.leaf
        if leaf is None:
            continue
        result.parameters += 1
        name = leaf.name or f"leaf{tuple(leaf.shape)}"
        module = name.rpartition(".")[0] or None
        shape = tuple(leaf.shape)
        if node.info.status == "pruned":
            result.findings.append(
                Finding(name, module, shape, PRUNED, "the call's inputs= left it out")
            )
            continue
        if call.received[i] is None:
            if not call.asked:  # grad() and inputs= capture gradients instead
                why, at = no_gradient_from(call, i)  # type: ignore[arg-type]
                result.findings.append(Finding(name, module, shape, NO_GRADIENT, why, at))
            continue
        if not any(r is not None for r in call.received[i]):
            continue  # recorded without values: nothing to read
        reached.add(name)
        summary = call.summaries.get(i)
        if summary is not None and summary.norm is not None:
            entry = flow.setdefault(module or name, [0.0, 0])
            entry[0] += summary.norm**2
            entry[1] += 1
        if not call.nonzero(call.received[i]):
            why, at = zeros_born_at(call, i)  # type: ignore[arg-type]
            result.findings.append(Finding(name, module, shape, ZEROS, why, at))
    _nested_flow(nested, reached, flow, result)
    result.flow = flag_flow(
        FlowRow(m, math.sqrt(g2), math.nan, int(n)) for m, (g2, n) in flow.items()
    )
    return result


def _nested_flow(
    nested: Sequence[RecordedCall],
    reached: set[str],
    flow: dict[str, list[float]],
    result: CallGrads,
) -> None:
    """The named leaves only calls made inside the call reached, into ``flow``: each one's
    norm where one nested call gave it its gradient; one given several (or given one by the
    call itself too) is counted in :attr:`CallGrads.flow_left_out`, as the norm of their sum
    cannot be told from their norms."""
    norms: dict[str, list[float]] = {}
    for call in nested:
        for i, node in enumerate(call.nodes):
            leaf = node.info.leaf
            if leaf is None or not leaf.name or call.received[i] is None:
                continue
            if leaf.name == shape_name(tuple(leaf.shape)):
                continue  # unnamed: the checkpoint's own detached input, not a parameter
            summary = call.summaries.get(i)
            if summary is not None and summary.norm is not None:
                norms.setdefault(leaf.name, []).append(summary.norm)
    for name, found in norms.items():
        if name not in reached:
            result.parameters += 1
        if len(found) > 1 or name in reached:
            result.flow_left_out += 1
            continue
        entry = flow.setdefault(name.rpartition(".")[0] or name, [0.0, 0])
        entry[0] += found[0] ** 2
        entry[1] += 1


def flow_of(trace: Trace, graph_task: int) -> list[FlowRow]:
    """Each module's gradient norm in ``graph_task``: as recorded, or from its summaries."""
    recorded = call_grads(trace, graph_task)
    if recorded is not None and recorded.flow:
        return recorded.flow
    info = trace.graph_tasks.get(graph_task)
    if info is None:
        return []
    own = [e for e in trace.events[info.first_event :] if e.graph_task == graph_task]
    try:
        return explain_recorded(RecordedCall(info, own), info.call or 0).flow
    except (KeyError, IndexError, TypeError, ValueError):
        return []  # a trace cut short, or without values: nothing to read
