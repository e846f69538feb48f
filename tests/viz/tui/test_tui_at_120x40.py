"""The TUI at 120 × 40 on a model of repeated blocks: the drawn DAG's module frames, its
names cut at one end at most, and the key bar that follows the focus."""

from __future__ import annotations

import contextlib
import itertools
import random
from typing import Any

import numpy as np
import pytest
from rich.cells import cell_len
from textual.pilot import Pilot

import autograd_viz
import engine
from autograd_viz.trace import Trace
from autograd_viz.tui.app import FOCUSED_SIDE, GRAPH_CHROME, SIDE_COLUMNS
from autograd_viz.tui.canvas import draw_picture
from autograd_viz.tui.dag import DagView
from autograd_viz.tui.framing import frame_title
from autograd_viz.tui.keybar import FOCUS_KEYS, KeyBar
from autograd_viz.tui.pictures import Picture, Pictures, box_text
from autograd_viz.tui.routing import NAME_ROOM
from autograd_viz.tui.styled import cut_dotted, cut_front
from tests.viz.tui.test_tui_dag import drawn_edges
from tests.viz.tui.test_tui_modules import blocks
from tests.viz.tui.tuiting import node_list, replay_app, run_app

SIZE = (120, 40)


@pytest.fixture(scope="module")
def trace() -> Trace:
    with autograd_viz.record() as recorded:
        blocks(12)
    return recorded


def key_line(app: Any) -> str:
    """The key bar as the screen shows it."""
    bar = app.query_one(KeyBar)
    return " ".join(bar.render_line(0).text.split())


def test_the_key_bar_starts_with_the_keys_of_the_panel_that_has_the_focus(trace: Trace) -> None:
    app = replay_app(trace)

    def starts(focus: str) -> str:
        return " ".join(f"{key} {what}" for key, what in FOCUS_KEYS[focus]) + " │ s step"

    async def actions(pilot: Pilot[Any]) -> None:
        assert key_line(app).startswith(starts("topo"))
        await pilot.press("v")  # the module tree: Enter opens and closes its rows
        await pilot.pause()
        assert key_line(app).startswith(starts("tree"))
        await pilot.press("v")  # the drawing takes the focus: ← → pick, Enter opens a box
        await pilot.pause()
        assert key_line(app).startswith(starts("dag"))
        assert "s step" in key_line(app) and "p back" in key_line(app)
        for _ in range(3):  # the engine, the inspector, then the timeline
            await pilot.press("tab")
        await pilot.pause()
        assert app.focused.id == "timeline"
        assert key_line(app).startswith(starts("events"))
        await pilot.press("shift+tab", "shift+tab")  # a panel without keys of its own
        await pilot.pause()
        assert key_line(app).startswith("s step n next node")
        assert key_line(app).endswith("? all keys q quit")

    run_app(app, actions, size=SIZE)


def screen_row(dag: DagView, y: int) -> str:
    """Line ``y`` of the drawn DAG as the screen shows it (scrolled)."""
    return "".join(segment.text for segment in dag.render_line(y))


async def to_node_in(pilot: Pilot[Any], trace: Trace, call: str) -> None:
    """Step the app to the start of the first node created in module call ``call``."""
    task = next(iter(trace.graph_tasks.values()))
    inside = {n.id for n in task.nodes.values() if n.scope and n.scope[-1][0] == call}
    event = next(e for e in trace.events if e.kind == "node_start" and e.node_id in inside)
    app = pilot.app
    app.driver.goto(event.index + 1)  # type: ignore[attr-defined]
    app.refresh_view(follow=True)  # type: ignore[attr-defined]
    await pilot.pause()


