"""The drawn DAG's rows: labels coloured by status, edges as lines, boxes with their counts.

Where labels go and how each edge runs is worked out once per picture in
:mod:`autograd_viz.tui.routing` and :mod:`autograd_viz.tui.framing`; these
functions draw a picture's rows at a step, which is all a step redraws.

Note [Boxes and frames]
~~~~~~~~~~~~~~~~~~~~~~~
A rectangle is a module call, as in the Graphviz picture: a closed call or a
fold is a small one around its one line (status, name, ``×N``, nodes run), an
open call a frame around what it holds, its name on the top edge (Note [A
frame is laid out alone] in :mod:`~autograd_viz.tui.framing`). A node is a
line of text with no rectangle. Lines leave a rectangle at a ``┬`` in its
bottom edge.
"""

from __future__ import annotations

import itertools

from rich.text import Span, Text

from autograd_viz.draw.model.drawn import BoxStatus
from autograd_viz.trace import GraphTaskInfo, NodeInfo
from autograd_viz.trace.replay import ExecutionState, NodeState
from autograd_viz.tui.framing import BOTTOM_EDGE, frame_end, frame_title
from autograd_viz.tui.pictures import BOX_GLYPHS, Item, Picture, Pictures, box_text
from autograd_viz.tui.routing import DOWN, LEFT, RIGHT, UP, Frame, Layout, Route, drawn_name
from autograd_viz.tui.styled import PATH_STYLE, STATUS_GLYPHS, non_finite

DELIVERED = "bold green3"
"""The style of an edge a gradient went along."""

FRAME_STYLE = "steel_blue"
"""The style of a module frame's edges."""
FRAME_TITLE_STYLE = "bold steel_blue1"
"""The style of the name on a module frame's top edge."""

_BOX = {
    UP | DOWN: "│",
    LEFT | RIGHT: "─",
    DOWN | RIGHT: "┌",
    DOWN | LEFT: "┐",
    UP | RIGHT: "└",
    UP | LEFT: "┘",
}
"""Every piece a line can have; lines never merge, so there are no junctions."""


