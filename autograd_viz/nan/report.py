"""Where a NaN was born, and why: provenance of non-finite values in a recorded trace.

Record under anomaly mode's fullest settings and ask :func:`find_nans`::

    with autograd_viz.record() as trace, engine.autograd.detect_anomaly(
        check_inf=True, check_forward=True, mode="collect"
    ):
        loss.backward()
    report = find_nans(trace)
    report.first.cause, report.first.source, report.torch_node

Note [First non-finite value]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A NaN spreads, so most findings only pass one on. The report starts from the
one that came first in time: a forward output *born* non-finite (no input of
the op held a checked value; see Note [Born non-finite] in engine/anomaly.py)
happens before any backward pass; without one, it is the first backward
output that held one. PyTorch's anomaly mode names a different node when the
first value is an Inf, or is born in the forward: it raises at the first
backward function that *returns NaN* (``Function 'PowBackward0' returned nan
values``), so the report keeps that node apart, as :attr:`NanReport.torch_node`.

A trace recorded without anomaly mode has no ``anomaly`` events; the report
then falls back to the ``node_end`` events whose gradients are not finite.

A PyTorch program checked by
:class:`~autograd_viz.nan.forward.checks.TorchNanChecker` gives the same
events with a few more fields: ``aten_op`` (the aten op that made the value),
``module`` (where it was made) and, for a backward node, ``saved``: the
tensors it saved, which say why (PyTorch's graph shows them only while the
node runs).
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from autograd_viz.nan import cause as nan_cause
from autograd_viz.trace import GraphTaskInfo, Trace, TraceEvent
from autograd_viz.trace.summary import TensorSummary
from autograd_viz.trace.text import op_name

Summaries = tuple[TensorSummary | None, ...]


@dataclass(frozen=True, slots=True)
class NodeRef:
    """A backward node, by id and name."""

    id: int
    """The node's id in the trace."""
    name: str
    """``LogBackward0``, ..."""

    def __str__(self) -> str:
        return f"{self.name} #{self.id}"


@dataclass(frozen=True, slots=True)
class SourceLine:
    """One frame of the user's code: where an op was called in the forward pass."""

    file: str
    """The file, as the traceback named it."""
    line: int
    """The line number."""
    function: str
    """The function the line is in (``<module>`` at the top level)."""
    code: str
    """The line's source text, stripped; empty when Python could not read it."""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class Finding:
    """One node that held a NaN or Inf in the forward pass or returned one in backward."""

    phase: str
    """``"forward"`` (the op's output) or ``"backward"`` (a gradient the node returned)."""
    node: NodeRef
    """The op's backward node."""
    op: str
    """The op, from the node's name: ``LogBackward0`` is ``log``."""
    value: str
    """``"nan"`` or ``"inf"``: what was found (NaN when both were)."""
    output_index: int
    """The first output that held it."""
    born: bool
    """Whether this node created the value; otherwise one of its inputs already held one."""
    cause: str
    """Why, in words: ``"log of 0"``, ``"0 × inf"``, ... (see :mod:`autograd_viz.nan.cause`)."""
    graph_task: int
    """The backward call; 0 for a forward finding."""
    event_index: int
    """The index in :attr:`Trace.events` of its first event."""
    source: SourceLine | None
    """The user's line that called the op, from the forward traceback."""
    inputs: Summaries
    """Forward: the op's inputs. Backward: the gradients the node took."""
    outputs: Summaries
    """Forward: the op's output. Backward: the gradients it returned."""
    saved: Summaries = ()
    """The tensors the node saved for backward (backward findings only)."""
    aten_op: str | None = None
    """PyTorch, forward: the aten op that made the value (``aten.log.default``)."""
    module: str | None = None
    """PyTorch: the qualified name of the module the op ran in (``encoder.layers.0``)."""
    t_ns: int | None = None
    """When its first event happened (``time.perf_counter_ns``, as the trace's ``t_ns``)."""
    birth: int | None = None
    """PyTorch, a forward birth: its number (Note [Lineage] in
    ``nan/forward/lineage.py``); ``None`` where births are not numbered."""
    lineage: tuple[int, ...] = ()
    """A backward finding: the births whose forward values its node read or made."""
    contained: bool = False
    """A numbered birth whose values reached no loss, gradient, parameter or model output
    (set by the report, which knows the whole run)."""
    held: tuple[str | None, ...] = ()
    """PyTorch, forward: the parameters (by name, ``None`` unnamed) that held the value
    before the op, which is where it entered (Note [A parameter that holds a NaN] in
    ``nan/forward/births.py``)."""


