"""The panels around the node list: queues, thread lanes, the inspector, the timeline."""

from __future__ import annotations

import os
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from autograd_viz.grads.report import Finding as GradsFinding
from autograd_viz.nan.report import Finding, user_frames
from autograd_viz.trace import GraphTaskInfo, NodeInfo, Trace
from autograd_viz.trace.replay import ExecutionState, NodeState
from autograd_viz.trace.text import printable, thread_name
from autograd_viz.tui.rows import RowList
from autograd_viz.tui.styled import (
    NON_FINITE_STYLE,
    event_text,
    sequence_nr,
    status_text,
    summary_text,
)

QUEUE_ROW_LIMIT = 6
"""Entries of one ready queue written out; the rest are counted."""


def queues_view(state: ExecutionState, devices: list[str]) -> RenderableType:
    """One line per device: its ready queue, the next task to pop first."""
    table = Table.grid(padding=(0, 1))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="ellipsis", no_wrap=True)
    for device in devices:
        entries = state.queues.get(device, ())
        line = Text()
        for entry in entries[:QUEUE_ROW_LIMIT]:
            if line:
                line.append(" · ", style="dim")
            line.append(printable(entry.name), style="dodger_blue1")
            line.append(f"#{entry.node_id}", style="dim")
            if entry.reentrant_depth:
                line.append(f" d{entry.reentrant_depth}", style="purple")
        if len(entries) > QUEUE_ROW_LIMIT:
            line.append(f" +{len(entries) - QUEUE_ROW_LIMIT} more", style="dim")
        # Text, not a str: a str cell is markup, and devices come from the trace.
        head = Text(f"{printable(device)} [{len(entries)}]")
        table.add_row(head, line or Text("empty", style="dim"))
    return table


def threads_view(state: ExecutionState) -> RenderableType:
    """One lane per engine thread: what it runs, for which task, how deep it is reentered."""
    table = Table.grid(padding=(0, 1))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="ellipsis", no_wrap=True)
    for name in sorted(state.threads):
        thread = state.threads[name]
        running = thread.running
        lane = Text()
        if running is not None:
            lane.append("▶ ", style="bold dark_orange")
            lane.append(f"{printable(running.name)}#{running.node_id} ")
            lane.append(f"task {running.graph_task}", style="dim")
        elif thread.stack:
            lane.append(f"waits on task {thread.stack[-1].graph_task}", style="yellow")
        else:
            lane.append("idle", style="dim")
        depth = _reentrant_depth(state, thread.stack[-1].graph_task) if thread.stack else 0
        if depth:
            lane.append(f"  reentrant depth {depth}", style="bold purple")
        table.add_row(Text(short_thread(name)), lane)  # a str cell would be markup
    if not state.threads:
        table.add_row(Text("no engine thread has run yet", style="dim"), "")
    return table


def _reentrant_depth(state: ExecutionState, graph_task: int) -> int:
    """How deep ``graph_task`` is nested in reentrant backward calls."""
    info = state.trace.graph_tasks.get(graph_task)
    return info.reentrant_depth if info is not None else 0