class _Canvas:
    def __init__(self, columns: int, rows: int, boxes: frozenset[int] = frozenset()) -> None:
        self.columns = columns
        self.boxes = boxes
        """Labels drawn in a rectangle (Note [Boxes and frames])."""
        self.cells: dict[tuple[int, int], tuple[str, str]] = {}
        self.text: dict[tuple[int, int], Text] = {}
        self._edges: list[tuple[int, int, int, str, Text | None, int]] = []
        """Rectangles' top and bottom edges, written once the lines are (:meth:`_seal`)."""

    def route(self, route: Route, style: str) -> None:
        """Draw one edge; where it crosses another, the vertical line is drawn on top.

        A line from a frame (or from a frame's top edge, inside it) starts at a ``┬`` in
        the edge; a line to a frame's bottom edge ends at a ``┴`` in it (Note [Lines across a
        frame] in :mod:`~autograd_viz.tui.framing`).
        """
        for r, c, directions in route.pieces:
            if directions == LEFT | RIGHT and (r, c) in self.cells:
                continue  # a crossing: the other edge's vertical stays on top
            self.cells[(r, c)] = (_BOX[directions], style)
        sender, receiver = frame_end(route.sender), frame_end(route.receiver)
        boxed = route.sender in self.boxes  # see Note [Boxes and frames]
        if route.pieces and (sender is not None or boxed):  # from a rectangle's edge
            r, c, _ = route.pieces[0]
            self._join((r - 1, c), "┬", "┴", style)
        if receiver is not None and receiver[1] == BOTTOM_EDGE:  # the edge is the arrow's row
            self._join(route.arrow, "┴", "┬", style)
        else:
            self.cells[route.arrow] = ("▼", style)

    def _join(self, cell: tuple[int, int], glyph: str, other: str, style: str) -> None:
        """Mark where a line meets a frame's edge (``┼`` where lines meet it from both sides)."""
        here = self.cells.get(cell, ("", ""))[0]
        self.cells[cell] = ("┼" if here in (other, "┼") else glyph, style)

    def frame(self, frame: Frame) -> None:
        """Draw a module frame's edges, its name on the top one."""
        title = Text(f" {frame_title(frame.title)} ", style=FRAME_TITLE_STYLE)
        self.rectangle(
            frame.row, frame.column, frame.width, frame.height, title, frame.title_column
        )

    def rectangle(
        self,
        top: int,
        left: int,
        width: int,
        height: int,
        title: Text | None = None,
        title_column: int = 0,
    ) -> None:
        """Draw the edges of a rectangle (a frame, or a box's), ``title`` on the top one.

        The top and bottom edges are written as one label each once every line is drawn
        (:meth:`_seal`), with the ``┬`` and ``┴`` where lines meet them.
        """
        bottom, right = top + height - 1, left + width - 1
        for r in range(top + 1, bottom):
            self.cells[(r, left)] = ("│", FRAME_STYLE)
            self.cells[(r, right)] = ("│", FRAME_STYLE)
        self._edges.append((top, left, width, "┌┐", title, title_column))
        self._edges.append((bottom, left, width, "└┘", None, 0))

    def _seal(self) -> None:
        """Write each rectangle's top and bottom edge as one label, the lines' junctions in it."""
        for row, left, width, corners, title, title_column in self._edges:
            right = left + width - 1
            line = Text(corners[0], style=FRAME_STYLE)
            run = ""
            c = left + 1
            while c < right:
                if title is not None and c == title_column:
                    line.append(run, style=FRAME_STYLE).append_text(title)
                    run = ""
                    c += title.cell_len
                    continue
                junction = self.cells.pop((row, c), None)
                if junction is None:
                    run += "─"
                else:
                    line.append(run, style=FRAME_STYLE).append(junction[0], style=junction[1])
                    run = ""
                c += 1
            self.text[(row, left)] = line.append(run + corners[1], style=FRAME_STYLE)
        self._edges = []

    def rows(self, count: int) -> list[Text]:
        """The first ``count`` rows: each label, and the lines' pieces between them.

        Only the columns where something is drawn are visited, neighbouring pieces of one
        style are one run, each row is made as one string with its styles' spans
        (:meth:`_row`) and each rectangle's edges as one label (:meth:`_seal`): appending
        cell by cell cost ~3 µs a cell, 180 ms for a 300-row picture on every redraw (a
        step, Enter), and appending run by run still cost 60 ms a redraw once frames drew
        a side on every row.
        """
        self._seal()
        marks: list[list[int]] = [[] for _ in range(count)]
        for r, c in itertools.chain(self.cells, self.text):
            if r < count:
                marks[r].append(c)
        return [self._row(r, sorted(set(columns))) for r, columns in enumerate(marks)]

    def _row(self, r: int, columns: list[int]) -> Text:
        """Row ``r``, ``columns`` the ones where something is drawn, as one string and the
        spans of its styles (a span per run of one style)."""
        cells, labels, width = self.cells, self.text, self.columns
        plain: list[str] = []
        spans: list[Span] = []
        style = ""  # the open run's style
        start = length = 0  # where the open run starts, and the characters written
        at = 0  # the first column not drawn yet
        for c in columns:
            if c < at or c >= width:
                continue  # under a label drawn before it, or past the edge
            if c > at:  # blanks, unstyled
                if style:
                    spans.append(Span(start, length, style))
                    style = ""
                plain.append(" " * (c - at))
                length += c - at
            label = labels.get((r, c))
            if label is None:
                glyph, glyph_style = cells[(r, c)]
                if glyph_style != style:
                    if style:
                        spans.append(Span(start, length, style))
                    style, start = glyph_style, length
                plain.append(glyph)
                length += 1
                at = c + 1
                continue
            if style:
                spans.append(Span(start, length, style))
            text = label.plain
            if label.style:
                spans.append(Span(length, length + len(text), label.style))
            spans.extend(span.move(length) for span in label.spans)
            plain.append(text)
            length += len(text)
            style, start = "", length
            at = c + label.cell_len
        if style:
            spans.append(Span(start, length, style))
        if at < width:
            plain.append(" " * (width - at))
        return Text("".join(plain), spans=spans)


def draw(
    task: GraphTaskInfo,
    shape: Layout,
    state: ExecutionState | None,
    selected: int | None,
    path: tuple[int, ...] = (),
) -> list[Text]:
    """The drawing's rows at ``state``: labels coloured by status, delivered edges bold."""
    columns, rows = shape.size
    canvas = _Canvas(columns + 1, rows + 1)
    delivered: set[tuple[int, int]] = set()
    if state is not None:
        delivered = {(d.from_node, d.to_node) for d in state.deliveries(task.id)}
    on_path = set(itertools.pairwise(path))

    # Grey lines first, so that coloured ones are drawn over them where they cross.
    def rank(route: Route) -> int:
        pair = (route.sender, route.receiver)
        return 2 if pair in on_path else 1 if pair in delivered else 0

    for route in sorted(shape.routes, key=rank):
        style = ("grey50", DELIVERED, f"bold {PATH_STYLE}")[rank(route)]
        canvas.route(route, style)
    for info in task.nodes.values():
        node_state = _state(state, task, info.id)
        label = _label(info, node_state, info.id == selected)
        if info.id in path:
            label.stylize(f"underline {PATH_STYLE}", 2)
        canvas.text[shape.position[info.id]] = label
    return canvas.rows(rows)