@dataclass(frozen=True, slots=True)
class NanReport:
    """What :func:`find_nans` found in a trace (see Note [First non-finite value])."""

    first: Finding | None
    """The first non-finite value, forward or backward; ``None`` when there is none."""
    torch_node: NodeRef | None
    """The node PyTorch's anomaly mode would name: the first backward node that returned NaN."""
    path: tuple[NodeRef, ...]
    """From the loss (the graph task's root) to the first finding's node; empty if not reached."""
    findings: tuple[Finding, ...]
    """Every finding, in trace order, one per node and phase; a run read a part at a time
    keeps the first ones and enough of those born to list (see :attr:`unlisted`)."""
    backward_calls: int
    """How many backward calls the trace holds."""
    values: str = "all"
    """The tier of values the trace was recorded at (Note [Values tiers]): below ``all``
    only the checks' own findings are there to read; gradients found only in the
    recorded values, the path's numbers and the causes read from them are not."""
    unlisted: int = 0
    """Findings left out of :attr:`findings` (a long run read a part at a time)."""
    unlisted_born: int = 0
    """How many of those created their value."""
    unchecked: bool = False
    """Recorded without values (``--values none``) and without the NaN checks' findings: the
    trace cannot say whether a gradient held a NaN or Inf (nothing found means nothing)."""
    contained: int = 0
    """How many numbered births were contained: their values reached no loss, gradient,
    parameter or model output (Note [Lineage]); they do not count as found."""
    first_contained: Finding | None = None
    """The first of those."""

    @property
    def others(self) -> tuple[Finding, ...]:
        """Every finding but the first (of :attr:`findings`)."""
        return tuple(f for f in self.findings if f is not self.first)

    @property
    def sources(self) -> tuple[Finding, ...]:
        """The other findings that created their value rather than passing one on."""
        return tuple(f for f in self.others if f.born)

    @property
    def other_count(self) -> int:
        """How many findings there were besides the first, the unlisted ones included."""
        listed = sum(1 for f in self.findings if f is not self.first)
        unlisted_first = self.first is not None and not any(f is self.first for f in self.findings)
        return listed + self.unlisted - unlisted_first

    @property
    def source_count(self) -> int:
        """How many of :attr:`other_count` created their value."""
        listed = sum(1 for f in self.findings if f.born and f is not self.first)
        first = self.first
        unlisted_first = (
            first is not None and first.born and not any(f is first for f in self.findings)
        )
        return listed + self.unlisted_born - unlisted_first


def ignored_ops(ignore: Iterable[str]) -> frozenset[str]:
    """``ignore``'s ops, each named one way (:func:`~autograd_viz.nan.cause.canonical_op`)."""
    return frozenset(nan_cause.canonical_op(op) for op in ignore)


def is_ignored(finding: Finding, ignored: frozenset[str]) -> bool:
    """Whether ``finding``'s op is one of ``ignored`` (from :func:`ignored_ops`)."""
    ops = {nan_cause.canonical_op(finding.op)}
    if finding.aten_op is not None and finding.phase == "forward":
        ops.add(nan_cause.canonical_op(finding.aten_op))
    return bool(ops & ignored)


def anomaly_mode_event(trace: Trace, findings: Iterable[Finding]) -> NodeRef | None:
    """The first backward node whose ``anomaly`` event says it returned NaN in any output,
    among the nodes of ``findings``: where anomaly mode raises."""
    kept = {(f.graph_task, f.node.id) for f in findings if f.phase == "backward"}
    for event in trace.events:
        if (
            event.kind == "anomaly"
            and event.data.get("phase", "backward") == "backward"
            and event.data.get("value") == "nan"
            and (event.graph_task, event.node_id) in kept
        ):
            return NodeRef(event.node_id or 0, event.node_name or "?")
    return None


def path_from_root(task: GraphTaskInfo, node_id: int) -> tuple[NodeRef, ...]:
    """The shortest path along ``next_edges`` from the task's root to ``node_id`` (BFS)."""
    parents: dict[int, int | None] = {task.root: None}
    queue = deque([task.root])
    while queue:
        current = queue.popleft()
        if current == node_id:
            break
        info = task.nodes.get(current)
        for edge in info.next_edges if info is not None else ():
            if edge is not None and edge[0] not in parents:
                parents[edge[0]] = current
                queue.append(edge[0])
    if node_id not in parents:
        return ()
    path: list[NodeRef] = []
    step: int | None = node_id
    while step is not None:
        info = task.nodes.get(step)
        path.append(NodeRef(step, info.name if info is not None else "?"))
        step = parents[step]
    return tuple(reversed(path))


