"""Hostile names through the TUI, headless: shown as text in every panel, never as markup.

See Note [Names are text] in ``autograd_viz.trace.text``.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from autograd_viz.sources.recorder import record
from autograd_viz.trace.text import printable
from autograd_viz.tui.screens import TaskPicker
from tests.hostile.names import ACTING, HOSTILE
from tests.hostile.program import class_name, hostile_program, hostile_trace
from tests.viz.tui.tuiting import replay_app, run_app, status


def acting(text: str) -> list[str]:
    return [hex(ord(c)) for c in ACTING if c in text]


def engine_panel(app: Any) -> str:
    """The ready-queues and engine-threads panel's text."""
    from rich.console import Console

    console = Console(width=400, record=True, color_system=None)
    console.print(app.query_one("#engine-body", Static).content)
    return console.export_text()


@pytest.mark.parametrize("name", HOSTILE.values(), ids=HOSTILE.keys())
def test_status_bar_and_thread_panel_show_hostile_names_as_text(name: str) -> None:
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


def test_every_view_of_a_trace_full_of_hostile_names_draws() -> None:
    with record() as trace:
        for name in HOSTILE.values():
            hostile_program(name)
    app = replay_app(trace)
    screens: list[str] = []

    async def actions(pilot: Pilot[Any]) -> None:
        for step in range(0, len(trace) + 1, len(trace) // 6):
            app.driver.goto(step)
            app.refresh_view(follow=True)
            await pilot.pause()
            for key in ("v", "v", "v", "e", "enter"):
                await pilot.press(key)
            screens.append(app.export_screenshot())
        await pilot.press("t")
        assert isinstance(app.screen, TaskPicker)
        screens.append(app.export_screenshot())
        await pilot.press("escape")
        assert app.is_running

    run_app(app, actions, size=(160, 48))
    assert all(acting(screen) == [] for screen in screens)
