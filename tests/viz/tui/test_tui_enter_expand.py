"""Enter in the drawn DAG opens a box as ``--expand`` of its name does, and closes it again."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot

import autograd_viz
import engine
from autograd_viz.trace import Trace
from autograd_viz.tui import dag as dag_module
from tests.viz.tui.test_tui_modules import blocks, dag_of
from tests.viz.tui.test_tui_tree_folds import screen_lines
from tests.viz.tui.tuiting import inspector, node_list, replay_app, run_app

SIZE = (120, 40)


@pytest.fixture(scope="module")
def trace() -> Trace:
    with autograd_viz.record() as recorded:
        blocks(12)
    return recorded


def made_in(trace: Trace, path: str) -> list[int]:
    """The ids of the nodes made in module ``path`` (its calls' included), leaves left out."""
    (task,) = trace.graph_tasks.values()
    return [
        n.id
        for n in task.nodes.values()
        if n.leaf is None and any(scope[0] == path for scope in n.scope)
    ]


def test_enter_opens_a_fold_s_first_call_whole_and_closes_it(trace: Trace) -> None:
    app = replay_app(trace)
    in_layer = {layer: made_in(trace, f"model.{layer}") for layer in ("layers.0", "layers.3")}

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = dag_of(app)
        assert dag.has_focus
        drawn = "\n".join(screen_lines(dag))
        assert "model.layers.{0..11} ×12" in drawn
        node_list(app).select(in_layer["layers.3"][0])  # the fold's box is selected
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert dag.expanded == ("model.layers.{0..11}",)  # the name --expand reads
        drawn = "\n".join(screen_lines(dag))
        # The first call open, whole (its Linear's nodes drawn), the eleven others one box.
        assert "model.layers.{1..11} ×11" in drawn
        picture = dag.picture
        assert picture is not None
        for node in in_layer["layers.0"]:
            assert not picture.items[picture.item_of[node]].is_box
        assert all(picture.items[picture.item_of[n]].is_box for n in in_layer["layers.3"])
        node_list(app).select(in_layer["layers.0"][0])
        await pilot.pause()
        await pilot.press("enter")  # on a node of the opened call: it closes
        await pilot.pause()
        assert dag.expanded == ()
        drawn = "\n".join(screen_lines(dag))
        assert "model.layers.{0..11} ×12" in drawn

    run_app(app, actions, size=SIZE)


def test_enter_on_one_call_of_a_fold_opens_that_call_alone(trace: Trace) -> None:
    app = replay_app(trace)
    layer3 = made_in(trace, "model.layers.3")

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = dag_of(app)
        dag.expanded = ("model.layers.3",)  # as Enter leaves it on that call's box
        node_list(app).select(layer3[0])
        await pilot.pause()
        picture = dag.picture
        assert picture is not None
        assert all(not picture.items[picture.item_of[n]].is_box for n in layer3)
        drawn = "\n".join(screen_lines(dag))
        assert "model.layers.{0..2,4..11} ×11" in drawn  # its alike siblings stay one box

    run_app(app, actions, size=SIZE)


def test_a_label_the_view_s_edge_cuts_ends_in_an_ellipsis() -> None:
    leaves = [
        engine.tensor([1.0], requires_grad=True, name=f"an_input_with_a_long_name_{i}")
        for i in range(8)
    ]
    with autograd_viz.record() as wide:
        sum((x * 2.0 for x in leaves), engine.tensor([0.0])).sum().backward()
    app = replay_app(wide)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = dag_of(app)
        await pilot.pause()
        width = dag.scrollable_content_region.width
        rows = [row.plain for row in dag._drawn_rows[dag._head :]]
        assert max(len(row) for row in rows) > width  # wider than the view: it scrolls
        cut = 0
        for x in range(0, max(len(row) for row in rows) - width + 1, 3):
            dag.scroll_to(x=x, animate=False, immediate=True)
            await pilot.pause()
            for y in range(dag.size.height):
                line = dag.render_line(y).text
                row = y + dag.scroll_offset.y - dag._head
                if not 0 <= row < len(rows):
                    continue
                whole, at = rows[row], dag.scroll_offset.x
                for edge, outside in ((at, at - 1), (at + width - 1, at + width)):
                    if (
                        0 <= outside < len(whole)
                        and edge < len(whole)
                        and not whole[outside].isspace()
                        and not whole[edge].isspace()
                        and whole[edge] not in "│─┌┐└┘▼"
                        and whole[outside] not in "│─┌┐└┘▼"
                    ):
                        assert line[edge - at] == "…", (line, whole)
                        cut += 1
        assert cut  # some label was cut, and each cut one says so

    run_app(app, actions, size=(80, 24))


def test_the_inspector_names_the_box_of_a_picture_made_in_a_thread(
    trace: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dag_module, "LATER_NODES", 10)  # every picture made in a thread
    app = replay_app(trace)
    layer0 = made_in(trace, "model.layers.0")

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = dag_of(app)
        await dag.drawn()
        node_list(app).select(layer0[0])
        await pilot.pause()
        said = " ".join(inspector(app).split())
        assert "drawn in the box model.layers.{0..11} ×12 · Enter opens it, ← →" in said
        node_list(app).focus()  # Enter there does not open the box: the hint says where it does
        await pilot.pause()
        said = " ".join(inspector(app).split())
        assert "×12 · Enter in the drawing opens it" in said and "← →" not in said
        dag.focus()
        await pilot.pause()
        await pilot.press("enter")
        await dag.drawn()
        await pilot.pause()
        picture = dag.picture
        assert picture is not None and not picture.items[picture.item_of[layer0[0]]].is_box
        assert "drawn in the box" not in inspector(app)

    run_app(app, actions, size=SIZE)
