"""The tree view at 120 × 40: repeated calls are one row, Enter opens and closes a module row."""

from __future__ import annotations

import re
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widget import Widget

import autograd_viz
from autograd_viz.trace import Trace
from tests.viz.tui.test_tui_modules import blocks
from tests.viz.tui.tuiting import inspector, node_list, replay_app, run_app

SIZE = (120, 40)


@pytest.fixture(scope="module")
def trace() -> Trace:
    with autograd_viz.record() as recorded:
        blocks(12)
    return recorded


def screen_lines(widget: Widget) -> list[str]:
    """What ``widget`` shows on screen, line by line."""
    return [widget.render_line(y).text.rstrip() for y in range(widget.size.height)]


def row_of(lines: list[str], words: str) -> int:
    (found,) = [i for i, line in enumerate(lines) if words in line]
    return found


def test_alike_calls_are_one_closed_row_that_enter_opens_and_closes(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v")
        nodes = node_list(app)
        lines = screen_lines(nodes)
        assert any("▾ model · MLP · " in line for line in lines)
        fold = row_of(lines, "▸ model.layers.{0..11} × 12 · Block · 72 nodes")
        assert not any("model.layers.3 " in line for line in lines)  # folded away
        nodes.move_to(fold)
        await pilot.press("enter")
        lines = screen_lines(nodes)
        assert "▾ model.layers.{0..11} × 12" in lines[fold]
        calls = [line for line in lines if "· Block · 6 nodes" in line]
        assert len(calls) == 12 and all("▸ model.layers." in line for line in calls)
        third = row_of(lines, "▸ model.layers.3 · Block · 6 nodes")
        nodes.move_to(third)
        await pilot.press("enter")  # the call's own nodes and calls, below it
        lines = screen_lines(nodes)
        assert "▾ model.layers.3 · Block" in lines[third]
        # Opened one level: its calls are rows of their own, closed.
        linear = row_of(lines, "▸ model.layers.3.linear · Linear · 4 nodes")
        assert third < linear <= third + 3 and "▸ model.layers.3.act · Tanh" in lines[linear + 1]
        nodes.move_to(linear)
        await pilot.press("enter")
        lines = screen_lines(nodes)
        assert "▾ model.layers.3.linear" in lines[linear]
        assert "Acc(layers.3.weight)" in " ".join(lines[linear + 1 : linear + 5])
        nodes.move_to(linear + 1)
        await pilot.press("enter")  # on a node: its call closes, the cursor on the call's row
        lines = screen_lines(nodes)
        assert "▸ model.layers.3.linear" in lines[linear]
        assert nodes.cursor == linear and nodes.selected is None
        assert "Acc(layers.3.weight)" not in " ".join(lines)
        nodes.move_to(fold)
        await pilot.press("enter")
        lines = screen_lines(nodes)
        assert "▸ model.layers.{0..11} × 12" in lines[fold]
        assert not any("model.layers.3 " in line for line in lines)

    run_app(app, actions, size=SIZE)


def test_the_step_opens_the_calls_around_its_node_and_closes_them_when_it_leaves(
    trace: Trace,
) -> None:
    app = replay_app(trace)
    task = next(iter(trace.graph_tasks.values()))

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v")
        nodes = node_list(app)
        seen: set[str] = set()
        for _ in range(40):
            await pilot.press("n")
            node, event = nodes.selected, app.driver.state().event
            assert node is not None and event is not None and node == event.node_id
            info = task.nodes[node]
            lines = screen_lines(nodes)
            assert any(f"#{node} " in line for line in lines)  # listed, under the cursor
            if info.scope:
                layer = info.scope[1][0] if len(info.scope) > 1 else ""
                seen.add(layer)
                open_layers = [line for line in lines if re.search(r"▾ model\.layers\.\d+ ·", line)]
                assert len(open_layers) <= 1  # the one the step is in, the others closed
        assert len(seen) > 1  # the backward went through more than one layer

    run_app(app, actions, size=SIZE)


def test_the_inspector_s_hints_follow_the_focus_and_what_is_under_it(trace: Trace) -> None:
    app = replay_app(trace)
    task = next(iter(trace.graph_tasks.values()))
    layer3 = [
        n.id
        for n in task.nodes.values()
        if n.leaf is None and any(s[0] == "model.layers.3" for s in n.scope)
    ]

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v")
        nodes = node_list(app)
        lines = screen_lines(nodes)
        nodes.move_to(row_of(lines, "model.layers.{0..11} × 12"))
        await pilot.pause()
        said = " ".join(inspector(app).split())
        assert "▸ model.layers.{0..11} × 12 · Block · 72 nodes" in said
        assert "Enter opens it" in said and "Tab to the node list" not in said
        await pilot.press("enter")
        said = " ".join(inspector(app).split())
        assert "▾ model.layers.{0..11} × 12" in said and "Enter closes it" in said
        await pilot.press("v")  # the drawing, which takes the focus
        nodes.select(layer3[0])
        await pilot.pause()
        said = " ".join(inspector(app).split())
        assert "drawn in the box model.layers.{0..11} ×12 · Enter opens it" in said
        await pilot.press("enter")  # the fold's first call opens; layers.3 is in the others' box
        await pilot.pause()
        said = " ".join(inspector(app).split())
        assert "drawn in the box model.layers.{1..11} ×11" in said
        assert task.nodes[layer3[0]].name in said

    run_app(app, actions, size=SIZE)
