"""What the app shows at one moment, and the panels that redraw themselves from it.

Note [Panels watch what is shown]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The app keeps one reactive value, :class:`Shown` (the step's state, the graph
task and node on screen, the status bar's facts), and sets it after every
move. Each panel here is bound to it (``data_bind``, as Textual's own
examples do) and redraws itself in its watcher, and only when what it draws
changed: a re-layout of a panel costs a frame, and at 20,000 nodes a step
changes the inspector or the ready queues far less often than it changes the
step. The reactives do not repaint on their own (``repaint=False``): setting
one would repaint the whole screen (the app's) or every panel, a fifth more
time on each key. The app never reaches into a panel to draw it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Group
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from autograd_viz.draw.render.words import explain
from autograd_viz.grads.recorded import node_findings
from autograd_viz.nan.report import Finding
from autograd_viz.trace import GraphTaskInfo, Trace, TraceEvent
from autograd_viz.trace.records import observed, values_recorded
from autograd_viz.trace.replay import ExecutionState
from autograd_viz.trace.text import one_line
from autograd_viz.tui.driver import Driver
from autograd_viz.tui.findings import NanFindings
from autograd_viz.tui.panels import (
    in_box,
    inspect_node,
    inspect_nothing,
    queues_view,
    threads_view,
)
from autograd_viz.tui.styled import non_finite

STATUS_LIMIT = 500
"""The most characters the status bar quotes (a name may be 100,000 long)."""

_NOTHING = object()


@dataclass(frozen=True, eq=False)
class Shown:
    """What the app shows now; panels bound to it redraw from it (Note [Panels watch...])."""

    driver: Driver
    """What the app steps through (its position, whether it is live)."""
    state: ExecutionState
    """The engine at the driver's position."""
    task: GraphTaskInfo | None
    """The graph task in the node list."""
    selected: int | None = None
    """The node under the node list's cursor."""
    flagged: frozenset[int] = frozenset()
    """Nodes anomaly mode has reported so far."""
    findings: NanFindings = field(default_factory=NanFindings)
    """The NaN analysis the inspector asks."""
    busy: bool = False
    """A live move is running in a worker thread."""
    message: str = ""
    """What the last move found."""
    printed: bool = False
    """The program has printed something (``o`` shows it)."""
    reading: bool = False
    """The program waits for a line (``i`` types it)."""
    focus: str = ""
    """The panel that has the focus: ``"nodes"``, ``"dag"``, or ``""`` for another."""
    heading: tuple[str, bool] | None = None
    """The module call's or fold's row under the node list's cursor, and whether it is open."""
    box: str = ""
    """The box of the drawn DAG the selected node is drawn in (the drawing shown)."""


def task_title(task: GraphTaskInfo | None, state: ExecutionState, *, pinned: bool) -> str:
    """The graph panel's title: the task, its size, where a reentrant one was started."""
    if task is None:
        return "graph"
    title = f"graph task {task.id} · {len(task.nodes)} nodes"
    if task.reentrant_depth:
        title += f" · reentrant depth {task.reentrant_depth}"
        started = state.started_by(task.id)
        if started is not None:
            title += f" from #{started[1]}"
    if pinned:
        title += " · pinned (t)"
    return title


class ShownPanel(Static):
    """A panel that redraws itself from :class:`Shown`, when its own part of it changed."""

    shown: reactive[Shown | None] = reactive(None, always_update=True, repaint=False)
    """What the app shows (bound to the app's)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._drawn: object = _NOTHING

    def watch_shown(self, shown: Shown | None) -> None:
        if shown is None:
            return
        key = self.key(shown)
        if key is not _NOTHING and key == self._drawn:
            return
        self._drawn = key
        self.update(self.draw(shown))

    def forget(self) -> None:
        """Redraw at the next change, whatever it is (another trace is shown)."""
        self._drawn = _NOTHING

    def key(self, shown: Shown) -> object:
        """What the drawing depends on; the panel is redrawn when it changes."""
        return _NOTHING

    def draw(self, shown: Shown) -> Any:
        """The panel's content."""
        raise NotImplementedError


class EnginePanel(ShownPanel):
    """The ready queues, next first, and the engine threads' stacks."""

    def key(self, shown: Shown) -> object:
        state = shown.state
        devices = sorted({t.device for t in state.threads.values()} | set(state.queues))
        lanes = tuple((name, t.stack) for name, t in sorted(state.threads.items()))
        return (devices, state.queues, lanes)

    def draw(self, shown: Shown) -> Group:
        state = shown.state
        devices = sorted({t.device for t in state.threads.values()} | set(state.queues))
        return Group(
            Text("ready queues (next first)", style="bold"),
            queues_view(state, devices),
            Text("engine threads", style="bold"),
            threads_view(state),
        )


