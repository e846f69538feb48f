"""The node list: a graph task's nodes grouped by topological number, or as a tree.

Each view's rows are made once per graph task (a :class:`~autograd_viz.tui.listing.Listing`)
and kept while the task is shown, so switching views back and forth costs a
redraw; what a row says about its node (status, dependencies left) is read
from the current :class:`~autograd_viz.trace.replay.ExecutionState` when the
row is drawn, so a step redraws the rows on screen and nothing else.

Note [A big listing is made in a thread]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A graph task of 20,000 nodes takes a good part of a second to list (the module
tree alone is a module view of every node), more than a key may take. Past
:data:`LATER_NODES` nodes, a view's rows are made by a thread worker (a listing
only reads the graph task) while the list says so, and once the first view is
up the other one is made the same way, so that ``v`` finds it ready. A node
the app selects meanwhile is selected when the rows arrive.
"""

from __future__ import annotations

import contextlib

from rich.text import Text
from textual.message import Message

from autograd_viz.grads.recorded import call_grads, norm_text
from autograd_viz.grads.report import CallGrads, FlowRow
from autograd_viz.trace import GraphTaskInfo
from autograd_viz.trace.replay import ExecutionState, NodeState
from autograd_viz.trace.text import printable
from autograd_viz.tui.listing import Listing, Row, RowFormat, guides, node_row
from autograd_viz.tui.rows import RowList

LATER_NODES = 500
"""Graph tasks bigger than this are listed in a thread (Note [A big listing is made...]): a
view's rows take ~25 ms of UI time per 1,000 nodes on a loaded 2-core machine, on top of the
key's own ~40 ms; a few hundred nodes are still listed at once."""

LIST_VIEWS = ("topo", "tree")
"""The node list's views, in the order ``v`` goes through them."""


