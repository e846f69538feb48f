"""The status bar says when a live session stopped recording at ``max_events``."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from textual.pilot import Pilot

import engine
from autograd_viz.live import LiveSession
from autograd_viz.tui import LiveDriver, VizApp
from tests.viz.tui.tuiting import run_app, settle, status


def test_the_status_bar_says_recording_stopped_at_max_events() -> None:
    release = threading.Event()

    def program() -> None:
        w = engine.tensor([1.0, 2.0], requires_grad=True)
        for _ in range(5):
            (w * w).sum().backward()
        release.wait(10)  # still running after the session stopped recording

    driver = LiveDriver(LiveSession(program, max_events=10))
    app = VizApp(driver, source="loop")

    async def actions(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("e")  # run to the end: it stops at max_events
        await settle(pilot)
        assert driver.recorded == 10
        assert "recording stopped at max_events" in status(app).replace("\n", "")
        release.set()

    with pytest.warns(RuntimeWarning, match="recorded 10 events"):
        run_app(app, actions)