def inspect_node(
    info: NodeInfo,
    state: NodeState | None,
    task: GraphTaskInfo,
    breakpoint_: bool,
    findings: Sequence[Finding] = (),
    values: str = "all",
    no_gradient: GradsFinding | None = None,
    off_graph: Sequence[GradsFinding] = (),
) -> RenderableType:
    """Everything about one node at one step; ``findings``: its NaNs and Infs so far, and why;
    ``values``: the tier the trace was recorded at (Note [Values tiers]); ``no_gradient``:
    why its leaf got no gradient in the call (or only zeros), and ``off_graph`` (on the root):
    the parameters off the graph that got none (Note [Gradient findings in a trace])."""
    # Below "all" a gradient was recorded without its summary: say so, never "empty".
    unvalued = values == "none" or (values == "leaves" and info.leaf is None)
    head = Text()
    head.append_text(status_text(state.status if state else "not started"))
    head.append(f" {printable(info.name)}", style="bold")
    head.append(f" #{info.id}", style="dim")
    head.append(f"  {state.status if state else 'not started'}")
    if state is not None and state.thread:
        head.append(f" on {short_thread(state.thread)}", style="dim")
    if breakpoint_:
        head.append("  ⏺ breakpoint", style="bold red")
    facts = Text(
        f"sequence_nr {sequence_nr(info.sequence_nr)} · topological_nr {info.topological_nr}"
        f" · {printable(info.device)} · graph task {task.id}",
        style="dim",
    )
    remaining = state.remaining if state is not None else info.dependencies
    deps = Text(f"dependencies: {remaining} of {info.dependencies} still to arrive")
    parts: list[RenderableType] = [head, *nan_lines(findings), facts, deps]
    if info.leaf is not None:
        leaf = info.leaf
        parts.append(
            Text(
                printable(
                    f"leaf {leaf.name or '(unnamed)'}: {leaf.dtype}{list(leaf.shape)} {leaf.device}"
                )
            )
        )
        if leaf.aliases:  # a parameter modules share: `/` finds it by these too
            parts.append(Text(printable(f"  also named {', '.join(leaf.aliases)}"), style="dim"))
    if no_gradient is not None:
        parts.extend(no_gradient_lines(no_gradient))
    if off_graph:
        parts.append(_section(f"no gradient, off this graph ({len(off_graph)} parameters)"))
        for finding in off_graph[:OFF_GRAPH_SHOWN]:
            parts.extend(no_gradient_lines(finding, named=True))
        if len(off_graph) > OFF_GRAPH_SHOWN:
            more = len(off_graph) - OFF_GRAPH_SHOWN
            parts.append(Text(f"  … {more} more (autograd-viz grads lists them)", style="dim"))
    parts.append(_section("input buffer (gradients in)"))
    slots = state.slots if state is not None else (None,) * len(info.inputs)
    for i, shape in enumerate(info.inputs):
        slot = slots[i] if i < len(slots) else None
        line = Text(f"  [{i}] ")
        if unvalued:
            line.append(f"{printable(shape[1])}{list(shape[0])}", style="cyan")
            line.append(f"  values not recorded (--values {values})", style="dim")
        elif slot is None:
            line.append("empty", style="dim")
            line.append(f"  expects {printable(shape[1])}{list(shape[0])}", style="dim")
        else:
            line.append("✓ ", style="green")
            line.append_text(summary_text(slot))
            if state is not None and i < len(state.contributions) and state.contributions[i] > 1:
                line.append(f"  (sum of {state.contributions[i]})", style="dim")
        parts.append(line)
    parts.append(_section("outputs (gradients out, along next_edges)"))
    outputs = state.outputs if state is not None else None
    for i, edge in enumerate(info.next_edges):
        line = Text(f"  [{i}] → ")
        if edge is None:
            line.append("no edge (no gradient needed)", style="dim")
        else:
            target = task.nodes.get(edge[0])
            line.append(f"{printable(target.name if target else '?')}#{edge[0]} slot {edge[1]}")
        if unvalued:
            line.append("  values not recorded", style="dim")
        elif outputs is not None and i < len(outputs):
            line.append("  ")
            line.append_text(summary_text(outputs[i], brief=True))
        parts.append(line)
    if not info.next_edges:
        parts.append(Text("  none (a sink)", style="dim"))
    if info.saved:
        parts.append(_section("saved tensors"))
        for i, saved in enumerate(info.saved):
            line = Text(f"  [{i}] ")
            if saved is None:
                line.append("released", style="dim")
            else:
                line.append_text(summary_text(saved))
            parts.append(line)
    if info.hooks:
        parts.append(_section("hooks"))
        ran = state.hooks_run if state is not None else 0
        hooks = ", ".join(f"{printable(kind)}×{count}" for kind, count in info.hooks)
        parts.append(Text(f"  {hooks}; {ran} run so far"))
    if info.captures:
        parts.append(_section("captured for grad()"))
        for slot_nr, output_nr in info.captures:
            parts.append(Text(f"  input slot {slot_nr} → grad() output {output_nr}", style="blue"))
    if state is not None and state.error:
        parts.append(_section("error"))
        parts.append(Text(printable(state.error, newlines=True), style="bold red"))
    if info.traceback:
        parts.append(_section("forward call (anomaly mode), your line first"))
        parts.extend(forward_frames(info.traceback))
    return Group(*parts)


OFF_GRAPH_SHOWN = 8
"""Parameters off the graph listed on the root's inspector."""


def no_gradient_lines(finding: GradsFinding, named: bool = False) -> list[Text]:
    """Why a parameter got no gradient (or zeros) in the call, and the line that explains it."""
    zeros = finding.reason == "exact zeros"
    head = "gradient all zeros" if zeros else f"no gradient: {finding.reason}"
    line = Text("  " if named else "", style=NON_FINITE_STYLE if zeros else "bold red")
    if named:
        line.append(f"{printable(finding.parameter)}: ", style="bold")
    line.append(f"✗ {head}", style="bold")
    line.append(f" — {printable(finding.why)}")
    lines = [line]
    where = finding.where
    if where is not None:
        at = Text(f"    at {printable(os.path.basename(where.file))}:{where.line}", style="cyan")
        if where.code:
            at.append(f"  {printable(where.code)}", style="dim")
        lines.append(at)
    return lines


