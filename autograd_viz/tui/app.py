"""The Textual app: step through a backward pass, live or from a trace.

The app holds what is shown (:attr:`VizApp.shown`, which the panels watch) and
moves the driver; each other job is an object of its own: finding
(:mod:`~autograd_viz.tui.finding`), exporting (:mod:`~autograd_viz.tui.exporting`),
what the program prints (:mod:`~autograd_viz.tui.capture`) and the lines it reads
(:mod:`~autograd_viz.tui.answering`), the NaN analysis
(:mod:`~autograd_viz.tui.findings`), moves in a thread when live
(:mod:`~autograd_viz.tui.moves`, Note [The UI never waits for the engine]).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container, VerticalScroll
from textual.message import Message
from textual.reactive import reactive

from autograd_viz.trace import GraphTaskInfo
from autograd_viz.trace.replay import ExecutionState
from autograd_viz.trace.text import one_line
from autograd_viz.tui.answering import STDERR, STDOUT, Answerer, ProgramReads, ProgramWrote
from autograd_viz.tui.call_picker import task_choices
from autograd_viz.tui.capture import PrintCapture
from autograd_viz.tui.closing import while_open
from autograd_viz.tui.dag import DagView
from autograd_viz.tui.driver import Driver
from autograd_viz.tui.exporting import Exporter
from autograd_viz.tui.finding import Finder
from autograd_viz.tui.findings import NanFindings
from autograd_viz.tui.frozen import Freezer
from autograd_viz.tui.keybar import KeyBar
from autograd_viz.tui.moves import Moved, Mover
from autograd_viz.tui.nodes import NodeList
from autograd_viz.tui.panels import EventLog
from autograd_viz.tui.program_input import LineRequest
from autograd_viz.tui.prompt import PromptBar
from autograd_viz.tui.rows import RowList
from autograd_viz.tui.screens import HelpScreen, MainScreen, TaskPicker, TextScreen, help_keys
from autograd_viz.tui.shown import (
    STATUS_LIMIT,
    EnginePanel,
    ExplainLine,
    Inspector,
    Shown,
    ShownPanel,
    StatusBar,
    explain_line,
    task_title,
)

if TYPE_CHECKING:
    from autograd_viz.tui.streams import ProgramStreams

WIDE = (120, 32)
"""From this size up (columns, rows), the wide layout."""

VIEWS = ("topo", "tree", "dag")

SIDE_COLUMNS = (44, 72)
"""The columns of the panels beside the graph in the wide layout: at least, and as the
stylesheet gives them (Note [The graph panel widens])."""

FOCUSED_SIDE = 36
"""The columns left beside the drawn DAG while it has the focus (Note [The graph panel
widens]); ``z`` gives it the whole screen."""

GRAPH_CHROME = 4
"""Columns of the graph panel that are not its view's: the border and the padding."""

# Note [The graph panel widens]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# At 120 columns the stylesheet gives the graph 48 and the ready queues and
# the inspector 72, enough for the topological list. The module tree's headings
# (``model.layers.{0..11} × 12 · TransformerEncoderLayer · 624 nodes``) and a
# drawing of boxes want more: cut, a name lost both its ends to the view's
# edge and to scrolling. So in the tree and the drawn DAG the app gives the
# graph what its widest row takes, and the panels beside it keep at least 44
# columns (the inspector's lines wrap there, they are never cut). A drawing
# with module frames is wider than a tree: while it has the focus the panels
# beside it keep 36 (FOCUSED_SIDE), the drawing gets the rest (80 of 120
# columns), and ``z`` gives it the whole screen.

__all__ = ["STATUS_LIMIT", "VIEWS", "WIDE", "Moved", "VizApp", "explain_line"]


