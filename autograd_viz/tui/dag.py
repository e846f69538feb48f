"""The graph drawn in the terminal: labels in layers by topological number, edges as lines.

Where labels go and how each edge runs is worked out once per graph task in
:mod:`autograd_viz.tui.routing` (see Note [Every edge is drawn alone]); a step
redraws labels and colours.
"""

from __future__ import annotations

import itertools

from rich.segment import Segment
from rich.text import Text
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from autograd_viz.trace import GraphTaskInfo, NodeInfo
from autograd_viz.trace.replay import ExecutionState, NodeState
from autograd_viz.tui.routing import DOWN, LEFT, RIGHT, UP, Layout, Route, layout
from autograd_viz.tui.text import PATH_STYLE, STATUS_GLYPHS, non_finite, short_name

MAX_DRAWN = 150
"""Bigger graph tasks are not drawn (the node list handles any size)."""

DELIVERED = "bold green3"
"""The style of an edge a gradient went along."""

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
    def __init__(self, columns: int, rows: int) -> None:
        self.columns = columns
        self.cells: dict[tuple[int, int], tuple[str, str]] = {}
        self.text: dict[tuple[int, int], Text] = {}

    def route(self, route: Route, style: str) -> None:
        """Draw one edge; where it crosses another, the vertical line is drawn on top."""
        for r, c, directions in route.pieces:
            if directions == LEFT | RIGHT and (r, c) in self.cells:
                continue  # a crossing: the other edge's vertical stays on top
            self.cells[(r, c)] = (_BOX[directions], style)
        self.cells[route.arrow] = ("▼", style)

    def row(self, r: int) -> Text:
        out = Text()
        c = 0
        while c < self.columns:
            label = self.text.get((r, c))
            if label is not None:
                out.append_text(label)
                c += label.cell_len
                continue
            glyph, style = self.cells.get((r, c), (" ", ""))
            out.append(glyph, style=style)
            c += 1
        return out


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
    return [canvas.row(r) for r in range(rows)]


def _label(info: NodeInfo, state: NodeState | None, selected: bool) -> Text:
    status = state.status if state is not None else "not started"
    glyph, style = STATUS_GLYPHS.get(status, ("?", ""))
    remaining = state.remaining if state is not None else info.dependencies
    deps = len(str(info.dependencies))
    text = Text().append(f"{glyph} ", style=style)
    text.append(short_name(info), style="bold" if status == "running" else "")
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


class DagView(ScrollView, can_focus=True):
    """The drawn graph of the shown graph task (up to :data:`MAX_DRAWN` nodes)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._drawn_task: GraphTaskInfo | None = None
        self._drawn_layout: Layout | None = None
        self._drawn_rows: list[Text] = []

    def show(
        self,
        task: GraphTaskInfo | None,
        state: ExecutionState | None,
        selected: int | None,
        path: tuple[int, ...] = (),
    ) -> None:
        """Draw ``task`` at ``state`` with ``selected`` highlighted (only while visible)."""
        if not self.display:
            return
        if task is None or not task.nodes:
            self._drawn_rows = [Text("No graph task yet.", style="dim italic")]
        elif len(task.nodes) > MAX_DRAWN:
            self._drawn_rows = [
                Text(
                    f"{len(task.nodes)} nodes: too many to draw here (up to {MAX_DRAWN}). "
                    "Press v for the node list, or d to export the step as SVG.",
                    style="dim italic",
                )
            ]
        else:
            if task is not self._drawn_task or self._drawn_layout is None:
                self._drawn_task, self._drawn_layout = task, layout(task)
            self._drawn_rows = draw(task, self._drawn_layout, state, selected, path)
        width = max((row.cell_len for row in self._drawn_rows), default=1)
        self.virtual_size = Size(width, len(self._drawn_rows))
        shape = self._drawn_layout
        if shape is not None and selected in shape.position and task is self._drawn_task:
            row, col = shape.position[selected]
            region = Region(col, row, shape.width[selected], 1)
            self.scroll_to_region(region, animate=False, center=True, immediate=True, force=True)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        row = y + self.scroll_offset.y
        width = self.scrollable_content_region.width
        base = self.rich_style
        if row >= len(self._drawn_rows):
            return Strip.blank(width, base)
        segments = [
            Segment(s.text, base + s.style if s.style else base)
            for s in self._drawn_rows[row].render(self.app.console, end="")
        ]
        x = self.scroll_offset.x
        return Strip(segments).crop_extend(x, x + width, base)