def nan_lines(findings: Sequence[Finding]) -> list[Text]:
    """What ``autograd-viz nan`` says about a node: NaN or Inf, born here or passed on, why."""
    lines = []
    for finding in findings:
        value = "NaN" if finding.value == "nan" else "Inf"
        where = "in the forward pass" if finding.phase == "forward" else "in backward"
        if finding.phase == "backward":
            where += f" (gradient out {finding.output_index})"
        if finding.born:
            line = Text(f"⚠ {value} born here {where}: ", style=f"bold {NON_FINITE_STYLE}")
            line.append(printable(finding.cause), style="bold")
        else:
            line = Text(f"⚠ {value} passed on {where}: ", style=NON_FINITE_STYLE)
            line.append(printable(finding.cause))
        lines.append(line)
    return lines


def forward_frames(traceback: Sequence[str]) -> list[Text]:
    """The user's frames of a forward traceback, the line that called the op first."""
    frames = user_frames(tuple(traceback))
    if not frames:  # nothing of the user's: show what there is, innermost last as Python does
        return [Text(printable("".join(traceback).rstrip(), newlines=True), style="dim")]
    lines = []
    for i, frame in enumerate(frames):
        where = Text(
            f"  {printable(_short_path(frame.file))}:{frame.line}", style="bold" if i == 0 else ""
        )
        where.append(f" in {printable(frame.function)}", style="dim")
        lines.append(where)
        if frame.code:
            lines.append(Text(f"    {printable(frame.code)}", style="" if i == 0 else "dim"))
    return lines


def _short_path(file: str) -> str:
    """``file`` relative to the working directory when it is under it."""
    try:
        relative = os.path.relpath(file)
    except ValueError:  # another drive on Windows
        return file
    return file if relative.startswith("..") else relative


FOCUS_HINTS = {
    "nodes": "Select a node to inspect it: ↑ ↓ in the node list (or click one).",
    "dag": "Select a node to inspect it: ← → in the drawing, Enter opens a box.",
    "": "Select a node to inspect it: Tab to the node list, then ↑ ↓ (or click one).",
}
"""What the inspector says with no node selected, by the panel that has the focus."""


def inspect_nothing(
    trace: Trace, state: ExecutionState, focus: str = "", heading: tuple[str, bool] | None = None
) -> RenderableType:
    """What the inspector says when no node is selected: the call or fold row under the
    node list's cursor (``heading``: its words, whether it is open) and what Enter does to
    it, else how to select one from the panel that has the ``focus``."""
    if not trace.graph_tasks:
        return Text("Waiting for the first backward call…", style="dim italic")
    if heading is not None:
        words, is_open = heading
        text = Text("▾ " if is_open else "▸ ", style="bold cyan").append(words, style="bold")
        what = (
            "Enter closes it; its nodes and calls are listed below it"
            if is_open
            else "Enter opens it: its nodes and calls are listed below it"
        )
        return text.append(f"\n{what}; ↑ ↓ to a node to inspect it.", style="dim italic")
    return Text(FOCUS_HINTS.get(focus, FOCUS_HINTS[""]), style="dim italic")


def in_box(box: str, focus: str = "dag") -> Text:
    """The line above a node the drawing shows inside a box: which box, and how to open it
    from the panel that has the ``focus`` (Enter opens it only while the drawing has it)."""
    text = Text("drawn in the box ", style="dim italic")
    text.append(box, style="bold cyan")
    how = (
        "Enter opens it, ← → the next in the drawing"
        if focus == "dag"
        else "Enter in the drawing opens it"
    )
    return text.append(f" · {how}\n", style="dim italic")


def short_thread(name: str) -> str:
    """An engine thread's name as every view writes it (:func:`thread_name`), shown escaped."""
    return printable(thread_name(name))


def _section(title: str) -> Text:
    return Text(f"\n{title}", style="bold underline")


class EventLog(RowList):
    """Every event of the trace, with the cursor on the last one applied."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.trace: Trace | None = None
        """The trace listed."""
        self.position = 0
        """Events applied; row ``position - 1`` is marked as the current step."""

    def show(self, trace: Trace, position: int) -> None:
        """List ``trace`` with step ``position`` marked and in view."""
        self.trace = trace
        self.position = position
        if self.row_count != len(trace.events):
            self.set_row_count(len(trace.events))
        self.move_to(max(0, position - 1), center=True, notify=False)
        self.refresh()

    def row_text(self, row: int) -> Text:
        assert self.trace is not None
        events = self.trace.events
        if row >= len(events):  # a live flight recorder forgot older calls; shown anew next move
            return Text()
        event = events[row]
        applied = row < self.position
        marker = "▸" if row == self.position - 1 else " "
        digits = max(4, len(str(len(self.trace.events))))  # a space always after the marker
        number = f"{marker} {row + 1:>{digits}} "
        text = Text().append(number, style="bold" if marker != " " else "dim")
        text.append(f"{short_thread(event.thread):<8.8} ", style="dim")
        text.append(f"t{event.graph_task} ", style="dim")
        body = event_text(event)
        if not applied:
            body.stylize("dim")
        if event.kind == "anomaly":
            body.stylize(NON_FINITE_STYLE)
        return text.append_text(body)