def graph_task_of(trace: Trace, finding: Finding) -> GraphTaskInfo | None:
    """The graph task of ``trace`` that ran ``finding``'s node: its own, or (a forward
    finding) the first that holds the node."""
    if finding.graph_task in trace.graph_tasks:
        return trace.graph_tasks[finding.graph_task]
    return next((t for t in trace.graph_tasks.values() if finding.node.id in t.nodes), None)


class NodeRuns:
    """Where each node ran: its ``node_start`` and ``node_end`` events, by graph task and id."""

    def __init__(self, trace: Trace) -> None:
        self.starts: dict[tuple[int, int], TraceEvent] = {}
        self.ends: dict[tuple[int, int], TraceEvent] = {}
        for event in trace.events:
            if event.node_id is None:
                continue
            key = (event.graph_task, event.node_id)
            if event.kind == "node_start":
                self.starts.setdefault(key, event)
            elif event.kind == "node_end":
                self.ends.setdefault(key, event)
        self.trace = trace

    def grads_in(self, graph_task: int, node_id: int) -> Summaries:
        start = self.starts.get((graph_task, node_id))
        return tuple(start.data.get("inputs", ())) if start is not None else ()

    def grads_out(self, graph_task: int, node_id: int) -> Summaries | None:
        end = self.ends.get((graph_task, node_id))
        return tuple(end.data.get("outputs", ())) if end is not None else None

    def saved(self, graph_task: int, node_id: int) -> Summaries:
        task = self.trace.graph_tasks.get(graph_task)
        info = task.nodes.get(node_id) if task is not None else None
        return info.saved if info is not None else ()

    def traceback(self, graph_task: int, node_id: int) -> tuple[str, ...] | None:
        task = self.trace.graph_tasks.get(graph_task)
        info = task.nodes.get(node_id) if task is not None else None
        return info.traceback if info is not None else None


def anomaly_findings(trace: Trace, runs: NodeRuns, offset: int = 0) -> Iterator[Finding]:
    """The findings of ``trace``'s ``anomaly`` events, one per node and phase, in order.

    ``offset``: the index in the run of the trace's first event (a part of a run).
    """
    seen: set[tuple[str, int, int]] = set()
    for event in trace.events:
        if event.kind != "anomaly" or event.node_id is None:
            continue
        data = event.data
        if "reached" in data:
            continue  # a lineage reaching something: read by reached_births, no finding
        phase = data.get("phase", "backward")
        key = (phase, event.graph_task, event.node_id)
        if key in seen:
            continue  # a later output of the same node: one finding per node
        seen.add(key)
        node = NodeRef(event.node_id, event.node_name or "?")
        op = data.get("op") or op_name(node.name)
        value = data["value"]
        source = user_line(data.get("traceback"))
        if phase == "forward":
            inputs = tuple(data.get("inputs") or ())
            output = data.get("tensor")
            aten_op = data.get("aten_op")
            held = tuple(data.get("held_names") or ())
            yield Finding(
                phase,
                node,
                op,
                value,
                data["output_index"],
                bool(data.get("born", False)),
                nan_cause.held_cause(value, held, data.get("held_inputs") or ())
                if held
                else nan_cause.forward_cause(
                    aten_op or op, value, inputs, output, data.get("input_ops") or ()
                ),
                0,
                event.index + offset,
                source,
                inputs,
                (output,),
                aten_op=aten_op,
                module=data.get("module"),
                t_ns=event.t_ns,
                # A birth that stopped the program (first=True) is the answer: nothing
                # after it ran to say whether its values would have reached anything.
                birth=None if data.get("raised") else data.get("birth"),
                held=held,
            )
            continue
        yield _backward_finding(runs, event, node, op, value, data["output_index"], source, offset)


def _backward_finding(
    runs: NodeRuns,
    event: TraceEvent,
    node: NodeRef,
    op: str,
    value: str,
    output_index: int,
    source: SourceLine | None,
    offset: int,
) -> Finding:
    task = event.graph_task
    grads = runs.grads_in(task, node.id)
    saved = tuple(event.data.get("saved") or ()) or runs.saved(task, node.id)
    outputs = runs.grads_out(task, node.id)
    if outputs is None:
        outputs = (event.data.get("grad"),)
    known = [s for s in (*grads, *saved) if s is not None]
    return Finding(
        "backward",
        node,
        op,
        value,
        output_index,
        all(nan_cause.finite(s) for s in known),
        nan_cause.backward_cause(op, value, grads, saved),
        task,
        event.index + offset,
        source,
        grads,
        outputs,
        saved,
        module=event.data.get("module"),
        t_ns=event.t_ns,
        lineage=tuple(event.data.get("lineage") or ()),
    )