def check_frames(pictures: Pictures, picture: Picture, rows: list[str]) -> None:
    """Each frame is a closed rectangle with its call's name on the top edge, around exactly
    the labels of what the call holds; each closed call or fold a small one around its name."""
    tree = pictures.tree
    shape = picture.layout

    def calls_around(index: int) -> set[int]:
        item = picture.items[index]
        if item.node is not None:
            scope = tree.scope_of.get(pictures.key_of[item.node.id])
            return set(tree.ancestors(scope)) if scope is not None else set()
        parent = tree.scopes[item.scopes[0]].parent
        return set(tree.ancestors(parent)) if parent is not None else set()

    for index, item in picture.items.items():  # a closed call or a fold: a small rectangle
        top, left = shape.position[index]
        if item.node is not None:
            assert index not in shape.height
            continue
        right = left + shape.width[index] - 1
        assert shape.height[index] == 3
        assert (rows[top][left], rows[top][right]) == ("┌", "┐")
        assert (rows[top + 2][left], rows[top + 2][right]) == ("└", "┘")
        assert rows[top + 1][left] == rows[top + 1][right] == "│"
        assert f" {box_text(item)} " in rows[top + 1][left:right]
    for frame in shape.frames:
        top, left = frame.row, frame.column
        bottom, right = top + frame.height - 1, left + frame.width - 1
        assert (rows[top][left], rows[top][right]) == ("┌", "┐")
        assert (rows[bottom][left], rows[bottom][right]) == ("└", "┘")
        for r in range(top + 1, bottom):
            assert rows[r][left] == "│" and rows[r][right] == "│"
        assert rows[bottom][left + 1 : right].strip("─┬┴┼") == ""
        call = tree.scopes[frame.scope]
        assert frame.title.startswith(call.path) and frame.title.endswith(f" · {call.kind}")
        assert f" {frame_title(frame.title)} " in rows[top][left:right]
        inside = {
            i
            for i, (r, c) in shape.position.items()
            if top < r
            and r + shape.height.get(i, 1) - 1 < bottom
            and left < c
            and c + shape.width[i] <= right
        }
        assert inside == set(frame.members)
        assert inside == {i for i in picture.items if frame.scope in calls_around(i)}