class ExplainLine(Static):
    """The current step in plain English."""

    shown: reactive[Shown | None] = reactive(None, always_update=True, repaint=False)
    """What the app shows (bound to the app's)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._drawn: tuple[Trace, TraceEvent | None] | None = None

    def watch_shown(self, shown: Shown | None) -> None:
        if shown is None:
            return
        key = (shown.driver.trace, shown.state.event)
        if self._drawn is not None and key[0] is self._drawn[0] and key[1] == self._drawn[1]:
            return
        self._drawn = key
        self.update(explain_line(*key))


class Inspector(ShownPanel):
    """The selected node: its status, gradients, saved values, and NaN findings."""

    def key(self, shown: Shown) -> object:
        task, node_id, state = shown.task, shown.selected, shown.state
        if task is None or node_id is None or node_id not in task.nodes:
            return (bool(shown.driver.trace.graph_tasks), shown.focus, shown.heading)
        try:
            node_state = state.node(node_id, task.id)
        except KeyError:
            node_state = None
        breakpoint_ = node_id in shown.driver.breakpoints.nodes
        findings: tuple[Finding, ...] = ()
        if node_id in shown.flagged or (node_state is not None and non_finite(node_state)):
            findings = shown.findings.at(shown.driver.trace, task.id, node_id, state.step)
        # Why its leaf got no gradient: recorded after the call (grads -o, record --why).
        why = node_findings(shown.driver.trace, task.id, task.nodes[node_id])
        focus = shown.focus if shown.box else ""  # the box's hint says what opens it from there
        return (task.id, node_id, node_state, breakpoint_, findings, shown.box, focus, why)

    def draw(self, shown: Shown) -> Any:
        key = self._drawn  # the key just worked out (see ShownPanel.watch_shown)
        if not isinstance(key, tuple) or len(key) == 3:
            return inspect_nothing(shown.driver.trace, shown.state, shown.focus, shown.heading)
        assert shown.task is not None
        _, node_id, node_state, breakpoint_, findings, box, focus, (why, off) = key
        info = shown.task.nodes[node_id]
        values = values_recorded(shown.driver.trace.header)
        node = inspect_node(info, node_state, shown.task, breakpoint_, findings, values, why, off)
        return Group(in_box(box, focus), node) if box else node


class StatusBar(Static):
    """Step k of N, live or replay, what the last move found, breakpoints, problems."""

    shown: reactive[Shown | None] = reactive(None, always_update=True, repaint=False)
    """What the app shows (bound to the app's)."""

    def watch_shown(self, shown: Shown | None) -> None:
        if shown is None:
            return
        state = shown.state
        # Text, not markup: the message quotes names and errors (Note [Names are text]).
        line = Text(one_line(" · ".join(status_parts(shown)), STATUS_LIMIT))
        self.update(line, layout=False)  # one line, always
        self.set_class(shown.busy, "-busy")
        self.set_class(bool(state.errors or state.anomalies), "-problem")


def status_parts(shown: Shown) -> list[str]:
    """The status bar's parts, in order."""
    driver, state = shown.driver, shown.state
    parts = [f"step {driver.position} of {driver.recorded}"]
    if driver.live:
        if shown.busy:
            parts.append("▶ engine running… (x pauses)")
        elif driver.finished:
            parts.append("live · program finished")
        elif driver.recorded_all:
            parts.append("live · program finished · replaying")
        elif driver.kept_finding:
            parts.append("live · program running")
        else:
            parts.append("live · engine paused")
        if driver.truncated:
            parts.append("recording stopped at max_events; the program runs on unrecorded")
        if driver.kept_finding:
            parts.append(
                f"kept the last {driver.kept_calls:,} calls, up to the first NaN/Inf; "
                "no longer recording"
            )
        elif driver.kept_calls is not None:
            parts.append(f"keeps the last {driver.kept_calls:,} calls")
    else:
        parts.append("replay")
        if observed(driver.trace.header) == "calls":  # Note [Observation levels]
            parts.append("order derived, not observed")
    if shown.message:  # what the last move found: first, where a narrow bar keeps it
        parts.append(shown.message)
    if state.graph_task is not None:
        parts.append(f"graph task {state.graph_task}")
    marks = driver.breakpoints
    if marks.nodes:
        parts.append(f"⏺ {len(marks.nodes)}")
    if marks.non_finite:
        parts.append("break on NaN/Inf")
    if state.errors or state.anomalies:
        errors, anomalies = len(state.errors), len(state.anomalies)
        parts.append(
            f"⚠ {errors} error{'' if errors == 1 else 's'}, "
            f"{anomalies} anomal{'y' if anomalies == 1 else 'ies'}"
        )
    if shown.reading:
        parts.append("i: the program reads a line")
    if shown.printed:
        parts.append("o: program output")
    return parts


def explain_line(trace: Trace, event: TraceEvent | None) -> Text:
    """The current step in plain English (as ``demo --print`` says it, see draw.render.words)."""
    if event is None:
        return Text("Step 0: nothing has run yet. s steps one event; ? lists every key.")

    def label(node_id: int | None, name: str | None) -> str:
        if node_id is None:
            return one_line(name or "")
        if name is None:
            info = next(
                (t.nodes[node_id] for t in trace.graph_tasks.values() if node_id in t.nodes),
                None,
            )
            name = info.name if info is not None else "node"
        return f"{one_line(name, 80)} #{node_id}"

    text = Text(f"{event.index + 1}: ", style="bold")
    text.append(one_line(explain(event, event.data, label), 400))
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text
