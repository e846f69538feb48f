"""Break on NaN/Inf stops where a value reaches something, not at a contained birth (Note
[Breaking where a value reaches something] in ``autograd_viz/live/breakpoints.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

pytest.importorskip("torch")

from autograd_viz.cli.main import main
from autograd_viz.live import born_where, is_problem, problems
from autograd_viz.nan.watch import watch_nan
from tests.viz.tui.tuiting import run_app, status

SCRIPT = """
import torch

v = torch.tensor([0.0, 1.0, 2.0])
w = torch.ones(3, requires_grad=True)
for step in range(2):
    bucket = v.log().to(torch.long)  # contained: cast to an integer
    (bucket * w).sum().backward()
h = v.log()  # born here
loss = (h * (v > 0).float() * w).sum()
loss.backward()
"""


def _line(marker: str) -> int:
    (number,) = [i + 1 for i, line in enumerate(SCRIPT.splitlines()) if marker in line]
    return number


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "reached.py"
    path.write_text(SCRIPT, encoding="utf-8")
    return path


def test_the_first_problem_is_the_birth_that_reached_the_loss(script: Path) -> None:
    with watch_nan() as watch:
        exec(compile(SCRIPT, str(script), "exec"), {"__name__": "reached"})
    events = watch.trace.events
    births = [e for e in events if e.kind == "anomaly" and e.data.get("born")]
    assert len(births) == 3  # two contained, one reached
    assert not any(is_problem(e) for e in births)  # none is a stop while running
    stop = next(e for e in events if is_problem(e))
    assert stop.data.get("reached") == "loss"
    assert born_where(events, stop) == (
        f"Inf born in aten.log.default at {script}:{_line('# born here')} reached the loss"
    )
    # Once the record says which birth was reached, a jump to the first problem lands on it.
    first = next(e for e in events if problems(events)(e))
    assert first is births[2]


def test_run_anomaly_passes_over_contained_births_and_says_where_it_was_born(
    script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autograd_viz.cli import tui as tui_commands
    from autograd_viz.tui import VizApp
    from autograd_viz.tui.driver import LiveDriver
    from tests.viz.tui.tuiting import settle

    seen: dict[str, Any] = {}

    def headless(attached: LiveDriver, source: str, **_: Any) -> int:
        driver = LiveDriver(attached.session)
        driver.breakpoints = attached.breakpoints
        app = VizApp(driver, source=source)

        async def actions(pilot: Pilot[Any]) -> None:
            await settle(pilot)  # the app lets the first event through: a contained birth
            assert driver.trace.events[driver.position - 1].data.get("birth") == 1
            assert "stopped" not in status(app)  # no breakpoint matched there
            await pilot.press("c")
            await settle(pilot)
            seen["event"] = driver.trace.events[driver.position - 1]
            seen["before"] = list(driver.trace.events[: driver.position])
            seen["status"] = " ".join(status(app).split())  # as one line, however it wrapped
            await pilot.press("q")

        run_app(app, actions, size=(160, 40))
        return 0

    monkeypatch.setattr(tui_commands, "has_terminal", lambda: True)
    monkeypatch.setattr(tui_commands, "run_beside", headless)
    main(["run", "--anomaly", str(script)])
    event = seen["event"]
    assert event.kind == "anomaly" and event.data.get("reached") == "loss"
    # The contained births were recorded and passed over.
    assert sum(bool(e.data.get("born")) for e in seen["before"] if e.kind == "anomaly") == 3
    assert f"reached.py:{_line('# born here')}" in seen["status"]
    assert "reached the loss" in seen["status"]