def reached_births(trace: Trace) -> Iterator[int]:
    """The numbers of the births whose values ``trace`` says reached the loss, a gradient,
    a parameter or the model's output (Note [Lineage])."""
    for event in trace.events:
        if event.kind == "anomaly":
            yield from event.data.get("lineage") or ()


def gradient_findings(
    trace: Trace, runs: NodeRuns, offset: int = 0, leaves: bool = False
) -> Iterator[Finding]:
    """Backward findings from ``node_end`` gradients, for a trace without anomaly events.

    ``leaves``: the trace summarized only the leaves' gradients (``--values leaves``, Note
    [Values tiers]): each leaf's gradient, as its ``AccumulateGrad`` took it, is read instead.
    """
    for event in trace.events:
        if leaves:
            finding = _leaf_finding(runs, event, offset)
            if finding is not None:
                yield finding
            continue
        if event.kind != "node_end" or event.node_id is None:
            continue
        outputs = event.data.get("outputs") or ()
        bad = [i for i, s in enumerate(outputs) if s is not None and not nan_cause.finite(s)]
        if not bad:
            continue
        value = "nan" if any(outputs[i].nan_count for i in bad) else "inf"
        node = NodeRef(event.node_id, event.node_name or "?")
        source = user_line(runs.traceback(event.graph_task, node.id))
        yield _backward_finding(
            runs, event, node, op_name(node.name), value, bad[0], source, offset
        )


def _leaf_finding(runs: NodeRuns, event: TraceEvent, offset: int) -> Finding | None:
    """A leaf's gradient that is not finite, from its ``accumulate`` event, if it is one."""
    data = event.data
    grad = data.get("grad")
    if (
        event.kind != "accumulate"
        or data.get("target") != "leaf"
        or event.node_id is None
        or not isinstance(grad, TensorSummary)
        or nan_cause.finite(grad)
    ):
        return None
    value = "nan" if grad.nan_count else "inf"
    node = NodeRef(event.node_id, event.node_name or "?")
    name = data.get("leaf_name")
    leaf = f"the gradient of leaf {name}" if name else "a leaf's gradient"
    task = event.graph_task
    return Finding(
        "backward",
        node,
        op_name(node.name),
        value,
        0,
        False,
        f"{'NaN' if value == 'nan' else 'Inf'} reached {leaf} (only the leaves' gradients "
        "were recorded)",
        task,
        event.index + offset,
        user_line(runs.traceback(task, node.id)),
        runs.grads_in(task, node.id),
        (grad,),
        t_ns=event.t_ns,
    )


# -- the user's line ---------------------------------------------------------------------

_FRAME = re.compile(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>[^\n]+)')
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The engine is installed beside this package (one distribution): its frames are not the
# user's either.
_OUR_DIRS = (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.join(os.path.dirname(_PACKAGE), "engine") + os.sep,
)
_NOT_USER = ("<frozen ", "runpy.py", "<string>")
_RUNNERS = tuple(
    os.path.join(_PACKAGE, part + os.sep) for part in ("cli", "launch", "sources", "live")
)
"""Where autograd-viz runs a program: its frames (and those above them) are not the user's."""


def user_frames(traceback: tuple[str, ...] | list[str] | None) -> tuple[SourceLine, ...]:
    """The user's frames of ``traceback`` (formatted frames, innermost last), innermost first.

    What ran the program is left out: the console script, autograd-viz's
    command line and live session, ``runpy``, and the thread that started
    them (every frame up to the last of those); so are the engine's frames.
    The demo program, in autograd-viz's own ``cli``, counts as the user's.
    """
    frames: list[SourceLine] = []
    for frame in traceback or ():
        match = _FRAME.match(frame)
        if match is None:
            continue
        lines = frame.splitlines()
        code = lines[1].strip() if len(lines) > 1 else ""
        frames.append(
            SourceLine(match["file"], int(match["line"]), match["function"].strip(), code)
        )
    start = 0
    for i, source in enumerate(frames):
        path = os.path.abspath(source.file)
        runs_program = path.startswith(_RUNNERS) and not path.endswith("demo_program.py")
        if runs_program or any(s in source.file for s in _NOT_USER):
            start = i + 1
    user = [f for f in frames[start:] if not os.path.abspath(f.file).startswith(_OUR_DIRS)]
    return tuple(reversed(user))


def user_line(traceback: tuple[str, ...] | list[str] | None) -> SourceLine | None:
    """The innermost frame of ``traceback`` that is user code (see :func:`user_frames`)."""
    frames = user_frames(traceback)
    return frames[0] if frames else None
