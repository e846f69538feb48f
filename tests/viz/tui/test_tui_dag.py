"""The drawn DAG (``v``): every line leads from its arrow back to the node it really leaves.

The drawing is read the way a person reads it: start at an arrow, follow the
line up, around its corners and across other lines, and see which label it
ends under. Every (sender, receiver) pair of the graph task must be drawn
once, and no line may lead anywhere else.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from textual.pilot import Pilot

import engine
from autograd_viz.trace import GraphTaskInfo, Trace
from autograd_viz.tui.canvas import draw
from autograd_viz.tui.dag import DagView
from autograd_viz.tui.framing import BOTTOM_EDGE, TOP_EDGE, WHOLE, frame_end_id
from autograd_viz.tui.routing import Layout, layout
from tests.viz.tui.tuiting import demo_trace, replay_app, run_app, stepped_trace

SIZES = [(80, 24), (120, 40), (160, 48)]

_MOVES = {"up": (-1, 0), "left": (0, -1), "right": (0, 1)}
_TURNS = {("up", "┐"): "left", ("up", "┌"): "right", ("left", "└"): "up", ("right", "┘"): "up"}
_STRAIGHT = {("up", "│"), ("left", "─"), ("right", "─"), ("left", "│"), ("right", "│")}
"""A horizontal line passes under a vertical one (drawn ``│``) at a crossing."""


def label_at(shape: Layout, row: int, column: int) -> int | None:
    """The node whose label (a box's: its rectangle) covers (row, column), if any."""
    for node, (r, c) in shape.position.items():
        if r <= row < r + shape.height.get(node, 1) and c <= column < c + shape.width[node]:
            return node
    return None


def edge_at(shape: Layout, row: int, column: int) -> tuple[int, str] | None:
    """The module frame whose top or bottom edge (corners left out) is at (row, column), and
    which edge: ``"top"`` or ``"bottom"``."""
    for index, frame in enumerate(shape.frames):
        if frame.column < column < frame.column + frame.width - 1:
            if row == frame.row:
                return index, "top"
            if row == frame.row + frame.height - 1:
                return index, "bottom"
    return None


def follow(rows: list[str], shape: Layout, row: int, column: int) -> int:
    """Follow the line that ends in the arrow at (row, column) back to its sender: a label,
    a frame (its line leaves the bottom edge at ``┬``) or, inside a frame, its top edge."""
    direction = "up"
    r, c = row - 1, column
    for _ in range(10_000):
        glyph = rows[r][c] if c < len(rows[r]) else " "
        if direction == "up":
            sender = label_at(shape, r, c)
            if sender is not None:
                return sender
            if glyph in "┬┼":
                edge = edge_at(shape, r, c)
                assert edge is not None, f"a junction off a frame's edge at ({r}, {c})"
                frame, side = edge
                return frame_end_id(frame, WHOLE if side == "bottom" else TOP_EDGE)
        if (direction, glyph) in _TURNS:
            direction = _TURNS[direction, glyph]
        elif (direction, glyph) not in _STRAIGHT:
            raise AssertionError(f"the line into ({row}, {column}) breaks at ({r}, {c}): {glyph!r}")
        dr, dc = _MOVES[direction]
        r, c = r + dr, c + dc
    raise AssertionError("the line never ends")


def drawn_edges(rows: list[str], shape: Layout) -> list[tuple[int, int]]:
    """(sender, receiver) of every arrow in the drawing, as a reader would trace it: a ``▼``
    over a label or a frame's top edge, or a line ending in a frame's bottom edge (``┴``)."""
    found = []
    for r, line in enumerate(rows):
        for c, glyph in enumerate(line):
            if glyph == "▼":
                receiver = label_at(shape, r + 1, c)
                edge = edge_at(shape, r + 1, c)
                if receiver is None and edge is not None and edge[1] == "top":
                    receiver = frame_end_id(edge[0], WHOLE)
                assert receiver is not None, f"the arrow at ({r}, {c}) points at no label"
                found.append((follow(rows, shape, r, c), receiver))
            elif glyph in "┴┼":
                edge = edge_at(shape, r, c)
                assert edge is not None and edge[1] == "bottom", f"a junction at ({r}, {c})"
                found.append((follow(rows, shape, r, c), frame_end_id(edge[0], BOTTOM_EDGE)))
    return found


def edges_of(task: GraphTaskInfo) -> set[tuple[int, int]]:
    return {
        (info.id, edge[0])
        for info in task.nodes.values()
        for edge in info.next_edges
        if edge is not None and edge[0] in task.nodes
    }


def check_drawing(task: GraphTaskInfo, rows: list[str], shape: Layout) -> None:
    junctions = set("├┤┬┴┼")
    assert not any(glyph in junctions for line in rows for glyph in line), "lines must not merge"
    drawn = drawn_edges(rows, shape)
    assert sorted(drawn) == sorted(edges_of(task)), "each edge drawn once, from its own sender"


def unrolled_rnn(steps: int = 6) -> None:
    rng = np.random.default_rng(0)
    w = engine.tensor(rng.standard_normal((4, 4)), requires_grad=True, name="W")
    h = engine.tensor(rng.standard_normal((1, 4)), requires_grad=True, name="h0")
    for t in range(steps):
        x = engine.tensor(rng.standard_normal((1, 4)), requires_grad=True, name=f"x{t}")
        h = (h @ w + x).tanh()
    h.sum().backward()


def random_dag(seed: int) -> None:
    """Sums and products of earlier values chosen at random: many fan-ins and long edges."""
    pick = random.Random(seed)
    values = [
        engine.tensor([pick.uniform(1, 2)], requires_grad=True, name=f"p{i}") for i in range(4)
    ]
    for _ in range(14):
        a, b = pick.sample(values, 2)
        values.append(a * b if pick.random() < 0.5 else a + b)
    total = values[-1]
    for v in pick.sample(values[4:-1], 4):
        total = total + v
    total.sum().backward()


@pytest.fixture(scope="module")
def demo() -> Trace:
    return demo_trace()


@pytest.mark.parametrize("program", [unrolled_rnn, *(lambda s=s: random_dag(s) for s in range(6))])
def test_every_drawn_line_leads_back_to_its_own_sender(program: Any) -> None:
    trace = stepped_trace(program)
    for task in trace.graph_tasks.values():
        shape = layout(task)
        rows = [row.plain for row in draw(task, shape, None, None)]
        check_drawing(task, rows, shape)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_demo_dag_on_screen_draws_each_edge_from_its_sender(
    demo: Trace, size: tuple[int, int]
) -> None:
    app = replay_app(demo)
    end = len(demo.events)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = app.query_one(DagView)
        assert dag.display
        for task_id, task in demo.graph_tasks.items():
            app.driver.goto(end // 2)
            app.pinned_task = task_id
            app.refresh_view()
            await pilot.pause()
            picture = dag.picture
            assert picture is not None and dag.pictures(demo, task).task is task
            # A small task without modules is drawn node by node: label i is a node.
            ids = {i: item.node.id for i, item in picture.items.items() if item.node is not None}
            assert sorted(ids.values()) == sorted(task.nodes)
            rows = [row.plain for row in dag._drawn_rows]
            drawn = [(ids[a], ids[b]) for a, b in drawn_edges(rows, picture.layout)]
            assert sorted(drawn) == sorted(edges_of(task)), "each edge drawn once, from its sender"
            # what the widget shows is the drawing, scrolled
            x, y = dag.scroll_offset
            line = "".join(seg.text for seg in dag.render_line(0))
            assert line.rstrip() == rows[y][x : x + len(line)].rstrip()

    run_app(app, actions, size=size)


def test_an_edge_into_a_shared_receiver_is_not_drawn_from_a_neighbour(demo: Trace) -> None:
    """The two readings of the old drawing that were wrong (Add→Sum, Add→Acc)."""
    for task in demo.graph_tasks.values():
        shape = layout(task)
        rows = [row.plain for row in draw(task, shape, None, None)]
        names = {info.id: info.name for info in task.nodes.values()}
        for sender, receiver in drawn_edges(rows, shape):
            assert receiver in [e[0] for e in task.nodes[sender].next_edges if e], (
                f"{names[sender]}#{sender} → {names[receiver]}#{receiver} is not an edge"
            )