def test_open_calls_are_frames_with_their_names_around_their_nodes(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        await to_node_in(pilot, trace, "model.layers.10.act")
        dag = app.query_one(DagView)
        picture = dag.picture
        assert picture is not None
        rows = [row.plain for row in dag._drawn_rows[dag._head :]]
        titles = [frame.title for frame in picture.layout.frames]
        assert "model · MLP" in titles and "model.layers.10 · Block" in titles
        assert "model.layers.10.act · Tanh" in titles  # the step's call, open
        check_frames(dag.pictures(trace, picture_task(trace)), picture, rows)
        # a reader following any line from its arrow ends at its own sender
        drawn = drawn_edges(rows, picture.layout)
        assert sorted(drawn) == sorted((r.sender, r.receiver) for r in picture.layout.routes)
        act = next(f for f in picture.layout.frames if f.title.startswith("model.layers.10.act"))
        names = {picture.items[i].node.name for i in act.members}  # type: ignore[union-attr]
        assert names == {"TanhBackward0", "AddBackward0"}
        linear = next(i for i in picture.items.values() if i.name == "model.layers.10.linear")
        node_list(app).select(linear.members[0])
        await pilot.pause()
        await pilot.press("enter")  # the drawing has the focus: the box opens into a frame
        await dag.drawn()
        picture = dag.picture
        assert picture is not None
        assert "model.layers.10.linear · Linear" in [f.title for f in picture.layout.frames]
        rows = [row.plain for row in dag._drawn_rows[dag._head :]]
        check_frames(dag.pictures(trace, picture_task(trace)), picture, rows)
        await pilot.press("enter")  # on a node inside it: the frame closes back into a box
        await dag.drawn()
        picture = dag.picture
        assert picture is not None
        assert "model.layers.10.linear · Linear" not in [f.title for f in picture.layout.frames]

    run_app(app, actions, size=SIZE)


def picture_task(trace: Trace) -> Any:
    return next(iter(trace.graph_tasks.values()))


PROJECTION = "encoder.transformer_layers.{}.self_attention.query_key_value_projection"
"""A module path longer than a label's room (:data:`NAME_ROOM`), as real models have."""


def long_named(layers: int = 3) -> None:
    """Residual layers whose modules and parameters have long dotted names."""
    rng = np.random.default_rng(0)
    h = engine.tensor(rng.standard_normal((2, 4)))
    with engine.scope("encoder", "Encoder"):
        for i in range(layers):
            with engine.scope(f"transformer_layers.{i}", "TransformerLayer"):
                name = PROJECTION.format(i)
                w = engine.tensor(
                    rng.standard_normal((4, 4)), requires_grad=True, name=f"{name}.weight"
                )
                with engine.scope("self_attention", "SelfAttention"):
                    with engine.scope("query_key_value_projection", "Linear"):
                        z = h @ w
                    h = z.tanh() + h
    (h * h).sum().backward()


def test_no_name_is_cut_at_both_ends_and_a_cut_name_keeps_its_end() -> None:
    with autograd_viz.record() as trace:
        long_named()
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = app.query_one(DagView)
        seen: set[str] = set()
        for _ in range(24):
            await pilot.press("n")
            await dag.drawn()
            picture = dag.picture
            assert picture is not None
            shape = picture.layout
            rows = [row.plain for row in dag._drawn_rows[dag._head :]]
            x, y = dag.scroll_offset
            width = dag.scrollable_content_region.width
            # a box's line is the middle row of its rectangle
            spans = [
                (r + shape.height.get(i, 1) // 2, c, shape.width[i])
                for i, (r, c) in shape.position.items()
            ]
            spans += [(f.row, f.title_column, len(frame_title(f.title)) + 2) for f in shape.frames]
            for r, c, w in spans:
                line = r + dag._head - y
                if not 0 <= line < dag.scrollable_content_region.height:
                    continue
                whole = rows[r][c : c + w].rstrip()
                if not whole:
                    continue
                seen.add(whole)
                assert c >= x or c + len(whole) <= x + width, f"{whole!r} cut at both ends"
                shown = screen_row(dag, line)
                left, right = max(c, x), min(c + len(whole), x + width)
                part = shown[left - x : right - x]
                if c < x and whole[x - c - 1] != " " and whole[x - c] != " ":
                    assert part.startswith("…"), f"{whole!r} cut at its start as {part!r}"
                elif c + len(whole) > x + width and whole[right - c - 1] != " ":
                    assert part.endswith("…"), f"{whole!r} cut at its end as {part!r}"
                else:
                    assert part == whole[left - c : right - c]
        drawn = " ".join(seen)
        # Names longer than their room keep their last parts, an ellipsis where they start.
        paths = [PROJECTION.format(i) for i in range(3)]
        leaves = [f"Acc({cut_front(path + '.weight', NAME_ROOM - 5)})" for path in paths]
        assert any(leaf in drawn for leaf in leaves)
        boxes = [cut_front(path, NAME_ROOM) for path in paths]
        frames = [frame_title(f"{path} · Linear") for path in paths]
        assert any(box in drawn for box in boxes) and any(title in drawn for title in frames)
        assert all(
            box.startswith("…") and box.endswith(".query_key_value_projection") for box in boxes
        )
        assert not any(path in drawn for path in paths)

    run_app(app, actions, size=SIZE)


def test_the_drawing_takes_the_columns_it_needs_while_it_has_the_focus() -> None:
    with autograd_viz.record() as trace:
        long_named()
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        await to_node_in(pilot, trace, PROJECTION.format(2))
        dag = app.query_one(DagView)
        await dag.drawn()
        await pilot.pause()
        graph = app.query_one("#graph")
        wanted = dag.wanted_width + GRAPH_CHROME
        assert wanted > SIZE[0] - SIDE_COLUMNS[0]  # more than the panel has unfocused
        assert dag.has_focus
        assert graph.outer_size.width == min(wanted, SIZE[0] - FOCUSED_SIDE)
        await pilot.press("tab")  # the engine panel: the panels beside keep their 44
        await pilot.pause()
        assert not dag.has_focus and graph.outer_size.width == SIZE[0] - SIDE_COLUMNS[0]
        await pilot.press("shift+tab")
        await pilot.pause()
        assert graph.outer_size.width == min(wanted, SIZE[0] - FOCUSED_SIDE)
        await pilot.press("z")  # the whole screen
        await pilot.pause()
        assert graph.outer_size.width >= SIZE[0] - 2 and dag.size.width >= dag.wanted_width

    run_app(app, actions, size=SIZE)


@pytest.mark.slow
def test_a_stock_pytorch_encoder_folds_in_the_tree_and_is_framed_in_the_drawing() -> None:
    """A real model, as a user records it: PyTorch's 12-layer ``nn.TransformerEncoder``."""
    torch = pytest.importorskip("torch")
    from autograd_viz.trace.recording import record

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0)
    model = torch.nn.TransformerEncoder(layer, num_layers=12, enable_nested_tensor=False)
    with record() as trace:
        model(torch.randn(5, 2, 16, requires_grad=True)).pow(2).mean().backward()
    app = replay_app(trace)
    kind = "TransformerEncoderLayer"

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v")
        nodes = node_list(app)
        await app.workers.wait_for_complete()
        await pilot.pause()
        lines = [nodes.render_line(y).text for y in range(nodes.size.height)]
        (fold,) = [i for i, line in enumerate(lines) if f"layers.{{0..11}} × 12 · {kind}" in line]
        assert "▸" in lines[fold] and not any(f"layers.3 · {kind}" in line for line in lines)
        nodes.move_to(fold)
        await pilot.press("enter")
        lines = [nodes.render_line(y).text for y in range(nodes.size.height)]
        assert "▾" in lines[fold] and any(f"▸ layers.0 · {kind}" in line for line in lines)
        await pilot.press("enter")
        lines = [nodes.render_line(y).text for y in range(nodes.size.height)]
        assert "▸" in lines[fold] and not any(f"layers.0 · {kind}" in line for line in lines)
        await pilot.press("v")  # the drawing, at a step inside layer 6
        await to_node_in(pilot, trace, "layers.6.linear1")
        dag = app.query_one(DagView)
        await dag.drawn()
        picture = dag.picture
        assert picture is not None
        titles = [frame.title for frame in picture.layout.frames]
        assert f"layers.6 · {kind}" in titles and "layers.6.linear1 · Linear" in titles
        rows = [row.plain for row in dag._drawn_rows[dag._head :]]
        check_frames(dag.pictures(trace, picture_task(trace)), picture, rows)
        drawn = drawn_edges(rows, picture.layout)
        assert sorted(drawn) == sorted((r.sender, r.receiver) for r in picture.layout.routes)

    run_app(app, actions, size=SIZE)


def at_column(line: str, column: int) -> str:
    """The character drawn at ``column`` of ``line`` (a wide character takes two columns)."""
    at = 0
    for char in line:
        if at == column:
            return char
        at += cell_len(char)
    return " "


def test_a_frame_around_a_name_of_wide_characters_and_markup_stays_closed() -> None:
    name = "層[bold]\n"  # two columns a character, markup, a newline: all shown as text

    def program() -> None:
        x = engine.tensor(np.ones(3), requires_grad=True, name="x")
        with engine.scope(name, "區塊"):
            y = (x * 2.0).tanh()
        y.sum().backward()

    with autograd_viz.record() as trace:
        program()
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        await to_node_in(pilot, trace, name)
        dag = app.query_one(DagView)
        picture = dag.picture
        assert picture is not None
        (frame,) = picture.layout.frames
        assert frame.title == "層[bold]\\n · 區塊"
        rows = [row.plain for row in dag._drawn_rows[dag._head :]]
        top, bottom = frame.row, frame.row + frame.height - 1
        right = frame.column + frame.width - 1
        assert frame.title in rows[top]
        assert at_column(rows[top], right) == "┐" and at_column(rows[bottom], right) == "┘"
        for r in range(top + 1, bottom):
            assert at_column(rows[r], right) == "│"

    run_app(app, actions, size=SIZE)


def nested_random_dag(seed: int) -> None:
    """Sums and products of earlier values, each made inside calls nested at random: edges
    into, out of and across frames at every depth."""
    pick = random.Random(seed)
    values = [
        engine.tensor([pick.uniform(1, 2)], requires_grad=True, name=f"p{i}") for i in range(4)
    ]
    for _ in range(16):
        a, b = pick.sample(values, 2)
        path = pick.choice([(), ("m",), ("m", "a"), ("m", "b"), ("m", "a", "c"), ("n",)])
        with contextlib.ExitStack() as calls:
            for name in path:
                calls.enter_context(engine.scope(name, name.upper()))
            values.append(a * b if pick.random() < 0.5 else a + b)
    total = values[-1]
    for v in pick.sample(values[4:-1], 4):
        total = total + v
    total.sum().backward()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("opened", ["all", "default"])
def test_every_line_into_out_of_and_across_frames_leads_back_to_its_sender(
    seed: int, opened: str
) -> None:
    with autograd_viz.record() as trace:
        nested_random_dag(seed)
    task = picture_task(trace)
    pictures = Pictures(trace, task)
    tree = pictures.tree
    if opened == "all":
        choice = pictures.choice(range(len(tree.scopes)), (), range(len(tree.groups)), None)
    else:
        choice = pictures.choice((), (), (), None)
    picture = pictures.picture(choice)
    rows = [row.plain for row in draw_picture(pictures, picture, None, None)]
    check_frames(pictures, picture, rows)
    drawn = drawn_edges(rows, picture.layout)
    assert sorted(drawn) == sorted((r.sender, r.receiver) for r in picture.layout.routes)
    if opened == "all":  # every call open: each node drawn, each call a frame
        assert all(item.node is not None for item in picture.items.values())
        assert len(picture.layout.frames) == len(tree.scopes)
        # every edge of the graph task is drawn along a line that stands for it
        along = {pair for route in picture.layout.routes for pair in route.stands_for}
        item_of = picture.item_of
        edges = {
            (item_of[info.id], item_of[edge[0]])
            for info in task.nodes.values()
            for edge in info.next_edges
            if edge is not None and edge[0] in task.nodes
        }
        assert edges <= along


def test_a_leaf_name_cut_in_the_node_list_keeps_its_layers_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "Acc(encoder.transformer…" for every parameter made the rows of a model's
    # AccumulateGrads alike; a name too long for its room is shortened by its dotted parts,
    # the layer's number kept (Acc(…0.q.weight)), which tells the rows apart. Node ids and
    # sequence numbers from 1 and 0: the numbers a long test session reaches take the
    # columns the names are given.
    monkeypatch.setattr(engine.graph, "_node_ids", itertools.count(1))
    before = engine.graph.restart_sequence_nr(0)
    try:
        with autograd_viz.record() as trace:
            long_named()
    finally:
        engine.graph.restart_sequence_nr(before)
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.pause()
        nodes = node_list(app)
        task = next(iter(trace.graph_tasks.values()))
        rows = {}
        for i, entry in enumerate(nodes.rows):
            info = task.nodes.get(entry.node_id) if entry.node_id is not None else None
            if info is not None and info.leaf is not None and info.leaf.name:
                text = nodes.row_text(i)
                text.truncate(nodes.row_width, overflow="ellipsis")
                rows[info.leaf.name] = text.plain
        assert len(rows) == 3
        for leaf, row in rows.items():
            assert leaf not in row  # too long for its room at 120 columns
            shown = row[row.index("Acc(") + 4 : row.index(") #")]
            layer = leaf.split(".")[2]
            assert shown.endswith(".weight") and f"{layer}." in shown, row
            assert cut_dotted(leaf, len(shown)) == shown
        assert len({row.split(" #")[0] for row in rows.values()}) == 3  # told apart

    run_app(app, actions, size=SIZE)


def test_a_dotted_name_is_shortened_by_its_parts() -> None:
    name = "model.layers.10.mlp.gate_proj.weight"
    assert cut_dotted(name, 40) == name
    assert cut_dotted(name, 17) == "m.l.10.m.g.weight"
    assert cut_dotted(name, 16) == "…l.10.m.g.weight"
    assert cut_dotted(name, 12) == "…10.g.weight"
    assert cut_dotted(name, 10) == "…10.weight"
    assert cut_dotted(name, 7) == "…weight"
    assert cut_dotted(name, 5) == "…ight"
    assert all(len(cut_dotted(name, room)) <= room for room in range(2, 40))
