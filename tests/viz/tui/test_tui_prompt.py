"""The prompt of ``/`` and ``d``: a bar on the main screen that asks, answers or cancels."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from autograd_viz.trace import Trace
from autograd_viz.tui.nodes import NodeList
from tests.viz.tui.test_tui_screens import inside
from tests.viz.tui.tuiting import demo_trace, node_list, prompt_bar, replay_app, run_app


@pytest.fixture(scope="module")
def trace() -> Trace:
    return demo_trace()


def typed(app: Any) -> str:
    return app.query_one("#prompt-input", Input).value


def test_keys_typed_in_the_prompt_are_text_not_the_apps_keys(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("s")
        position = app.driver.position
        await pilot.press("slash")
        bar = prompt_bar(app)
        assert bar.asking and isinstance(app.focused, Input)
        await pilot.press("s", "n", "v", "e", "q", "question_mark")
        assert typed(app) == "snveq?"
        assert app.driver.position == position  # no step, no end
        assert app.is_running and app.view == "topo"  # no quit, no view change
        assert len(app.screen_stack) == 1  # no help page

    run_app(app, actions)


def test_escape_cancels_and_gives_the_focus_back(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("s", "down")
        before = node_list(app).selected
        said = app.message
        await pilot.press("slash", "t", "a", "n", "h", "escape")
        await pilot.pause()
        bar = prompt_bar(app)
        assert not bar.asking and not bar.display
        assert node_list(app).selected == before  # nothing was looked for
        assert app.message == said  # and nothing said about a find
        assert isinstance(app.focused, NodeList)
        await pilot.press("s")  # the app's keys are the app's again
        assert app.driver.position == 2

    run_app(app, actions)


def test_enter_finds_and_the_next_slash_offers_the_same_query(trace: Trace) -> None:
    app = replay_app(trace)
    task = trace.graph_tasks[min(trace.graph_tasks)]
    tanh = {n.id for n in task.nodes.values() if n.name == "TanhBackward0"}

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("s", "slash", "t", "a", "n", "h", "enter")
        await pilot.pause()
        assert not prompt_bar(app).display
        assert node_list(app).selected in tanh
        assert isinstance(app.focused, NodeList)
        await pilot.press("slash")
        assert typed(app) == "tanh"
        await pilot.press("backspace", "backspace", "backspace", "backspace", "enter")
        await pilot.pause()  # an empty answer looks for nothing
        assert not prompt_bar(app).display

    run_app(app, actions)


def test_focus_leaving_the_prompt_cancels_it(trace: Trace) -> None:
    app = replay_app(trace)
    answers: list[str | None] = []

    async def actions(pilot: Pilot[Any]) -> None:
        bar = prompt_bar(app)
        bar.ask("Where?", answers.append, value="here")
        await pilot.pause()
        await pilot.press("tab")
        await pilot.pause()
        assert answers == [None]
        assert not bar.display and not isinstance(app.focused, Input)

    run_app(app, actions)


def test_a_second_question_cancels_the_first(trace: Trace) -> None:
    app = replay_app(trace)
    first: list[str | None] = []
    second: list[str | None] = []

    async def actions(pilot: Pilot[Any]) -> None:
        bar = prompt_bar(app)
        bar.ask("First?", first.append)
        bar.ask("Second?", second.append, value="b")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert first == [None]
        assert second == ["b"]

    run_app(app, actions)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_prompt_moves_no_panel_and_shows_its_title_as_text(
    trace: Trace, size: tuple[int, int]
) -> None:
    app = replay_app(trace)
    title = "Export [bold]x[/bold] to [link=y]z[/link]?"

    async def actions(pilot: Pilot[Any]) -> None:
        panels = ("#graph", "#engine", "#inspector", "#events", "#status", "#keys")
        before = {p: app.query_one(p).region for p in panels}
        prompt_bar(app).ask(title, lambda _: None, value="[red]v[/red]")
        await pilot.pause()
        assert {p: app.query_one(p).region for p in panels} == before
        shown = inside(app, "#prompt")
        assert title in shown  # markup is text here
        assert "[red]v[/red]" in shown

    run_app(app, actions, size=size)