class VizApp(App[int]):
    """Step through a backward pass: the graph, ready queues, threads, inspector, timeline.

    The app says what is shown (:attr:`shown`); the panels redraw themselves
    from it (Note [Panels watch what is shown]). Its other jobs are objects of
    their own: moving the driver (:attr:`mover`), finding (:attr:`finder`),
    exporting (:attr:`exporter`), what the program prints (:attr:`capture`) and
    the lines it reads (:attr:`answerer`), the NaN analysis the inspector shows
    (:attr:`findings`).
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
        Binding("i", "program_input", "Type the line the program reads", show=False),
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
        self._stopped = False
        self.path: tuple[int, ...] = ()
        """Node ids from the loss to the first problem ``a`` found, highlighted everywhere."""
        self.capture = PrintCapture()
        """What the program printed while the app ran."""
        self.findings = NanFindings()
        """The NaN analysis the inspector shows."""
        self.mover = Mover(self)
        """The keys that move the driver."""
        self.finder = Finder(self)
        """``/``: what to find, and selecting it."""
        self.exporter = Exporter(self)
        """``d``: the step written as a picture."""
        self.freezer = Freezer(self, self._building, live=driver.live) if freeze else None
        """Freezes what the builds in threads made, once none runs; only where the app is the
        whole process (Note [What the app built is frozen])."""
        self.streams: ProgramStreams | None = None
        """The program's descriptors while the app has the terminal (``run``; Note [The
        program writes to a terminal of its own]); the driver draws on their terminal."""
        self.answerer = Answerer(self)
        """``i``: the lines the program reads."""
        self._side = SIDE_COLUMNS[1]  # the columns beside the graph (Note [The graph panel...])

    @property
    def closing(self) -> bool:
        """``q`` stopped the app, or it is exiting: handlers still queued do nothing (Note
        [Messages still queued while the app closes] in :mod:`autograd_viz.tui.closing`)."""
        return self._stopped or self._exit

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
        self.answerer.ask()  # a read that came before the app was up

    def _built(self, _: Message | None = None) -> None:
        if self.freezer is not None:
            self.freezer.built()

    def on_node_list_listed(self, message: Message) -> None:
        self._built(message)
        self._fit_graph()

    on_dag_view_made = _built  # its drawing's width comes with DagView.Widened

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
        self._fit_graph()

    @while_open
    def _fit_graph(self, _: Message | None = None) -> None:
        """In the wide layout, give the tree and the drawing the columns they take whole, down
        to :data:`SIDE_COLUMNS` for the panels beside them (Note [The graph panel widens])."""
        body = self.query_one("#body")
        view = self.view
        wanted: int | None = None
        if body.has_class("-wide") and view != "topo":
            wanted = (
                self.query_one(DagView).wanted_width
                if view == "dag"
                else self.query_one(NodeList).wanted_width
            )
        side = SIDE_COLUMNS[1]
        if wanted is not None:
            dag = self.query_one(DagView)
            least = FOCUSED_SIDE if view == "dag" and dag.has_focus else SIDE_COLUMNS[0]
            side = max(least, min(side, self.size.width - wanted - GRAPH_CHROME))
        if side != self._side:  # a restyle costs a frame: only on a change
            self._side = side
            if side == SIDE_COLUMNS[1]:
                body.styles.clear_rule("grid_columns")  # the stylesheet's, for either layout
            else:
                body.styles.grid_columns = f"1fr {side}"

    on_dag_view_widened = _fit_graph

    @while_open
    def on_dag_view_reboxed(self, _: Message) -> None:
        self.refresh_status()  # the inspector says the box the node is in, if it still is

    # -- the view ------------------------------------------------------------------------
    @while_open
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
        graph.border_title = task_title(task, state, pinned=self.pinned_task is not None)
        view = self.view
        graph.border_subtitle = f"{view} view · v cycles" + (
            " · enter opens/closes a box" if view == "dag" else ""
        )
        self.query_one(EventLog).show(self.driver.trace, self.driver.position)
        self._publish(state, task)
        self._fit_graph()

    def refresh_inspector(self, state: ExecutionState | None = None) -> None:
        """Show the selected node in the inspector."""
        self.refresh_status(state)

    # -- what the parts found (Host: they call these; only the app sets its state) --------

    def say(self, text: str) -> None:
        """Show ``text`` in the status bar: the last thing a move or a search found."""
        self.message = text

    def set_busy(self, busy: bool) -> None:
        """A live move starts running in a worker thread, or has ended."""
        self.busy = busy

    def pin(self, task: int | None) -> None:
        """Show graph task ``task`` in the node list; ``None`` follows the current step."""
        self.pinned_task = task

    def mark_path(self, path: tuple[int, ...]) -> None:
        """Highlight these node ids, from the loss to the first problem found, everywhere."""
        self.path = path

    @while_open
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
            self.answerer.waiting,
            *self._under_focus(),
        )

    def _under_focus(self) -> tuple[str, tuple[str, bool] | None, str]:
        """For the inspector's hints: the panel with the focus, the call or fold row under the
        node list's cursor, the drawn box holding the selected node."""
        nodes, dag = self.query_one(NodeList), self.query_one(DagView)
        focused = self.focused
        focus = "nodes" if focused is nodes else "dag" if focused is dag else ""
        heading = nodes.heading if nodes.display else None
        return focus, heading, dag.box if dag.display else ""

    def on_descendant_focus(self, _: events.DescendantFocus) -> None:
        if self.closing:
            return
        if self.shown is not None:
            self.refresh_status()  # the inspector's hints follow the focus
        self._follow_focus()

    def _follow_focus(self) -> None:
        """The key bar starts with the keys of the panel that has the focus (Note [The key
        bar follows the focus] in :mod:`~autograd_viz.tui.keybar`)."""
        focused = self.focused
        nodes = self.query_one(NodeList)
        focus = ""
        if focused is nodes:
            focus = nodes.view
        elif focused is self.query_one(DagView):
            focus = "dag"
        elif focused is self.query_one(EventLog):
            focus = "events"
        self.query_one(KeyBar).follow(focus)
        self._fit_graph()  # the drawing takes more columns while it has the focus

    def shown_task(self, state: ExecutionState) -> GraphTaskInfo | None:
        """The graph task in the node list: the pinned one, or the current step's."""
        tasks = self.driver.trace.graph_tasks
        gid = self.pinned_task if self.pinned_task is not None else state.graph_task
        return tasks.get(gid) if gid is not None else None

    @while_open
    def on_row_list_highlighted(self, message: RowList.Highlighted) -> None:
        if isinstance(message.rows, NodeList):
            state = self.driver.state()
            dag = self.query_one(DagView)
            dag.show(self.shown_task(state), state, message.rows.selected, self.path)
            self.refresh_inspector(state)  # after the drawing: it says the box the node is in

    @while_open
    def on_dag_view_picked(self, message: DagView.Picked) -> None:
        """← → in the drawing: select the node (or a box's first node) everywhere."""
        self.query_one(NodeList).select(message.node_id)

    @while_open
    def on_row_list_chosen(self, message: RowList.Chosen) -> None:
        if isinstance(message.rows, EventLog) and not self.busy:
            self.driver.goto(message.row + 1)
            self.message = ""
            self.refresh_view(follow=True)

    # -- moves (Note [The UI never waits for the engine]) -------------------------------
    def action_move(self, action: str) -> None:
        """Run a forward move of the driver (in a worker when live)."""
        self.mover.forward(action)

    def on_moved(self, message: Moved) -> None:
        self.mover.moved(message)

    def action_pause(self) -> None:
        self.mover.pause()

    def action_step_back(self) -> None:
        self.mover.back(self.driver.back)

    def action_back_node(self) -> None:
        self.mover.back(self.driver.back_node)

    def action_rewind(self) -> None:
        self.mover.back(lambda: self.driver.goto(0))

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
        self.finder.ask()

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
        self._follow_focus()  # the tree's keys are not the list's

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
        self.exporter.ask()

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

    # -- the program's streams (Notes [The program writes to a terminal of its own] and
    # [The program reads through the prompt]) ---------------------------------------------
    def program_wrote(self, text: str, stderr: bool) -> None:
        """Keep what arrived through the program's descriptor 1 or 2 (any thread)."""
        lines = self.capture.lines(text, stderr, STDERR if stderr else STDOUT)
        first = bool(lines) and self.capture.keep(lines, stderr)
        self._from_thread(ProgramWrote(first))

    def program_reads(self, request: LineRequest) -> None:
        """The program waits for ``request``'s line (on the program's thread)."""
        if self.answerer.reads(request):
            self._from_thread(ProgramReads())

    def exit_from_thread(self) -> None:
        """Quit as ``q`` does, from any thread (a signal handler's)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self.exit()  # not running: it will not start
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the app is gone
            loop.call_soon_threadsafe(self.interrupt)

    def _from_thread(self, message: Message) -> None:
        """Post ``message`` from any thread; before the app runs, ``on_mount`` catches up."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the app is gone
            loop.call_soon_threadsafe(self.post_message, message)

    @while_open
    def on_program_wrote(self, message: ProgramWrote) -> None:
        if message.first:
            self.refresh_status()  # says that `o` shows it
        self.answerer.wrote()

    @while_open
    def on_program_reads(self, _: ProgramReads) -> None:
        self.answerer.ask()

    def action_program_input(self) -> None:
        if not self.answerer.ask():
            self.notify("The program is not reading a line.")

    def interrupt(self) -> None:
        """Quit, interrupting the program (Ctrl+C while it reads, a signal)."""
        self.stop_driver()
        self.exit(0)

    def action_output(self) -> None:
        text = self.capture.text() or "(nothing printed yet)"
        self.push_screen(TextScreen("What the program printed", text))

    def action_help(self) -> None:
        keys = help_keys(self.BINDINGS, {"question_mark": "?", "slash": "/"})
        keys += help_keys(DagView.BINDINGS, {"right": "→", "left": "←"}, " (drawn DAG)")
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
            self.answerer.stop()  # KeyboardInterrupt where the program reads

    def on_unmount(self) -> None:
        self.stop_driver()
