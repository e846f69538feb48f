"""The Textual app: step through a backward pass, live or from a trace.

Note [The UI never waits for the engine]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A live driver's forward moves block until engine threads emit events, and a
paused engine thread waits for the UI. Those moves run in a thread worker that
posts :class:`Moved` back (``post_message`` is thread-safe); widgets are only
touched on the UI loop. One move runs at a time. Quitting stops the live
session first, which releases every paused engine thread with
``SessionCancelled``, so the worker returns and the process can exit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container, VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.reactive import reactive

from autograd_viz.trace import GraphTaskInfo, Trace, TraceEvent
from autograd_viz.trace.replay import ExecutionState
from autograd_viz.trace.text import one_line
from autograd_viz.tui.calls import task_choices
from autograd_viz.tui.capture import PrintCapture
from autograd_viz.tui.dag import DagView
from autograd_viz.tui.driver import Driver
from autograd_viz.tui.findings import NanFindings
from autograd_viz.tui.frozen import Freezer
from autograd_viz.tui.keybar import KeyBar
from autograd_viz.tui.nodes import NodeList
from autograd_viz.tui.panels import EventLog
from autograd_viz.tui.pictures import Pictures
from autograd_viz.tui.prompt import PromptBar
from autograd_viz.tui.rows import RowList
from autograd_viz.tui.screens import HelpScreen, MainScreen, TaskPicker, TextScreen
from autograd_viz.tui.shown import (
    STATUS_LIMIT,
    EnginePanel,
    ExplainLine,
    Inspector,
    Shown,
    ShownPanel,
    StatusBar,
    explain_line,
)

WIDE = (120, 32)
"""From this size up (columns, rows), the wide layout."""

VIEWS = ("topo", "tree", "dag")

__all__ = ["STATUS_LIMIT", "VIEWS", "WIDE", "Moved", "VizApp", "explain_line"]


class Moved(Message):
    """A move that ran in a worker thread finished (see Note [The UI never waits...])."""

    def __init__(self, action: str, event: TraceEvent | None, error: BaseException | None):
        super().__init__()
        self.action = action
        self.event = event
        self.error = error


_Handler = TypeVar("_Handler", bound=Callable[..., Any])


def _while_open(handler: _Handler) -> _Handler:
    """``handler`` (of a message, or a callback) does nothing once the app is quitting.

    Note [Messages still queued while the app closes]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    A key that quits right after one that moved the cursor (``/`` Enter, ``q``)
    leaves messages queued: the row highlighted, a thread's rows or pictures
    arriving. Textual still handles what is queued in each widget while it
    removes the widgets one by one, so a handler that looks up a panel
    (``query_one``) can run when that panel is gone, and its ``NoMatches``
    was the app's last word. Such a handler does nothing once ``q`` stopped
    the app, and a panel not found while the app is no longer running means
    it has gone, not a bug: that is ignored too.
    """

    @functools.wraps(handler)
    def guarded(self: VizApp, *args: Any, **kwargs: Any) -> Any:
        if self._stopped or self._exit:
            return None
        try:
            return handler(self, *args, **kwargs)
        except NoMatches:
            if self.is_running:
                raise
            return None  # the app is closing: its panels are gone

    return guarded  # type: ignore[return-value]


class VizApp(App[int]):
    """Step through a backward pass: the graph, ready queues, threads, inspector, timeline.

    The app moves the driver and says what is shown (:attr:`shown`); the panels
    redraw themselves from it (Note [Panels watch what is shown]). What a
    program prints is kept by a :class:`~autograd_viz.tui.capture.PrintCapture`,
    the NaN analysis by :class:`~autograd_viz.tui.findings.NanFindings`.
    """

    CSS_PATH = "app.tcss"
    TITLE = "autograd-viz"
    ALLOW_IN_MAXIMIZED_VIEW = "#explain, #status, #keys, #prompt"  # zoom keeps "step k of N"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s,space,right", "move('step')", "Step"),
        Binding("n", "move('step_node')", "Next node"),
        Binding("p,left", "step_back", "Back"),
        Binding("c", "move('continue_')", "Continue"),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
        Binding("e", "move('run_to_end')", "End"),
        Binding("b", "toggle_breakpoint", "Breakpoint"),
        Binding("f", "toggle_non_finite", "Break on NaN"),
        Binding("a", "move('first_problem')", "First anomaly"),
        Binding("d", "export", "Export"),
        Binding("slash", "search", "Find"),
        Binding("t", "pick_task", "Task"),
        Binding("v", "cycle_view", "View"),
        Binding("x", "pause", "Pause a running continue", show=False),
        Binding("o", "output", "Program output", show=False),
        Binding("P", "back_node", "Back a node", show=False),
        Binding("r", "rewind", "Rewind to step 0", show=False),
        Binding("z", "zoom", "Zoom panel", show=False),
        Binding("R", "next_process", "Next rank (several traces)", show=False),
    ]

    shown: reactive[Shown | None] = reactive(None, always_update=True, repaint=False)
    """What is shown now; the panels are bound to it."""

    def __init__(
        self,
        driver: Driver,
        *,
        source: str,
        processes: Sequence[tuple[str, Driver]] = (),
        freeze: bool = False,
    ) -> None:
        super().__init__()
        self.driver = driver
        """What the app steps through."""
        self.source = source
        """What is shown, for the title bar: a script, a trace file, ``demo``."""
        self.processes = list(processes) or [(source, driver)]
        """Each process's title and driver: ``replay`` of several ranks' traces; ``R`` switches."""
        self.pinned_task: int | None = None
        """The graph task the node list shows; ``None`` follows the current step."""
        self.busy = False
        """A live move is running in a worker thread."""
        self.message = ""
        """The last thing a move found, shown in the status bar."""
        self._query: str | None = None
        self._stopped = False
        self.path: tuple[int, ...] = ()
        """Node ids from the loss to the first problem ``a`` found, highlighted everywhere."""
        self.capture = PrintCapture()
        """What the program printed while the app ran."""
        self.findings = NanFindings()
        """The NaN analysis the inspector shows."""
        self.freezer = Freezer(self, self._building) if freeze else None
        """Freezes what the builds in threads made, once none runs; only where the app is the
        whole process (Note [What the app built is frozen])."""

    @property
    def output(self) -> list[tuple[bool, str]]:
        """What the program printed while the app ran: ``(to stderr, text)`` pieces."""
        return self.capture.output

    # -- layout --------------------------------------------------------------------------
    def get_default_screen(self) -> MainScreen:
        return MainScreen(id="_default")

    def compose(self) -> ComposeResult:
        with Container(id="body"):
            with Container(id="graph", classes="panel"):
                yield NodeList(id="nodes")
                yield DagView(id="dag")
            engine = EnginePanel(id="engine-body").data_bind(VizApp.shown)
            yield VerticalScroll(engine, id="engine", classes="panel")
            inspector = Inspector(id="inspector-body").data_bind(VizApp.shown)
            yield VerticalScroll(inspector, id="inspector", classes="panel")
            with Container(id="events", classes="panel"):
                yield EventLog(id="timeline")
        yield ExplainLine(id="explain").data_bind(VizApp.shown)
        yield StatusBar(id="status").data_bind(VizApp.shown)
        yield KeyBar(id="keys")
        yield PromptBar(id="prompt")

    def on_mount(self) -> None:
        self.title = f"autograd-viz · {one_line(self.source)}"
        self.query_one("#engine").border_title = "ready queues · engine threads"
        self.query_one("#inspector").border_title = "inspector"
        self.query_one("#events").border_title = "events"
        self._layout(self.size.width, self.size.height)
        self.query_one(NodeList).focus()
        self.begin_capture_print(self)  # a live program's prints would tear the screen
        self.driver.start()
        self.refresh_view(follow=True)
        if self.driver.live and self.driver.position == 0:
            self.action_move("step")
        self._built()  # the first rows and the index are being made

    def _built(self, _: Message | None = None) -> None:
        if self.freezer is not None:
            self.freezer.built()

    on_node_list_listed = _built
    on_dag_view_made = _built

    def _building(self) -> bool:
        """Rows, pictures or the replay's index are being made in a thread."""
        if any(w.group in ("listing", "picture") and not w.is_finished for w in self.workers):
            return True
        indexed = getattr(self.driver, "indexed", None)  # a replay's, made ahead
        return indexed is not None and not indexed.is_set()

    def on_resize(self, event: events.Resize) -> None:
        self._layout(event.size.width, event.size.height)

    def _layout(self, width: int, height: int) -> None:
        self.query_one("#body").set_class(width >= WIDE[0] and height >= WIDE[1], "-wide")

    # -- the view ------------------------------------------------------------------------
    @_while_open
    def refresh_view(self, *, follow: bool = False) -> None:
        """Redraw every panel for the driver's position; ``follow`` selects the event's node."""
        state = self.driver.state()
        task = self.shown_task(state)
        nodes = self.query_one(NodeList)
        nodes.show(task, state, self.driver.breakpoints.nodes, frozenset(self.path))
        event = state.event
        if (
            follow
            and event is not None
            and event.node_id is not None
            and task is not None
            and event.graph_task in (task.id, 0)  # 0: a forward anomaly, before any task
        ):
            nodes.select(event.node_id, notify=False)
        self.query_one(DagView).show(task, state, nodes.selected, self.path)
        graph = self.query_one("#graph")
        graph.border_title = self._task_title(task, state)
        view = self.view
        graph.border_subtitle = f"{view} view · v cycles" + (
            " · enter opens/closes a box" if view == "dag" else ""
        )
        self.query_one(EventLog).show(self.driver.trace, self.driver.position)
        self._publish(state, task)

    def refresh_inspector(self, state: ExecutionState | None = None) -> None:
        """Show the selected node in the inspector."""
        self.refresh_status(state)

    @_while_open
    def refresh_status(self, state: ExecutionState | None = None) -> None:
        """The status bar (and the inspector): step k of N, live or replay, breakpoints."""
        state = state or self.driver.state()
        self._publish(state, self.shown_task(state))

    def _publish(self, state: ExecutionState, task: GraphTaskInfo | None) -> None:
        """Say what is shown; the panels bound to :attr:`shown` redraw what changed."""
        nodes = self.query_one(NodeList)
        self.shown = Shown(
            self.driver,
            state,
            task,
            nodes.selected,
            nodes.flagged,
            self.findings,
            self.busy,
            self.message,
            bool(self.output),
        )

    def shown_task(self, state: ExecutionState) -> GraphTaskInfo | None:
        """The graph task in the node list: the pinned one, or the current step's."""
        tasks = self.driver.trace.graph_tasks
        gid = self.pinned_task if self.pinned_task is not None else state.graph_task
        return tasks.get(gid) if gid is not None else None

    def _task_title(self, task: GraphTaskInfo | None, state: ExecutionState) -> str:
        if task is None:
            return "graph"
        title = f"graph task {task.id} · {len(task.nodes)} nodes"
        if task.reentrant_depth:
            title += f" · reentrant depth {task.reentrant_depth}"
            started = state.started_by(task.id)
            if started is not None:
                title += f" from #{started[1]}"
        if self.pinned_task is not None:
            title += " · pinned (t)"
        return title

    @_while_open
    def on_row_list_highlighted(self, message: RowList.Highlighted) -> None:
        if isinstance(message.rows, NodeList):
            state = self.driver.state()
            self.refresh_inspector(state)
            dag = self.query_one(DagView)
            dag.show(self.shown_task(state), state, message.rows.selected, self.path)

    @_while_open
    def on_dag_view_picked(self, message: DagView.Picked) -> None:
        """← → in the drawing: select the node (or a box's first node) everywhere."""
        self.query_one(NodeList).select(message.node_id)

    @_while_open
    def on_row_list_chosen(self, message: RowList.Chosen) -> None:
        if isinstance(message.rows, EventLog) and not self.busy:
            self.driver.goto(message.row + 1)
            self.message = ""
            self.refresh_view(follow=True)

    # -- moves ---------------------------------------------------------------------------
    def action_move(self, action: str) -> None:
        """Run a forward move of the driver (in a worker when live)."""
        if self.busy:
            self.notify("The engine is running: x pauses it, q stops it.")
            return
        if self.driver.live:
            self.busy = True
            self.refresh_status()
            self._run_move(action)
            return
        self.on_moved(_perform(self.driver, action))

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def _run_move(self, action: str) -> None:
        self.post_message(_perform(self.driver, action))

    def on_moved(self, message: Moved) -> None:
        self.busy = False
        if self._stopped:
            return
        self.message = _describe_move(message, self.driver)
        if message.action == "first_problem":
            self.path = _path_to(self.driver.trace, message.event)
            self._show_task_of(message.event)
        self.refresh_view(follow=True)

    def _show_task_of(self, event: TraceEvent | None) -> None:
        """Pin the graph task that runs ``event``'s node when the list shows another.

        A forward anomaly comes before any backward call: it belongs to no graph
        task, and the node list would show nothing to select.
        """
        if event is None or event.node_id is None:
            return
        shown = self.shown_task(self.driver.state())
        if shown is not None and event.node_id in shown.nodes:
            return
        task = _task_running(self.driver.trace, event)
        if task is not None:
            self.pinned_task = task.id

    def action_pause(self) -> None:
        if not self.busy:
            self.message = "nothing is running"
            self.refresh_status()
            return
        self.driver.pause()

    def action_step_back(self) -> None:
        self._move_back(self.driver.back)

    def action_back_node(self) -> None:
        self._move_back(self.driver.back_node)

    def action_rewind(self) -> None:
        self._move_back(lambda: self.driver.goto(0))

    def _move_back(self, move: Callable[[], object]) -> None:
        if self.busy:
            return
        move()
        self.message = ""
        self.refresh_view(follow=True)

    # -- breakpoints, search, tasks, export ------------------------------------------------
    def action_toggle_breakpoint(self) -> None:
        node_id = self.query_one(NodeList).selected
        if node_id is None:
            self.notify("Select a node first.", severity="warning")
            return
        on = self.driver.breakpoints.toggle(node_id)
        self.message = f"breakpoint {'set on' if on else 'removed from'} #{node_id}"
        self.refresh_view()

    def action_toggle_non_finite(self) -> None:
        marks = self.driver.breakpoints
        marks.non_finite = not marks.non_finite
        what = "stops at" if marks.non_finite else "no longer stops at"
        self.message = f"continue {what} NaN/Inf gradients and anomalies"
        self.refresh_status()

    def action_search(self) -> None:
        self.query_one(PromptBar).ask(
            "Find a module, a parameter or a node (its id, or any part of its name)",
            self._find,
            value=self._query or "",
            placeholder="layer4.1.conv2, fc.weight, MulBackward0 #12, 12, W_h",
        )
        task = self.shown_task(self.driver.state())
        dag = self.query_one(DagView)
        if task is not None:  # a big task's names are read in a thread while one types,
            self.call_after_refresh(dag.prepare, self.driver.trace, task)  # once it is painted

    @_while_open
    def _find(self, query: str | None) -> None:
        """Select what ``query`` names (in a big task, once a thread has read its names)."""
        if not query:
            return
        self._query = query
        task = self.shown_task(self.driver.state())
        if task is None:
            self._find_node(query)
            return
        waited = False

        def then(pictures: Pictures) -> None:
            if waited:
                self.message = ""
            if not self._find_by_name(query, pictures):
                self._find_node(query)

        if not self.query_one(DagView).with_pictures(self.driver.trace, task, then):
            waited = True
            names = f"{len(task.nodes):,} nodes' names"
            self.message = f"finding {one_line(query, 80)}: reading {names}…"
            self.refresh_status()

    @_while_open
    def _find_node(self, query: str) -> None:
        """Select the next node whose id or name ``query`` is part of, in any graph task."""
        from autograd_viz.tui.search import find_next

        state = self.driver.state()
        found = find_next(
            self.driver.trace, self.shown_task(state), self.query_one(NodeList), query
        )
        if found is None:
            self.refresh_status()
            self.notify(f"No node matches {one_line(query)!r}.", severity="warning", markup=False)
            return
        task_id, node_id = found
        shown = self.shown_task(state)
        if shown is None or shown.id != task_id:
            self.pinned_task = task_id
            self.refresh_view()
        self.query_one(NodeList).select(node_id)

    @_while_open
    def _find_by_name(self, query: str, pictures: Pictures) -> bool:
        """Select what ``query`` names exactly, as every view names it: a module path (its
        box opened in the drawing), a fold, a parameter, ``Name #id``; ``False`` if nothing."""
        from autograd_viz.draw.graph_view import GraphViewError

        dag = self.query_one(DagView)
        if self.shown_task(self.driver.state()) is not pictures.task:
            return False  # another task is shown now
        try:
            target = pictures.resolve(query.strip())
        except GraphViewError:
            return False
        ids = [pictures.view.nodes[key].info.id for key in target.nodes]
        if not ids:
            return False
        tree = pictures.tree
        for scope in target.scopes:  # a module found is drawn whole, as --around draws it
            inside = tree.descendants(scope)
            dag.opened.update(inside)
            dag.closed.difference_update(inside)
            dag.unfolded.update(tree.group_of[i] for i in inside if i in tree.group_of)
        if target.group is not None:
            dag.unfolded.add(target.group)
        if not target.scopes:  # a node or a parameter: open the modules around it
            around = tree.scope_of.get(target.nodes[0])
            for index in tree.ancestors(around) if around is not None else ():
                dag.opened.add(index)
                dag.closed.discard(index)
                if index in tree.group_of:
                    dag.unfolded.add(tree.group_of[index])
        count = "1 node" if len(ids) == 1 else f"{len(ids):,} nodes"
        self.message = f"{target.kind} {one_line(target.text, 80)}: {count}"
        self.query_one(NodeList).select(ids[0])
        self.refresh_view()
        return True

    def action_pick_task(self) -> None:
        tasks = self.driver.trace.graph_tasks
        if not tasks:
            self.notify("No backward call has started yet.")
            return
        title, rows = task_choices(self.driver.trace)
        choices = [("follow", "follow the current step"), *rows]
        self.push_screen(TaskPicker(choices, title), self._pin_task)

    def _pin_task(self, choice: str | None) -> None:
        if choice is None:
            return
        self.pinned_task = None if choice == "follow" else int(choice)
        self.refresh_view(follow=True)

    @property
    def view(self) -> str:
        """The graph panel's view: ``"topo"``, ``"tree"`` or ``"dag"`` (see :data:`VIEWS`)."""
        if self.query_one(DagView).display:
            return "dag"
        return self.query_one(NodeList).view

    def action_cycle_view(self) -> None:
        """Show the graph panel's next view, keeping the selected node."""
        view = VIEWS[(VIEWS.index(self.view) + 1) % len(VIEWS)]
        nodes = self.query_one(NodeList)
        dag = self.query_one(DagView)
        # Each widget's own display, not a class on #graph: a class change restyles every
        # widget under the panel, which at 120x40 cost more than the rest of the key.
        dag.display = view == "dag"
        nodes.display = view != "dag"
        if view != "dag":
            nodes.set_view(view)
        self.refresh_view()
        if view == "dag" and nodes.has_focus:
            dag.focus()  # Enter opens and closes its boxes
        elif view != "dag" and dag.has_focus:
            nodes.focus()

    def action_next_process(self) -> None:
        """Show the next process's trace (``replay t.rank0.jsonl t.rank1.jsonl``) at its step."""
        if len(self.processes) < 2:
            self.notify("One trace is open; 'replay' several (one per rank) to switch with R.")
            return
        index = next(i for i, (_, d) in enumerate(self.processes) if d is self.driver)
        self.source, self.driver = self.processes[(index + 1) % len(self.processes)]
        self.title = f"autograd-viz · {one_line(self.source)}"
        self.pinned_task = None
        self.path = ()
        self.findings = NanFindings()
        for panel in self.query(ShownPanel):
            panel.forget()
        self.message = f"now showing {self.source}"
        self.refresh_view(follow=True)

    def action_export(self) -> None:
        default = f"autograd-viz-step-{self.driver.position}.svg"
        self.query_one(PromptBar).ask(
            "Export this step as .svg, .png, .pdf or .dot", self._export, value=default
        )

    def _export(self, path: str | None) -> None:
        if not path:
            return
        state = self.driver.state()
        task = self.shown_task(state)
        self._write_export(path, state, None if task is None else task.id)

    @work(thread=True, group="export", exit_on_error=False)
    def _write_export(self, path: str, state: ExecutionState, graph_task: int | None) -> None:
        from autograd_viz.tui.search import export_step

        try:
            written = export_step(state, graph_task, path, self.path)
        except Exception as exc:  # noqa: BLE001 - shown to the user, the app goes on
            self.call_from_thread(
                self.notify, one_line(exc), title="Export failed", severity="error", markup=False
            )
            return
        self.call_from_thread(self.notify, one_line(written), title="Exported", markup=False)

    def action_zoom(self) -> None:
        if self.screen.maximized is not None:
            self.screen.minimize()
            return
        focused = self.focused
        while focused is not None and not focused.has_class("panel"):
            focused = focused.parent  # type: ignore[assignment]
        if focused is not None:
            self.screen.maximized = focused  # panels are containers, which Textual won't offer

    def _print(self, text: str, stderr: bool = False) -> None:
        """Pass on what a program prints a whole line at a time, per thread (see PrintCapture)."""
        lines = self.capture.lines(text, stderr)
        if lines:
            super()._print(lines, stderr)

    def on_print(self, event: events.Print) -> None:
        if self.capture.keep(event.text, event.stderr):
            self.refresh_status()  # says that `o` shows it

    def action_output(self) -> None:
        text = self.capture.text() or "(nothing printed yet)"
        self.push_screen(TextScreen("What the program printed", text))

    def action_help(self) -> None:
        keys = [
            (b.key.replace("question_mark", "?").replace("slash", "/"), b.description)
            for b in self.BINDINGS
            if isinstance(b, Binding)
        ]
        keys += [
            (b.key.replace("right", "→").replace("left", "←"), f"{b.description} (drawn DAG)")
            for b in DagView.BINDINGS
            if isinstance(b, Binding)
        ]
        self.push_screen(HelpScreen(keys))

    async def action_quit(self) -> None:
        self.stop_driver()
        self.exit(0)

    def stop_driver(self) -> None:
        """Stop the live session (once); see Note [The UI never waits for the engine]."""
        if not self._stopped:
            self._stopped = True
            if self.freezer is not None:
                self.freezer.stop()
            self.driver.stop()
            self.capture.flush()

    def on_unmount(self) -> None:
        self.stop_driver()


