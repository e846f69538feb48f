"""The gradient findings in a trace: written while a script is recorded, read by every view.

Note [Gradient findings in a trace]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
What the gradient watch finds about a backward call (which parameters got no
gradient and why, each module's gradient norm) is known only once the call has
returned, and needs the forward (the uses, the cuts): a trace alone cannot say
it. When a script is recorded with the watch on (``grads -o TRACE``, ``record
--why``), each call's :class:`~autograd_viz.grads.report.CallGrads` becomes one
``grads`` event of that call's graph task, recorded right after the call
(:meth:`~autograd_viz.trace.recorder.Recorder.note_call`), so that it is read
with the call by every reader (a call loaded alone, a part streamed, a trace
cut short). Views look it up by graph task (:func:`call_grads`); a trace without
it still gives what its summaries say (``flow_of`` in ``trace_report.py``). The event
has no node and changes no replayed state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from autograd_viz.grads.report import FROZEN, CallGrads, Finding, FlowRow, Where
from autograd_viz.trace import LeafInfo, NodeInfo, Trace, TraceEvent
from autograd_viz.trace.notes import grads_notes
from autograd_viz.trace.readers import encode_float

KIND = "grads"
"""The event kind of a call's gradient findings."""

LISTED = 2_000
"""The most findings one event keeps: a model of millions of frozen parameters is told
as the first ones (the watch's own report keeps them all)."""


class CallNoter(Protocol):
    """What records a call's findings: a :class:`~autograd_viz.trace.recorder.Recorder`."""

    def note_call(self, kind: str, data: dict[str, Any], graph_task: int | None = None) -> bool: ...


def _finding(f: Finding) -> dict[str, Any]:
    out: dict[str, Any] = {
        "parameter": f.parameter,
        "module": f.module,
        "shape": list(f.shape),
        "reason": f.reason,
        "why": f.why,
    }
    if f.where is not None:
        w = f.where
        out["where"] = {"file": w.file, "line": w.line, "function": w.function, "code": w.code}
    return out


def _flow_row(r: FlowRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "module": r.module,
        "grad_norm": encode_float(r.grad_norm),
        "param_norm": encode_float(r.param_norm),
        "parameters": r.parameters,
    }
    if r.flag is not None:
        out["flag"] = r.flag
    return out


def encode_call(call: CallGrads) -> dict[str, Any]:
    """A call's findings and flow as a ``grads`` event's data (plain JSON values)."""
    findings = sorted(call.findings, key=lambda f: f.reason == FROZEN)[:LISTED]
    data = {
        "findings": [_finding(f) for f in findings],
        "flow": [_flow_row(r) for r in call.flow],
        "call_kind": call.kind,
        "parameters": call.parameters,
    }
    if call.flow_left_out:
        data["flow_left_out"] = call.flow_left_out
    return data


class RecordedWhere(Where):
    """A line as recorded, with its text (the file may not be there when it is read)."""

    def __init__(self, file: str, line: int, function: str, code: str) -> None:
        super().__init__(file, line, function)
        object.__setattr__(self, "_code", code)

    @property
    def code(self) -> str:
        """The line's text as it was when recorded."""
        return str(getattr(self, "_code", ""))


def decode_call(event: TraceEvent, index: int) -> CallGrads:
    """A ``grads`` event as the call's :class:`CallGrads`, numbered ``index``."""
    return decode_data(event.data, index)


def decode_data(data: Mapping[str, Any], index: int) -> CallGrads:
    """A ``grads`` event's data as the call's :class:`CallGrads`, numbered ``index``."""
    call = CallGrads(index, data.get("call_kind", "backward"), None)
    call.parameters = data.get("parameters", 0)
    call.flow_left_out = data.get("flow_left_out", 0)
    for f in data["findings"]:
        w = f.get("where")
        at = RecordedWhere(w["file"], w["line"], w["function"], w["code"]) if w else None
        call.findings.append(
            Finding(f["parameter"], f["module"], tuple(f["shape"]), f["reason"], f["why"], at)
        )
    call.flow = [
        FlowRow(r["module"], r["grad_norm"], r["param_norm"], r["parameters"], r.get("flag"))
        for r in data["flow"]
    ]
    return call


def into(recorder: CallNoter) -> Callable[[CallGrads], None]:
    """What records each call's findings into ``recorder``, as a ``grads`` event of the call."""

    def note(call: CallGrads) -> None:
        recorder.note_call(KIND, encode_call(call))

    return note


_decoded: list[tuple[Mapping[str, Any], int, CallGrads]] = []
"""The last event data decoded (a view asks again at every step it shows)."""


@contextmanager
def explaining(recorder: CallNoter, on: bool = True) -> Iterator[None]:
    """Inside the block, record each backward call's findings into ``recorder`` (``record
    --why``); nothing when not ``on``. The watch costs about as much again as recording."""
    if not on:
        yield
        return
    from autograd_viz.grads.watch import watch_grads

    with watch_grads(keep_flow=0, on_call=into(recorder)):
        yield


def call_grads(trace: Trace, graph_task: int) -> CallGrads | None:
    """The findings recorded for ``graph_task`` (its last ``grads`` event), if any."""
    data = grads_notes(trace).get(graph_task)
    if data is None:
        return None
    info = trace.graph_tasks.get(graph_task)
    index = info.call or 0 if info is not None else 0
    for seen, number, call in _decoded:
        if seen is data and number == index:
            return call
    call = decode_data(data, index)
    _decoded[:] = [(data, index, call)]
    return call


def node_findings(
    trace: Trace, graph_task: int, node: NodeInfo
) -> tuple[Finding | None, tuple[Finding, ...]]:
    """What a view says on ``node`` of ``graph_task``: why its leaf got no gradient (or
    zeros), and, on the call's root, the parameters off the graph that got none."""
    call = call_grads(trace, graph_task)
    info = trace.graph_tasks.get(graph_task)
    if call is None or info is None:
        return None, ()
    own = leaf_finding(call, node.leaf)
    if node.id != info.root:
        return own, ()
    on_graph = {
        name
        for n in info.nodes.values()
        if n.leaf is not None
        for name in (n.leaf.name, *n.leaf.aliases)
        if name is not None
    }
    return own, tuple(off_graph(call, on_graph))


def leaf_finding(call: CallGrads | None, leaf: LeafInfo | None) -> Finding | None:
    """Why the parameter ``leaf`` got no gradient (or zeros) in ``call``, if it is said."""
    if call is None or leaf is None:
        return None
    names = {leaf.name, *leaf.aliases} - {None}
    for finding in call.findings:
        if finding.parameter in names:
            return finding
    return None


def off_graph(call: CallGrads | None, on_graph: Iterable[str]) -> list[Finding]:
    """The findings of ``call`` about trainable parameters not on its graph (cut, never used,
    ...): those a picture of the graph cannot mark on a node of its own."""
    if call is None:
        return []
    there = set(on_graph)
    return [f for f in call.findings if f.missing and f.parameter not in there]


def norm_text(value: float) -> str:
    """A gradient norm in a few characters: ``1.2e-03``, ``inf``."""
    return f"{value:.1e}" if math.isfinite(value) else str(value)
