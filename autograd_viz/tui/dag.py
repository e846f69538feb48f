"""The graph drawn in the terminal: labels in layers, edges as lines, modules as rectangles.

What is drawn is the picture every view draws (:mod:`autograd_viz.tui.pictures`:
closed module calls as boxes, open ones as frames around what they hold with
their names on them (:mod:`autograd_viz.tui.framing`), repeated siblings
folded, the step's modules open); any graph task is drawn, whatever its size.
Where labels go and how each edge runs is worked out once per picture in
:mod:`autograd_viz.tui.routing` (see Note [Every edge is drawn alone]); a step
redraws labels and colours
(:mod:`autograd_viz.tui.canvas`). Enter opens
the box under the selection, or closes the module around it; ← → move the
selection along the drawing.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable

from rich.console import Console
from rich.segment import Segment
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from autograd_viz.draw.model.graph_view import GraphViewError
from autograd_viz.draw.model.showing import Choice
from autograd_viz.trace import GraphTaskInfo, Trace
from autograd_viz.trace.replay import ExecutionState
from autograd_viz.trace.text import one_line, printable
from autograd_viz.tui.canvas import draw_picture
from autograd_viz.tui.later import PictureMaker, make_ahead, upcoming
from autograd_viz.tui.pictures import Item, Picture, Pictures, box_text

LATER_NODES = 500
"""Graph tasks bigger than this have their pictures made in a thread (Note [Drawing a new
picture later] in :mod:`autograd_viz.tui.later`). Every part of a picture's cost grows with
the task's nodes, not with the boxes drawn (the module tree, the names ``/`` reads and each
choice's module view cover every node): on a loaded 2-core machine, Enter on a name ``/``
found took 78 ms of UI time at 1,000 nodes and the first drawing 56 ms, over a key's ~60 ms.
Graphs of a few hundred nodes (resnet18's ~150) are still drawn at once, with no line
saying they are being drawn."""


class DagView(ScrollView, can_focus=True):
    """The drawn graph of the shown graph task, at module level (see the module notes)."""

    BINDINGS = [  # noqa: RUF012 - Textual's declaration style
        Binding("enter", "open_or_close", "Open / close a box", show=False),
        Binding("right", "pick(1)", "Next in the drawing", show=False),
        Binding("left", "pick(-1)", "Back in the drawing", show=False),
    ]

    class Picked(Message):
        """The selection moved to ``node_id`` (the first node of what was picked)."""

        def __init__(self, node_id: int) -> None:
            super().__init__()
            self.node_id = node_id
            """The node to select."""

    class Reboxed(Message):
        """The box the selected node is drawn in changed (Enter, or a picture come from a
        thread): the inspector names it."""

    class Widened(Message):
        """The drawing's width changed: the app may give the view more columns."""

    class Made(Message):
        """A thread has made a graph task's pictures (its module tree and first picture)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._pictures: Pictures | None = None
        self._picture: Picture | None = None
        self._last: tuple[Pictures, Picture] | None = None
        self._opening: GraphTaskInfo | None = None
        self._waiting: list[tuple[GraphTaskInfo, Callable[[Pictures], None]]] = []
        self._current = asyncio.Event()  # set while the picture of what is shown is drawn
        self._current.set()
        self._stale = False
        self.maker = PictureMaker(self, self._failed)
        """Makes a big graph task's pictures in a thread (Note [Drawing a new picture later])."""
        self._drawn_rows: list[Text] = []
        self._head = 0  # rows of notices above the drawing
        self._selected: int | None = None
        self._shown: tuple[GraphTaskInfo | None, ExecutionState | None, tuple[int, ...]] = (
            None,
            None,
            (),
        )
        self.opened: set[int] = set()
        """Module calls opened with Enter."""
        self.closed: set[int] = set()
        """Module calls closed with Enter (the level or the step would open them)."""
        self.unfolded: set[int] = set()
        """Fold groups opened with Enter."""
        self.expanded: tuple[str, ...] = ()
        """Names of the boxes opened with Enter, opened as ``--expand`` opens them (Note
        [Enter is --expand] in :mod:`~autograd_viz.tui.pictures`)."""

    @property
    def wanted_width(self) -> int:
        """Columns the drawing takes whole (with the vertical scroll bar, as wide as styled)."""
        return self.virtual_size.width + self.styles.scrollbar_size_vertical

    @property
    def box(self) -> str:
        """The box the selected node is drawn in, as drawn (``""``: none, or a node drawn as
        itself)."""
        picture, selected = self._picture, self._selected
        if picture is None or selected is None or selected not in picture.item_of:
            return ""
        item = picture.items[picture.item_of[selected]]
        return box_text(item) if item.is_box else ""

    @property
    def picture(self) -> Picture | None:
        """The picture drawn."""
        return self._picture

    def pictures(self, trace: Trace, task: GraphTaskInfo) -> Pictures:
        """The pictures of ``task`` (made once per graph task)."""
        if self._pictures is None or self._pictures.task is not task:
            self._pictures = Pictures(trace, task)
            self.opened, self.closed, self.unfolded = set(), set(), set()
            self.expanded = ()
        return self._pictures

    def with_pictures(
        self, trace: Trace, task: GraphTaskInfo, then: Callable[[Pictures], None]
    ) -> bool:
        """Call ``then`` with the pictures of ``task``: now if they are made or the task is
        small (``True``), else once a thread has made them (``False``)."""
        if self._pictures is not None and self._pictures.task is task:
            then(self._pictures)
            return True
        if len(task.nodes) <= LATER_NODES:
            then(self.pictures(trace, task))
            return True
        self._waiting.append((task, then))
        self._open_later(trace, task, None, None)
        return False

    def prepare(self, trace: Trace, task: GraphTaskInfo) -> None:
        """Start making the pictures of a big ``task`` in a thread, if they are not made."""
        if len(task.nodes) > LATER_NODES:
            self.with_pictures(trace, task, lambda _: None)

    @property
    def redrawing(self) -> bool:
        """What is drawn is a line or the last picture while a thread makes the one to show."""
        return not self._current.is_set()

    async def drawn(self) -> None:
        """Return once the view draws the picture of what it shows, not a line saying it is
        being drawn (tests and benchmarks wait for this, never a sleep)."""
        while not self._current.is_set():
            await self._current.wait()

    def show(
        self,
        task: GraphTaskInfo | None,
        state: ExecutionState | None,
        selected: int | None,
        path: tuple[int, ...] = (),
    ) -> None:
        """Draw ``task`` at ``state`` with ``selected`` highlighted (only while visible)."""
        box = self.box  # before: the inspector names a new one (Reboxed)
        self._shown = (task, state, path)
        self._selected = selected
        if not self.display:
            return
        self._picture = None
        self._head = 0
        self._stale = False
        fresh = self._pictures is None or self._pictures.task is not task
        later = task is not None and len(task.nodes) > LATER_NODES
        if task is None or not task.nodes or state is None:
            self._drawn_rows = [Text("No graph task yet.", style="dim italic")]
        elif fresh and later:  # see Note [Drawing a new picture later]
            self._placeholder(task)
            focus = _focus(state, task)
            centre = selected if focus is None else focus
            self._open_later(state.trace, task, focus, centre, state.step)
        else:
            self._draw(self.pictures(state.trace, task), state, selected, path)
        if self._stale:
            self._current.clear()
        else:
            self._current.set()
        width = max((row.cell_len for row in self._drawn_rows[self._head :]), default=1)
        if width + self.styles.scrollbar_size_vertical != self.wanted_width:
            self.post_message(self.Widened())
        self.virtual_size = Size(width, len(self._drawn_rows))
        drawn = self._picture
        if drawn is not None and selected is not None and selected in drawn.item_of:
            index = drawn.item_of[selected]
            row, col = drawn.layout.position[index]
            region = Region(col, row + self._head, drawn.layout.width[index], 1)
            self.scroll_to_region(region, animate=False, center=True, immediate=True, force=True)
        if self.box != box:
            self.post_message(self.Reboxed())
        self.refresh()

    def _placeholder(self, task: GraphTaskInfo) -> None:
        size = f"{len(task.nodes):,}"
        self._drawn_rows = [Text(f"drawing {size} nodes by their modules…", style="yellow")]
        self._stale = True

    def _draw(
        self,
        pictures: Pictures,
        state: ExecutionState,
        selected: int | None,
        path: tuple[int, ...],
    ) -> None:
        """The picture of the choice ``state`` makes, or, in a big graph task whose picture is
        not made yet, the last one recoloured (or a line) while a thread makes it."""
        task = pictures.task
        focus = _focus(state, task)
        choice = pictures.choice(
            self.opened, self.closed, self.unfolded, focus, state.step, self.expanded
        )
        centre = focus if focus is not None else selected
        picture = pictures.kept(choice, centre)
        notices = []
        last = self._last
        if picture is not None or len(task.nodes) <= LATER_NODES:
            if picture is None:
                picture = pictures.picture(choice, centre)
            elif len(task.nodes) > LATER_NODES:
                self._make_ahead(pictures, state)
        else:  # see Note [Drawing a new picture later]
            self._make_later(pictures, choice, centre)
            if last is None or last[0] is not pictures:
                self._placeholder(task)
                return
            picture = last[1]
            notices.append(Text("drawing the modules around this step…", style="yellow"))
            self._stale = True
        self._picture = picture
        self._last = (pictures, picture)
        notices += [Text(printable(n), style="dim italic") for n in picture.notices]
        self._head = len(notices)
        self._drawn_rows = notices + draw_picture(pictures, picture, state, selected, path)

    def _open_later(
        self,
        trace: Trace,
        task: GraphTaskInfo,
        focus: int | None,
        centre: int | None,
        step: int | None = None,
    ) -> None:
        """Make the pictures of ``task`` in a thread, and the first, of ``focus`` around
        ``centre`` at ``step``, if it is to be drawn (as :meth:`_draw` will ask for it)."""
        if self._opening is task:
            return
        self._opening = task

        def make() -> Callable[[], None]:
            pictures = Pictures(trace, task)
            if self.display:
                pictures.picture(pictures.choice((), (), (), focus, step), centre)
            _ = pictures.names  # what find reads: here, not on the UI thread at its Enter
            return lambda: self._adopt(pictures)

        self.maker.want(make)

    def _adopt(self, pictures: Pictures) -> None:
        """Take the pictures a thread made, if their graph task is still the one shown."""
        self.post_message(self.Made())
        task = pictures.task
        if self._opening is task:
            self._opening = None
        waiting = [then for t, then in self._waiting if t is task]
        self._waiting = [(t, then) for t, then in self._waiting if t is not task]
        if self._shown[0] is not task and not waiting:
            return  # another task is shown now
        if self._pictures is None or self._pictures.task is not task:
            self._pictures = pictures
            self.opened, self.closed, self.unfolded = set(), set(), set()
            self.expanded = ()
        for then in waiting:
            then(pictures)
        if self._shown[0] is task:
            self._redraw()

    def _failed(self, error: Exception) -> None:
        """A picture job raised: say so in the view, instead of a line saying it is drawing."""
        self._opening = None
        self._waiting = []
        self._picture = None
        self._head = 0
        self._drawn_rows = [Text(f"could not draw this graph: {one_line(error)}", style="red")]
        self._current.set()
        self.virtual_size = Size(max(row.cell_len for row in self._drawn_rows), 1)
        self.refresh()

    def _make_later(self, pictures: Pictures, choice: Choice | None, centre: int | None) -> None:
        def make() -> Callable[[], None]:
            pictures.picture(choice, centre)
            return self._redraw

        self.maker.want(make)

    def _make_ahead(self, pictures: Pictures, state: ExecutionState) -> None:
        """Make the pictures of the next nodes the replay reaches, one job each, while idle."""
        shown = self._opening_state()
        nodes = upcoming(state.trace, pictures.task, state.step)

        def make() -> Callable[[], None] | None:
            return again if make_ahead(pictures, nodes, *shown) else None

        def again() -> None:  # on the UI thread: the next one, unless the view moved on
            now = self._opening_state()
            if pictures is self._pictures and now == shown and self.display:
                self.maker.ahead(make)

        self.maker.ahead(make)

    def _opening_state(
        self,
    ) -> tuple[frozenset[int], frozenset[int], frozenset[int], tuple[str, ...]]:
        return (
            frozenset(self.opened),
            frozenset(self.closed),
            frozenset(self.unfolded),
            self.expanded,
        )

    def _redraw(self) -> None:
        task, state, path = self._shown
        self.show(task, state, self._selected, path)

    def action_open_or_close(self) -> None:
        """Open the box the selection is in, or close the module around it (Note [Enter is
        --expand] in :mod:`~autograd_viz.tui.pictures`)."""
        picture, pictures, selected = self._picture, self._pictures, self._selected
        if picture is None or pictures is None or selected is None:
            return
        if selected not in picture.item_of:
            return
        item = picture.items[picture.item_of[selected]]
        tree = pictures.tree
        if item.is_box and item.group is None and not item.scopes:
            # A chain folded to fit (a trace without modules): there is no module to open.
            # Quoted for the shell: a node's name may hold a quote, $ or a space.
            self.app.notify(
                f"{item.name} is a chain folded to fit the screen; "
                f"to see it whole: autograd-viz dot TRACE --expand {shlex.quote(item.name)}",
                markup=False,
            )
            return
        if item.is_box:
            self._expand(pictures, item)
        else:
            key = pictures.key_of.get(selected)
            scope = tree.scope_of.get(key) if key is not None else None
            if scope is None:
                return
            self._close(pictures, scope)
        self._redraw()

    def _expand(self, pictures: Pictures, item: Item) -> None:
        """Open box ``item`` as ``--expand`` of its name does (Note [Enter is --expand])."""
        try:
            pictures.resolve(item.name)
        except GraphViewError:  # a name no reader reads back: open what the box holds
            if item.group is not None:
                self.unfolded.add(item.group)
            self.opened.update(item.scopes)
        else:
            if item.name not in self.expanded:
                self.expanded = (*self.expanded, item.name)
        self.closed.difference_update(item.scopes)

    def _close(self, pictures: Pictures, scope: int) -> None:
        """Close what the Enter that opened call ``scope`` opened (one Enter opens, one
        closes); a call opened otherwise (by the level, the step) is shut, its fold folded."""
        tree = pictures.tree
        around = set(tree.ancestors(scope))
        kept = []
        for name in self.expanded:
            target = pictures.resolve(name)
            named = set(target.scopes)
            if target.group is not None:
                named.update(tree.groups[target.group].scopes)
            if not named & around:
                kept.append(name)
        if len(kept) != len(self.expanded):
            self.expanded = tuple(kept)
            return
        group = tree.group_of.get(scope)
        if group is not None:
            self.unfolded.discard(group)
        self.opened.discard(scope)
        self.closed.add(scope)

    def action_pick(self, delta: int) -> None:
        """Select the next (or previous) label of the drawing, in reading order."""
        picture = self._picture
        if picture is None or not picture.items:
            return
        order = sorted(picture.items, key=lambda i: picture.layout.position[i])
        here = picture.item_of.get(self._selected) if self._selected is not None else None
        at = order.index(here) + delta if here in order else 0
        item = picture.items[order[max(0, min(len(order) - 1, at))]]
        self.post_message(self.Picked(item.members[0]))

    def render_line(self, y: int) -> Strip:
        row = y + self.scroll_offset.y
        width = self.scrollable_content_region.width
        base = self.rich_style
        if row >= len(self._drawn_rows):
            return Strip.blank(width, base)
        text = self._drawn_rows[row]
        x = self.scroll_offset.x
        if row < self._head:  # a notice: cut with an ellipsis where the view ends, never moved
            text = text.copy()
            text.truncate(width, overflow="ellipsis")
            x = 0
        elif text.cell_len > width:
            text = _cut_at_edges(text, x, width, self.app.console)
        segments = [
            Segment(s.text, base + s.style if s.style else base)
            for s in text.render(self.app.console, end="")
        ]
        return Strip(segments).crop_extend(x, x + width, base)


def _cut_at_edges(text: Text, x: int, width: int, console: Console) -> Text:
    """``text`` with an ellipsis where the view's edges (columns ``x`` and ``x + width``) cut
    a label, so that a cut name reads as cut, never as a shorter name."""
    plain = text.plain
    if len(plain) != text.cell_len:  # wide characters: columns are not indices
        return text
    cuts = [
        at
        for at, outside in ((x, x - 1), (x + width - 1, x + width))
        if 0 <= outside < len(plain)
        and at < len(plain)
        and not plain[outside].isspace()
        and not plain[at].isspace()
        and plain[outside] not in _LINES
        and plain[at] not in _LINES
    ]
    if not cuts:
        return text
    text = text.copy()
    for at in cuts:
        styles = text.get_style_at_offset(console, at)
        text = text[:at] + Text("…", style=styles) + text[at + 1 :]
    return text


_LINES = frozenset("│─┌┐└┘▼┬┴┼")
"""The pieces of an edge's line or a module frame: cut by the view's edge, they are not a
name."""


def _focus(state: ExecutionState, task: GraphTaskInfo) -> int | None:
    """The node the step is about, if it is one of ``task``'s: its modules open by themselves."""
    event = state.event
    if event is not None and event.graph_task == task.id:
        return event.node_id
    return None