def draw_picture(
    pictures: Pictures,
    picture: Picture,
    state: ExecutionState | None,
    selected: int | None,
    path: tuple[int, ...] = (),
) -> list[Text]:
    """A picture's rows at ``state``: boxes and nodes coloured by status, delivered edges bold.

    ``selected`` and ``path`` are node ids; the box holding one is marked.
    """
    shape = picture.layout
    columns, rows = shape.size
    canvas = _Canvas(columns + 1, rows + 1, frozenset(shape.height))
    for frame in shape.frames:  # first: the lines that meet their edges are drawn over them
        canvas.frame(frame)
    for index in shape.height:  # a box's rectangle (Note [Boxes and frames])
        row, column = shape.position[index]
        canvas.rectangle(row, column, shape.width[index], shape.height[index])
    item_of = picture.item_of
    delivered: set[tuple[int, int]] = set()
    task = pictures.task
    if state is not None and task.id in state.graph_tasks:
        delivered = {
            (item_of[d.from_node], item_of[d.to_node])
            for d in state.deliveries(task.id)
            if d.from_node in item_of and d.to_node in item_of
        }
    on_path = {
        (item_of[a], item_of[b])
        for a, b in itertools.pairwise(path)
        if a in item_of and b in item_of
    }
    marked = {item_of[n] for n in path if n in item_of}
    chosen = item_of.get(selected) if selected is not None else None

    def rank(route: Route) -> int:
        pairs = route.stands_for  # a line to or from a frame stands for several edges
        if any(pair in on_path for pair in pairs):
            return 2
        return 1 if any(pair in delivered for pair in pairs) else 0

    for route in sorted(shape.routes, key=rank):
        canvas.route(route, ("grey50", DELIVERED, f"bold {PATH_STYLE}")[rank(route)])
    step = state.step if state is not None else 0
    for index, item in picture.items.items():
        if item.node is not None:
            label = _label(item.node, _state(state, task, item.node.id), index == chosen)
        else:
            label = _box_label(item, *pictures.status(picture, item, step), index == chosen)
        if index in marked:
            label.stylize(f"underline {PATH_STYLE}", 2)
        row, column = shape.position[index]
        if index in shape.height:  # inside its rectangle, a blank column from its side
            row, column = row + 1, column + 2
        canvas.text[(row, column)] = label
    return canvas.rows(rows)


def _box_label(item: Item, status: BoxStatus, ended: int, selected: bool) -> Text:
    """``▣ layer4.1 ×2 3/40``: a box's status glyph, name, count and nodes run."""
    glyph, style = STATUS_GLYPHS[BOX_GLYPHS[status]]
    digits = len(str(item.runs))
    text = Text().append(f"{glyph} ", style=style)
    text.append(box_text(item), style="bold cyan" if status is BoxStatus.RUNNING else "cyan")
    text.append(f" {ended:>{digits}}/{item.runs} ", style="dim")
    if status is BoxStatus.FAILED:
        text.stylize("magenta")
    if selected:
        text.stylize("reverse")
    return text


def _label(info: NodeInfo, state: NodeState | None, selected: bool) -> Text:
    status = state.status if state is not None else "not started"
    glyph, style = STATUS_GLYPHS.get(status, ("?", ""))
    remaining = state.remaining if state is not None else info.dependencies
    deps = len(str(info.dependencies))
    text = Text().append(f"{glyph} ", style=style)
    text.append(drawn_name(info), style="bold" if status == "running" else "")
    text.append(f"#{info.id} ", style="dim")
    text.append(f"{remaining:>{deps}}/{info.dependencies}", style="yellow" if remaining else "")
    if state is not None and non_finite(state):
        text.stylize("magenta")
    if selected:
        text.stylize("reverse")
    return text


def _state(state: ExecutionState | None, task: GraphTaskInfo, node_id: int) -> NodeState | None:
    if state is None:
        return None
    try:
        return state.node(node_id, task.id)
    except KeyError:
        return None


__all__ = ["DELIVERED", "draw", "draw_picture"]
