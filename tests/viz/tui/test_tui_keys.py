"""Every key binding and the mouse, driven through Textual's Pilot on replayed traces."""

from __future__ import annotations

import contextlib
import itertools
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

import engine
from autograd_viz.trace import Trace
from autograd_viz.tui.dag import DagView
from autograd_viz.tui.screens import HelpScreen, TaskPicker
from tests.graphs import FailsInBackward
from tests.viz.dotting import needs_dot
from tests.viz.tui.tuiting import (
    demo_trace,
    event_log,
    export_via_prompt,
    inspector,
    nan_program,
    node_list,
    prompt_bar,
    replay_app,
    run_app,
    status,
    stepped_trace,
)


@pytest.fixture(scope="module")
def trace() -> Trace:
    return demo_trace()


def node_starts(trace: Trace) -> list[int]:
    """Positions just after each ``node_start``."""
    return [e.index + 1 for e in trace.events if e.kind == "node_start"]


def test_step_keys_apply_one_event_each(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        assert app.driver.position == 0
        assert status(app).startswith(f"step 0 of {len(trace.events)}")
        for expected, key in enumerate(["s", "space", "right"], start=1):
            await pilot.press(key)
            assert app.driver.position == expected
        assert status(app).startswith(f"step 3 of {len(trace.events)}")
        assert event_log(app).cursor == 2  # the row of the last event applied
        await pilot.press("p")
        assert app.driver.position == 2
        await pilot.press("left")
        assert app.driver.position == 1

    run_app(app, actions)


def test_next_node_stops_after_each_node_start_and_selects_that_node(trace: Trace) -> None:
    app = replay_app(trace)
    starts = node_starts(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        for expected in starts[:4]:
            await pilot.press("n")
            assert app.driver.position == expected
            event = trace.events[expected - 1]
            assert node_list(app).selected == event.node_id
            assert f"{event.node_name} #{event.node_id}" in inspector(app)
            assert "running" in inspector(app)
        await pilot.press("P")  # back to just after the previous node_start
        assert app.driver.position == starts[2]
        await pilot.press("r")
        assert app.driver.position == 0

    run_app(app, actions)


def test_continue_stops_at_a_breakpoint_then_runs_to_the_end(trace: Trace) -> None:
    app = replay_app(trace)
    starts = node_starts(trace)
    target = trace.events[starts[5] - 1]

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("s")
        assert node_list(app).select(target.node_id)
        await pilot.press("b")
        assert app.driver.breakpoints.nodes == {target.node_id}
        assert "⏺" in status(app)
        await pilot.press("c")
        assert app.driver.position == starts[5]
        assert f"stopped: node_start {target.node_name}#{target.node_id}" in status(app)
        await pilot.press("c")  # no other breakpoint: to the end
        assert app.driver.position == len(trace.events)
        assert "end of the backward pass" in status(app)
        node_list(app).select(target.node_id)
        await pilot.press("b")  # toggles it off
        assert app.driver.breakpoints.nodes == set()

    run_app(app, actions)


def test_run_to_end_ignores_breakpoints(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("n")
        await pilot.press("b")
        await pilot.press("r")
        await pilot.press("e")
        assert app.driver.position == len(trace.events)

    run_app(app, actions)


def test_break_on_non_finite_stops_at_the_first_nan_gradient() -> None:
    trace = stepped_trace(nan_program)
    first = next(e for e in trace.events if _carries_non_finite(e))
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("f")
        assert app.driver.breakpoints.non_finite
        assert "break on NaN/Inf" in status(app)
        await pilot.press("c")
        assert app.driver.position == first.index + 1
        await pilot.press("f")
        assert not app.driver.breakpoints.non_finite
        await pilot.press("r", "c")
        assert app.driver.position == len(trace.events)

    run_app(app, actions)


def _carries_non_finite(event: Any) -> bool:
    from autograd_viz.live import non_finite

    return non_finite(event)


def test_jump_to_first_problem_finds_the_error() -> None:
    def failing() -> None:
        x = engine.tensor([1.0, 2.0], requires_grad=True)
        y = FailsInBackward.apply(x * 2.0)
        with contextlib.suppress(ValueError):
            (y * y).sum().backward()

    trace = stepped_trace(failing)
    error = next(e for e in trace.events if e.kind == "error")
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("a")
        assert app.driver.position == error.index + 1
        assert "first problem: error at FailsInBackwardBackward" in status(app)
        assert "⚠ 1 error, 0 anomalies" in status(app)

    run_app(app, actions)


def test_jump_to_first_problem_says_when_there_is_none(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("s", "a")
        assert app.driver.position == 1
        assert "no anomaly, error or NaN/Inf gradient" in status(app)

    run_app(app, actions)


def test_search_by_name_id_and_leaf_name_walks_every_match(trace: Trace) -> None:
    app = replay_app(trace)
    task = trace.graph_tasks[min(trace.graph_tasks)]
    tanh_ids = {n.id for n in task.nodes.values() if n.name == "TanhBackward0"}
    leaf = next(n for n in task.nodes.values() if n.leaf is not None and n.leaf.name == "W_h")

    async def find(pilot: Pilot[Any], query: str) -> int | None:
        await pilot.press("slash")
        assert prompt_bar(app).asking
        prompt = app.screen.query_one("#prompt-input")
        prompt.value = query  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        return node_list(app).selected

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("s")
        found = {await find(pilot, "tanh") for _ in range(len(tanh_ids))}
        assert found == tanh_ids
        assert await find(pilot, "w_h") == leaf.id
        assert await find(pilot, f"#{leaf.id}") == leaf.id
        before = node_list(app).selected
        assert await find(pilot, "NoSuchBackward") == before

    run_app(app, actions)


def test_switch_graph_task_pins_the_reentrant_task(trace: Trace) -> None:
    app = replay_app(trace)
    inner = next(t for t in trace.graph_tasks.values() if t.reentrant_depth == 1)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("s", "t")
        assert isinstance(app.screen, TaskPicker)
        await pilot.press("down", "down", "enter")  # follow, task 1, task 2
        await pilot.pause()
        assert app.pinned_task == inner.id
        shown = {row.node_id for row in node_list(app).rows if row.node_id is not None}
        assert shown == set(inner.nodes)
        assert "reentrant depth 1" in str(app.query_one("#graph").border_title)
        await pilot.press("t", "enter")  # back to following the step
        await pilot.pause()
        assert app.pinned_task is None
        await pilot.press("t")
        assert isinstance(app.screen, TaskPicker)
        await pilot.press("t")  # the key that opened the picker closes it, changing nothing
        assert not isinstance(app.screen, TaskPicker)
        assert app.pinned_task is None

    run_app(app, actions)


def test_view_key_cycles_topo_tree_and_drawn_dag(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("n")
        nodes = node_list(app)
        headings = [row.heading for row in nodes.rows if row.node_id is None]
        assert headings and headings[0].startswith("topological_nr ")
        await pilot.press("v")
        assert nodes.view == "tree"
        assert nodes.rows[0].node_id == trace.graph_tasks[min(trace.graph_tasks)].root
        await pilot.press("v")
        dag = app.query_one(DagView)
        assert dag.display and not nodes.display
        drawn = "\n".join(row.plain for row in dag._drawn_rows)
        assert "NllLoss#" in drawn and "▼" in drawn
        await pilot.press("v")
        assert nodes.display and nodes.view == "topo"

    run_app(app, actions)


def test_a_move_in_the_drawn_dag_keeps_its_title_and_the_next_view(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        graph = app.query_one("#graph")
        await pilot.press("v", "v")
        dag_title = "dag view · v cycles · enter opens/closes a box"
        assert graph.border_subtitle == dag_title
        for key in ("e", "r", "s", "n", "p"):
            await pilot.press(key)
            assert app.query_one(DagView).display
            assert graph.border_subtitle == dag_title, key
        await pilot.press("v")  # from the drawn DAG, the cycle goes on to the topo list
        assert node_list(app).display and node_list(app).view == "topo"
        assert graph.border_subtitle == "topo view · v cycles"

    run_app(app, actions)


def test_zoom_maximizes_the_focused_panel_and_back(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("z")
        assert app.screen.maximized is app.query_one("#graph")
        await pilot.press("z")
        assert app.screen.maximized is None

    run_app(app, actions)


def test_help_lists_every_key_and_closes(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        described = {what for _, what in app.screen.keys}
        assert {
            "Step",
            "Next node",
            "Back",
            "Continue",
            "Breakpoint",
            "Export",
            "Quit",
        } <= described
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)

    run_app(app, actions)


def test_quit_key_exits(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("q")
        await pilot.pause()

    run_app(app, actions)
    assert app.return_value == 0


@pytest.mark.parametrize("suffix", [".dot", pytest.param(".svg", marks=needs_dot)])
def test_export_writes_the_step_shown(trace: Trace, tmp_path: Path, suffix: str) -> None:
    app = replay_app(trace)
    path = tmp_path / f"step{suffix}"

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("n", "n")
        await export_via_prompt(pilot, str(path))

    run_app(app, actions)
    text = path.read_text()
    if suffix == ".dot":
        assert "digraph backward {" in text and "running" in text
    else:
        svg = ET.fromstring(text)
        nodes = [
            g for g in svg.iter("{http://www.w3.org/2000/svg}g") if "node" in g.get("class", "")
        ]
        assert len(nodes) >= len(trace.graph_tasks[min(trace.graph_tasks)].nodes)


def test_export_to_an_unknown_format_is_an_error_notice(trace: Trace, tmp_path: Path) -> None:
    app = replay_app(trace)
    notices: list[str] = []

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("s", "d")
        app.screen.query_one("#prompt-input").value = str(tmp_path / "x.bmp")  # type: ignore[attr-defined]
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        notices.extend(str(n.message) for n in app._notifications)

    run_app(app, actions)
    assert any("bmp" in n for n in notices), notices
    assert not (tmp_path / "x.bmp").exists()


def test_mouse_selects_a_node_and_jumps_to_an_event(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("n")
        nodes = node_list(app)
        row = next(i for i, r in enumerate(nodes.rows) if r.node_id is not None and i > 1)
        await pilot.click("#nodes", offset=(5, row - nodes.scroll_offset.y))
        assert nodes.selected == nodes.rows[row].node_id
        info = trace.graph_tasks[min(trace.graph_tasks)].nodes[nodes.rows[row].node_id]
        assert f"{info.name} #{info.id}" in inspector(app)
        log = event_log(app)
        first_row = log.scroll_offset.y
        await pilot.click("#events", offset=(10, 1))  # the first row inside the border
        assert app.driver.position == first_row + 1

    run_app(app, actions)


def test_the_node_list_draws_only_the_rows_on_screen() -> None:
    def chain() -> None:
        x = engine.tensor([1.0], requires_grad=True)
        y = x
        for _ in range(5000):
            y = y * 1.0001
        y.sum().backward()

    trace = stepped_trace(chain)
    app = replay_app(trace)
    drawn: list[int] = []
    counter = itertools.count()

    async def actions(pilot: Pilot[Any]) -> None:
        nodes = node_list(app)
        original = nodes.row_text

        def counting(row: int) -> Any:
            next(counter)
            drawn.append(row)
            return original(row)

        nodes.row_text = counting  # type: ignore[method-assign]
        await pilot.press("e", "end")
        await pilot.pause()
        assert nodes.row_count > 5000
        assert nodes.cursor == nodes.row_count - 1

    run_app(app, actions, size=(100, 32))
    assert drawn, "the list drew nothing"
    assert len(set(drawn)) < 100  # a screenful or two, never the 5,000 rows