def _path_to(trace: Trace, event: TraceEvent | None) -> tuple[int, ...]:
    """Node ids from the loss to ``event``'s node, in the graph task that runs it."""
    from autograd_viz.nan.report import path_from_root

    task = _task_running(trace, event)
    if event is None or event.node_id is None or task is None:
        return ()
    return tuple(ref.id for ref in path_from_root(task, event.node_id))


def _task_running(trace: Trace, event: TraceEvent | None) -> GraphTaskInfo | None:
    """The graph task ``event`` belongs to; for a forward anomaly, the first that runs its node."""
    if event is None or event.node_id is None:
        return None
    task = trace.graph_tasks.get(event.graph_task)
    if task is None:
        task = next((t for t in trace.graph_tasks.values() if event.node_id in t.nodes), None)
    return task


def _perform(driver: Driver, action: str) -> Moved:
    """Run one of the driver's moves; what it raises is reported, and the app goes on."""
    try:
        return Moved(action, getattr(driver, action)(), None)
    except Exception as exc:  # noqa: BLE001 - shown in the status bar
        return Moved(action, None, exc)


def _describe_move(message: Moved, driver: Driver) -> str:
    if message.error is not None:
        return f"error: {message.error}"
    event = message.event
    if message.action == "first_problem":
        if event is None:
            return "no anomaly, error or NaN/Inf gradient" + ("" if driver.finished else " so far")
        return f"first problem: {event.kind} at {event.node_name or 'graph task'}"
    stops = message.action == "continue_" or (
        event is not None and driver.breakpoints.matches(event)  # a step that lands on one
    )
    if stops and event is not None:
        where = f"{event.node_name}#{event.node_id}" if event.node_name else "a graph task"
        return f"stopped: {event.kind} {where}"
    if event is None and message.action != "run_to_end" and driver.finished:
        return "end of the backward pass"
    return ""
