"""The graph drawn in the terminal: layers by topological number, edges in box lines.

The layout is the engine's own order: a node's topological number is the
longest path from it to a leaf, so every edge goes from a higher layer to a
lower one and layers are drawn top (the root) to bottom (the leaves). Inside
a layer, nodes sit in the order of the mean position of the nodes that send
them a gradient (one barycentre sweep), which keeps most edges short. Edges
run down from the sender, along the row above the receiver's layer and into
it with an arrow; where lines meet, their box-drawing characters merge.

Layouts depend on the graph only, so they are computed once per graph task;
a step redraws labels and colours.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from rich.segment import Segment
from rich.text import Text
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from autograd_viz.trace import GraphTaskInfo, NodeInfo
from autograd_viz.trace.replay import ExecutionState, NodeState
from autograd_viz.tui.text import PATH_STYLE, STATUS_GLYPHS, non_finite, short_name

MAX_DRAWN = 150
"""Bigger graph tasks are not drawn (the node list handles any size)."""

DELIVERED = "bold green3"
"""The style of an edge a gradient went along."""

GAP = 2
"""Columns between two nodes of a layer."""

_UP, _DOWN, _LEFT, _RIGHT = 1, 2, 4, 8
_BOX = {
    _UP | _DOWN: "│",
    _LEFT | _RIGHT: "─",
    _DOWN | _RIGHT: "┌",
    _DOWN | _LEFT: "┐",
    _UP | _RIGHT: "└",
    _UP | _LEFT: "┘",
    _UP | _DOWN | _RIGHT: "├",
    _UP | _DOWN | _LEFT: "┤",
    _LEFT | _RIGHT | _DOWN: "┬",
    _LEFT | _RIGHT | _UP: "┴",
    _UP | _DOWN | _LEFT | _RIGHT: "┼",
    _UP: "│",
    _DOWN: "│",
    _LEFT: "─",
    _RIGHT: "─",
}


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each node of a graph task is drawn."""

    position: dict[int, tuple[int, int]]
    """Node id → (row, first column) of its label."""
    width: dict[int, int]
    """Node id → label width."""
    size: tuple[int, int]
    """(columns, rows) of the drawing."""


def label_width(info: NodeInfo) -> int:
    """A node's label width, fixed for the whole pass: ``○ Mul#7 2/2``."""
    deps = len(str(info.dependencies))
    return 2 + len(short_name(info)) + 1 + len(str(info.id)) + 1 + 2 * deps + 1


def layout(task: GraphTaskInfo) -> Layout:
    """Place ``task``'s nodes in layers by topological number (see the module notes)."""
    nodes = task.nodes
    top = max(info.topological_nr for info in nodes.values())
    layers: dict[int, list[NodeInfo]] = {}
    for info in nodes.values():
        layers.setdefault(top - info.topological_nr, []).append(info)
    senders: dict[int, list[int]] = {}
    for info in nodes.values():
        for edge in info.next_edges:
            if edge is not None and edge[0] in nodes:
                senders.setdefault(edge[0], []).append(info.id)
    centre: dict[int, float] = {}
    ordered: dict[int, list[NodeInfo]] = {}
    for depth in sorted(layers):
        members = layers[depth]

        def key(info: NodeInfo) -> tuple[float, int]:
            placed = [centre[s] for s in senders.get(info.id, ()) if s in centre]
            return (sum(placed) / len(placed) if placed else 0.0, -info.sequence_nr)

        members.sort(key=key)
        ordered[depth] = members
        x = 0
        for info in members:
            centre[info.id] = x + label_width(info) / 2
            x += label_width(info) + GAP
    widths = {d: sum(label_width(i) + GAP for i in m) - GAP for d, m in ordered.items()}
    total = max(widths.values())
    position: dict[int, tuple[int, int]] = {}
    for depth, members in ordered.items():
        x = (total - widths[depth]) // 2
        for info in members:
            position[info.id] = (3 * depth, x)
            x += label_width(info) + GAP
    width = {info.id: label_width(info) for info in nodes.values()}
    return Layout(position, width, (total, 3 * max(ordered) + 1))


class _Canvas:
    def __init__(self, columns: int, rows: int) -> None:
        self.columns = columns
        self.masks = [[0] * columns for _ in range(rows)]
        self.styles: list[list[str]] = [[""] * columns for _ in range(rows)]
        self.text: dict[tuple[int, int], Text] = {}
        self.arrows: dict[tuple[int, int], str] = {}

    def line(self, row: int, col: int, mask: int, style: str) -> None:
        self.masks[row][col] |= mask
        # A delivered edge's colour wins where lines share a cell.
        if (style and not self.styles[row][col]) or style in (DELIVERED, f"bold {PATH_STYLE}"):
            self.styles[row][col] = style

    def edge(self, start: tuple[int, int], end: tuple[int, int], style: str) -> None:
        (r0, c0), (r1, c1) = start, end
        turn = r1 - 2  # the gap row just above the receiving layer's arrow row
        for r in range(r0 + 1, turn):
            self.line(r, c0, _UP | _DOWN, style)
        if c0 == c1:
            self.line(turn, c0, _UP | _DOWN, style)
        else:
            step = 1 if c1 > c0 else -1
            self.line(turn, c0, _UP | (_RIGHT if step > 0 else _LEFT), style)
            for c in range(c0 + step, c1, step):
                self.line(turn, c, _LEFT | _RIGHT, style)
            self.line(turn, c1, (_LEFT if step > 0 else _RIGHT) | _DOWN, style)
        self.arrows[(r1 - 1, c1)] = style

    def row(self, r: int) -> Text:
        out = Text()
        c = 0
        while c < self.columns:
            label = self.text.get((r, c))
            if label is not None:
                out.append_text(label)
                c += label.cell_len
                continue
            if (r, c) in self.arrows:
                out.append("▼", style=self.arrows[(r, c)])
            else:
                mask = self.masks[r][c]
                out.append(_BOX.get(mask, " "), style=self.styles[r][c])
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
    for info in task.nodes.values():
        row, col = shape.position[info.id]
        start = (row, col + shape.width[info.id] // 2)
        for edge in info.next_edges:
            if edge is None or edge[0] not in shape.position:
                continue
            to_row, to_col = shape.position[edge[0]]
            end = (to_row, to_col + shape.width[edge[0]] // 2)
            style = DELIVERED if (info.id, edge[0]) in delivered else "grey50"
            if (info.id, edge[0]) in on_path:
                style = f"bold {PATH_STYLE}"
            canvas.edge(start, end, style)
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