class NodeList(RowList):
    """The nodes of one graph task at the current step."""

    class Listed(Message):
        """A thread has made the rows of a big graph task (every view's)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.shown_task: GraphTaskInfo | None = None
        """The graph task shown."""
        self.view = "topo"
        """``"topo"`` (grouped by topological_nr) or ``"tree"`` (the module tree; for a graph
        recorded without modules, the graph from the root)."""
        self.state: ExecutionState | None = None
        """The state the rows describe."""
        self.breakpoints: set[int] = set()
        """Node ids with a breakpoint, marked in their rows."""
        self.path: frozenset[int] = frozenset()
        """Node ids on the highlighted path (the loss to the first NaN), marked with »."""
        self.flagged: frozenset[int] = frozenset()
        """Node ids anomaly mode has reported so far, marked with ⚠."""
        self._listings: dict[str, Listing] = {}
        self._listing: Listing | None = None
        self._making: set[str] = set()
        self._wanted: int | None = None
        self._flow: tuple[CallGrads, dict[str, FlowRow]] | None = None

    @property
    def rows(self) -> list[Row]:
        """The rows shown, in order (none while a big graph task's are being made)."""
        return self._listing.rows if self._listing is not None else []

    @property
    def listing(self) -> Listing | None:
        """The rows shown; ``None`` while they are being made in a thread."""
        return self._listing

    def show(
        self,
        task: GraphTaskInfo | None,
        state: ExecutionState,
        breakpoints: set[int],
        path: frozenset[int] = frozenset(),
    ) -> None:
        """Show ``task`` at ``state``; lists the task only when it is a new one."""
        self.state = state
        self.breakpoints = breakpoints
        self.path = path
        self.flagged = frozenset(e.node_id for e in state.anomalies if e.node_id is not None)
        if task is not self.shown_task:
            self.shown_task = task
            self._listings = {}
            self._making = set()
            self._wanted = None
            self._use(self.view)
        self.refresh()

    def set_view(self, view: str) -> None:
        """Switch between ``"topo"`` and ``"tree"``, keeping the selected node."""
        selected = self.selected if self._listing is not None else self._wanted
        self.view = view
        self._use(view)
        if selected is not None:
            self.select(selected)

    @property
    def wanted_width(self) -> int | None:
        """Columns the rows shown take written whole (with the scroll bar); ``None`` while
        they are being made."""
        listing = self._listing
        return None if listing is None else listing.width + 1

    @property
    def heading(self) -> tuple[str, bool] | None:
        """The module call's or fold's row under the cursor (its words, whether it is open);
        ``None`` on a node or a topological heading."""
        rows = self.rows
        row = rows[self.cursor] if 0 <= self.cursor < len(rows) else None
        if row is None or (row.scope is None and row.group is None):
            return None
        return row.heading, row.is_open

    @property
    def selected(self) -> int | None:
        """The node under the cursor (``None`` on a heading or when empty)."""
        rows = self.rows
        if 0 <= self.cursor < len(rows):
            return rows[self.cursor].node_id
        return None

    def select(self, node_id: int, *, notify: bool = True) -> bool:
        """Put the cursor on ``node_id``'s first row; ``False`` when it is not listed.

        While the rows are being made, the node is selected once they are there.
        """
        if self._listing is None and self.shown_task is not None:
            self._wanted = node_id
            return node_id in self.shown_task.nodes
        listing = self._listing
        row = listing.row_of_node.get(node_id) if listing is not None else None
        if row is None and listing is not None and listing.reveal(node_id):
            self.set_row_count(len(listing.rows))  # see Note [Tree rows open and close]
            row = listing.row_of_node.get(node_id)
        if row is None:
            return False
        self.move_to(row, center=True, notify=notify)
        return True

    def _use(self, view: str) -> None:
        """Show ``view``'s rows of the shown task: kept, made now, or asked of a thread."""
        task = self.shown_task
        listing = self._listings.get(view)
        if listing is None and task is not None:
            if len(task.nodes) > LATER_NODES:  # see Note [A big listing is made in a thread]
                self._make_later(task, view)
            else:
                listing = self._listings[view] = Listing(task, view)
        self._listing = listing
        rows = self.rows
        self.set_row_count(len(rows) if listing is not None or task is None else 1)
        if rows and rows[self.cursor].node_id is None and len(rows) > 1:
            self.move_to(self.cursor + 1, notify=False)

    def _make_later(self, task: GraphTaskInfo, view: str) -> None:
        if view in self._making:
            return
        self._making.add(view)
        others = [v for v in LIST_VIEWS if v != view and v not in self._listings]

        def make() -> None:
            for each in (view, *others):  # the one asked for first, then the others
                listing = Listing(task, each)
                with contextlib.suppress(RuntimeError):  # the app closed meanwhile
                    self.app.call_from_thread(self._adopt, listing)
            with contextlib.suppress(RuntimeError):  # the app's loop closed meanwhile
                self.post_message(self.Listed())

        self._making.update(others)
        self.run_worker(make, thread=True, group="listing", exit_on_error=False)

    def _adopt(self, listing: Listing) -> None:
        """Keep rows a thread made, and show them if their task and view are on screen."""
        if listing.task is not self.shown_task:
            return
        self._listings[listing.view] = listing
        self._making.discard(listing.view)
        if listing.view != self.view or self._listing is not None:
            return
        self._use(listing.view)
        wanted, self._wanted = self._wanted, None
        if wanted is None or not self.select(wanted):
            self.move_to(self.cursor)  # the inspector and the drawing follow the cursor

    def row_text(self, row: int) -> Text:
        if self._listing is None:
            count = len(self.shown_task.nodes) if self.shown_task is not None else 0
            return Text(f"listing {count:,} nodes…", style="yellow")
        entry = self._listing.rows[row]
        if entry.node_id is None:
            if entry.scope is None and entry.group is None:
                return Text(f"{entry.prefix}── {entry.heading} ", style="bold dim")
            text = Text(entry.prefix, style="dim")
            text.append("▾ " if entry.is_open else "▸ ", style="bold cyan")
            text.append(f"{entry.heading} ", style="bold" if entry.is_open else "bold cyan")
            return self._module_gradient(entry, text)
        info = self._listing.task.nodes[entry.node_id]
        state = self._state(info.id)
        fmt = self._format()
        text = Text(guides(entry, fmt.guides), style="dim")
        if entry.repeat:
            text.append(f"↺ {printable(info.name)} #{info.id} (shown above)", style="dim italic")
            return text
        mark = info.id in self.breakpoints
        on_path = info.id in self.path
        flagged = info.id in self.flagged
        row_text = node_row(
            info, state, mark, on_path=on_path, fmt=fmt, prefix=text.cell_len, flagged=flagged
        )
        return text.append_text(row_text)

    def _module_gradient(self, entry: Row, text: Text) -> Text:
        """A call's heading with its module's gradient norm in the call, as ``grads`` recorded
        it (Note [Gradient findings in a trace]), flagged when vanishing or exploding."""
        opened = self._listing.opened if self._listing is not None else None
        if entry.scope is None or opened is None or self.state is None or self.shown_task is None:
            return text
        call = call_grads(self.state.trace, self.shown_task.id)
        if call is None:
            return text
        if self._flow is None or self._flow[0] is not call:
            self._flow = (call, {row.module: row for row in call.flow})
        row = self._flow[1].get(opened.tree.scopes[entry.scope].path)
        if row is not None:
            text.append(f"‖g‖ {norm_text(row.grad_norm)}", style="magenta")
            if row.flag:
                text.append(f" {row.flag}", style="bold red")
            text.append(" ")
        return text

    def action_choose(self) -> None:
        """Enter: in the module tree, open or close the call under the cursor (Note [Tree rows
        open and close] in :mod:`~autograd_viz.tui.listing`); elsewhere, choose the row."""
        listing = self._listing
        row = listing.toggle(self.cursor) if listing is not None else None
        if listing is None or row is None:
            super().action_choose()
            return
        self.set_row_count(len(listing.rows))
        self.move_to(row)

    def _format(self) -> RowFormat:
        """The rows' format at the current width (worked out once per width and listing)."""
        assert self._listing is not None
        return self._listing.format(self.row_width)

    def _state(self, node_id: int) -> NodeState | None:
        if self.state is None or self.shown_task is None:
            return None
        try:
            return self.state.node(node_id, self.shown_task.id)
        except KeyError:
            return None
