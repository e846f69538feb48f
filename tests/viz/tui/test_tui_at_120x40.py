"""The TUI at 120 × 40 on a model of repeated blocks: the drawn DAG's module frames, its
names cut at one end at most, and the key bar that follows the focus."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot

import autograd_viz
from autograd_viz.trace import Trace
from autograd_viz.tui.keybar import FOCUS_KEYS, KeyBar
from tests.viz.tui.test_tui_modules import blocks
from tests.viz.tui.tuiting import replay_app, run_app

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
