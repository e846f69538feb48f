"""``run --last N`` in the TUI: the last N calls kept, and the view opened at the first NaN.

As ``record --last N`` does, the session stops at the first NaN or Inf (Note
[A live flight recorder] in ``autograd_viz/live/window.py``): ``e`` stops there
with the calls before it still kept, and after its call nothing more is kept.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from textual.pilot import Pilot

from autograd_viz.live import LiveSession
from autograd_viz.nan.watch import nan_checks
from autograd_viz.trace.calls import CallSelection
from autograd_viz.trace.recording import record
from autograd_viz.tui import LiveDriver, VizApp
from tests.viz.live.test_live_last import _nan_loop
from tests.viz.sources.test_training_runs import _calls
from tests.viz.tui.tuiting import run_app, settle, status


def _checked_loop(results: list[list[np.ndarray]]) -> None:
    """Ten calls, a NaN born in the forward of call 5, with the NaN checks on (as run has)."""
    with nan_checks():
        results.append(_nan_loop(10, nan_at=5))


def test_e_stops_at_the_first_nan_with_the_last_calls_kept_then_keeps_no_more() -> None:
    with record(last=2) as recorded:
        _checked_loop([])
    results: list[list[np.ndarray]] = []
    session = LiveSession(lambda: _checked_loop(results), calls=CallSelection(last=2))
    driver = LiveDriver(session)
    app = VizApp(driver, source="nan loop")

    async def actions(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        assert "keeps the last 2 calls" in status(app)
        await pilot.press("e")  # to the end, but a NaN comes first: the view opens on it
        await settle(pilot)
        found = driver.finding
        assert found is not None and found.kind == "anomaly"
        assert driver.position == found.index + 1
        assert driver.trace.events[driver.position - 1] is found
        assert "first NaN/Inf: anomaly" in status(app)
        assert _calls(driver.trace) == [3, 4], "born in call 5's forward: the two before it"
        assert not driver.recorded_all and "engine paused" in status(app)
        await pilot.press("e")  # call 5 is recorded to its end, then the program runs on
        await settle(pilot)
        assert driver.recorded_all and driver.kept_finding
        assert _calls(driver.trace) == _calls(recorded) == [4, 5]
        assert driver.finding is not None and driver.finding.seq == found.seq
        assert "kept the last 2 calls, up to the first NaN/Inf" in status(app)
        assert "program finished" in status(app)
        await pilot.press("r", "a")  # the first problem is still there to jump to
        assert driver.position == driver.finding.index + 1

    run_app(app, actions, size=(160, 40))
    app.stop_driver()
    assert session.error is None
    assert all(
        np.array_equal(a, b, equal_nan=True)
        for a, b in zip(results[0], _nan_loop(10, nan_at=5), strict=True)
    )
