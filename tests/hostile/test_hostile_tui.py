"""Hostile names through the TUI, headless: shown as text in every panel, never as markup.

See Note [Names are text] in ``autograd_viz.trace.text``.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

import engine
from autograd_viz.draw.model import select
from autograd_viz.draw.model.graph_view import from_state
from autograd_viz.draw.model.tree import MAX_BOXES
from autograd_viz.trace import Trace
from autograd_viz.trace.recording import record
from autograd_viz.trace.text import printable
from autograd_viz.tui.dag import DagView
from autograd_viz.tui.nodes import NodeList
from autograd_viz.tui.screens import TaskPicker
from tests.hostile.names import ACTING, HOSTILE
from tests.hostile.program import class_name, function_named, hostile_program, hostile_trace
from tests.viz.tui.tuiting import find_in_tree, replay_app, run_app, status

REPORTED = ("rich_close", "rich_action", "osc_title", "textual_variable", "long")
"""The names the defect was reported with: each gets an app of its own."""


def acting(text: str) -> list[str]:
    return [hex(ord(c)) for c in ACTING if c in text]


def engine_panel(app: Any) -> str:
    """The ready-queues and engine-threads panel's text."""
    from rich.console import Console

    console = Console(width=400, record=True, color_system=None)
    console.print(app.query_one("#engine-body", Static).content)
    return console.export_text()


@pytest.mark.parametrize("key", REPORTED)
def test_first_problem_on_a_hostile_name_is_reported_as_text(key: str) -> None:
    name = HOSTILE[key]
    app = replay_app(hostile_trace(name))
    seen: dict[str, str] = {}

    async def actions(pilot: Pilot[Any]) -> None:
        for _ in range(4):  # into the first backward, run on the thread called `name`
            await pilot.press("s")
        seen["threads"] = engine_panel(app)
        await pilot.press("a")  # to the first problem: the error in the Function `name`
        await pilot.pause()
        seen["status"] = status(app).replace("\n", "")
        await pilot.click("#status")  # a name holding [@click=app.quit] is no action
        seen["screen"] = app.export_screenshot()
        assert app.is_running

    run_app(app, actions, size=(160, 48))
    assert acting(seen["screen"]) == [] and acting(seen["threads"]) == []
    assert f"first problem: error at {printable(class_name(name))}"[:80] in seen["status"]
    assert printable(name)[:40] in seen["threads"]


@pytest.fixture(scope="module")
def everything_hostile() -> Trace:
    """Every hostile name's program, one after the other, in one trace."""
    with record() as trace:
        for name in HOSTILE.values():
            hostile_program(name)
    return trace


def test_continue_stops_at_each_hostile_error_and_says_so_as_text(
    everything_hostile: Trace,
) -> None:
    app = replay_app(everything_hostile)
    said: list[str] = []
    threads: list[str] = []

    async def actions(pilot: Pilot[Any]) -> None:
        for _ in HOSTILE:
            await pilot.press("c")  # continue stops at every error
            said.append(status(app).replace("\n", ""))
        starts = [
            e.index
            for e in everything_hostile.events
            if e.kind == "graph_task_start" and e.thread in HOSTILE.values()
        ]
        for start in starts:  # each backward on a thread named after a hostile name
            app.driver.goto(start + 4)
            app.refresh_view(follow=True)
            threads.append(engine_panel(app))
        assert acting(app.export_screenshot()) == []
        assert app.is_running

    run_app(app, actions, size=(160, 48))
    for name, line, lanes in zip(HOSTILE.values(), said, threads, strict=True):
        assert f"stopped: error {printable(class_name(name))}"[:80] in line
        assert printable(name)[:40] in lanes and acting(lanes) == []


def test_every_view_of_a_trace_full_of_hostile_names_draws(everything_hostile: Trace) -> None:
    trace = everything_hostile
    app = replay_app(trace)
    screens: list[str] = []

    async def actions(pilot: Pilot[Any]) -> None:
        for step in range(0, len(trace) + 1, len(trace) // 4):
            app.driver.goto(step)
            app.refresh_view(follow=True)
            await pilot.pause()
            for key in ("v", "v", "v", "enter"):
                await pilot.press(key)
            screens.append(app.export_screenshot())
        await pilot.press("t")
        assert isinstance(app.screen, TaskPicker)
        screens.append(app.export_screenshot())
        await pilot.press("escape")
        assert app.is_running

    run_app(app, actions, size=(160, 48))
    assert all(acting(screen) == [] for screen in screens)


@pytest.mark.parametrize("key", ["osc_title", "rich_action", "percent"])
def test_a_folded_chain_of_hostile_names_is_named_as_text_and_quoted_for_the_shell(
    key: str,
) -> None:
    name = HOSTILE[key] + " it's"
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    step = function_named(name)
    with record() as trace:
        y = x
        for _ in range(MAX_BOXES):  # no modules: past MAX_BOXES nodes the chain is folded
            y = step.apply(y * 0.5)
        y.sum().backward()
    app = replay_app(trace)
    said: dict[str, str] = {}

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v", "v")
        dag = app.query_one(DagView)
        picture = dag.picture
        assert picture is not None
        for _ in range(len(picture.items)):
            await pilot.press("right")
            selected = app.query_one(NodeList).selected
            assert selected is not None
            item = picture.items[picture.item_of[selected]]
            if item.is_box:
                break
        assert item.is_box
        said["name"] = item.name
        await pilot.press("enter")
        await pilot.pause()
        (notice,) = [str(n.message) for n in app._notifications]
        said["notice"] = notice
        said["screen"] = app.export_screenshot()

    run_app(app, actions, size=(160, 48))
    assert acting(said["notice"]) == [] and acting(said["screen"]) == []
    command = shlex.split(said["notice"].split("to see it whole: ", 1)[1])
    assert command[:3] == ["autograd-viz", "dot", "TRACE"] and command[3] == "--expand"
    assert command[4] == said["name"]  # the name as the view shows it, as the shell passes it
    view = from_state(trace.state_at(len(trace)))
    assert select.resolve(view, command[4]).kind == "chain"


@pytest.mark.parametrize("key", ["rich_action", "osc_title", "markup_link", "unicode"])
def test_slash_finds_a_hostile_parameter_by_the_name_shown(key: str) -> None:
    name = HOSTILE[key]
    trace = hostile_trace(name)
    app = replay_app(trace)
    said: dict[str, Any] = {}

    async def actions(pilot: Pilot[Any]) -> None:
        said["selected"] = await find_in_tree(pilot, printable(name))
        said["status"] = status(app)
        said["screen"] = app.export_screenshot()
        assert app.is_running

    run_app(app, actions, size=(160, 48))
    found = [
        t.nodes[said["selected"]] for t in trace.graph_tasks.values() if said["selected"] in t.nodes
    ]
    assert found and found[0].leaf is not None and found[0].leaf.name == name
    assert f"parameter {printable(name)}" in said["status"].replace("\n", "")
    assert acting(said["screen"]) == []
