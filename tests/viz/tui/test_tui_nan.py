"""A NaN in the TUI: ``a`` finds where it was born, and the inspector says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from autograd_viz.cli.main import main
from autograd_viz.trace import Trace
from tests.viz.tui.test_tui_sizes import drawn_row
from tests.viz.tui.tuiting import inspector, node_list, replay_app, run_app, status

ROOT = Path(__file__).resolve().parents[3]
SIZES = [(80, 24), (120, 40), (160, 48)]


@pytest.fixture(scope="module")
def nan_trace(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    """``autograd-viz nan -o t.jsonl examples/nan_log_zero.py``, loaded as ``replay`` loads it."""
    path = tmp_path_factory.mktemp("nan") / "t.jsonl"
    found = main(["nan", "-o", str(path), str(ROOT / "examples" / "nan_log_zero.py")])
    assert found == 1  # the status for "a NaN was found"
    return Trace.load(path)


def log_node(trace: Trace) -> int:
    """The log whose output was born Inf: the first anomaly the trace holds."""
    first = next(e for e in trace.events if e.kind == "anomaly")
    assert first.node_name == "LogBackward0" and first.data["born"]
    assert first.node_id is not None
    return first.node_id


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_in_a_replayed_nan_trace_selects_and_marks_the_birth(
    nan_trace: Trace, size: tuple[int, int]
) -> None:
    app = replay_app(nan_trace)
    log = log_node(nan_trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("a")
        assert "LogBackward0" in status(app)
        nodes = node_list(app)
        assert nodes.selected == log
        row = drawn_row(nodes, nodes.cursor)
        assert "⚠" in row and f"#{log}" in row
        assert f"LogBackward0 #{log}" in inspector(app)

    run_app(app, actions, size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_inspector_says_why_the_nan_was_born(nan_trace: Trace, size: tuple[int, int]) -> None:
    app = replay_app(nan_trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("a")
        text = inspector(app)
        assert "⚠ Inf born here in the forward pass: log of 0" in text
        # near the top, where even the 80x24 inspector shows it
        lines = text.splitlines()
        assert any("born here" in line for line in lines[:2])
        await pilot.press("e")  # at the end, the backward NaNs are there too
        nodes = node_list(app)
        nodes.select(log_node(nan_trace))
        await pilot.pause()
        assert "NaN born here in backward (gradient out 0)" in inspector(app)

    run_app(app, actions, size=size)


def test_the_forward_traceback_shows_the_users_frames_their_line_first(nan_trace: Trace) -> None:
    app = replay_app(nan_trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("a")
        text = inspector(app)
        section = text[text.index("forward call") :]
        frames = [line.strip() for line in section.splitlines()[1:] if "nan_log_zero.py:" in line]
        assert [f.split(" in ")[0].rsplit(":", 1)[1] for f in frames] == ["22", "30", "37"]
        assert "p.log()" in section.splitlines()[2]  # the user's line, right under its frame
        for ours in ("runpy", "autograd_viz", "bin/autograd-viz", "engine/"):
            assert ours not in section

    run_app(app, actions, size=(120, 40))


def test_run_anomaly_stops_continue_where_the_nan_is_born(monkeypatch: pytest.MonkeyPatch) -> None:
    """``autograd-viz run --anomaly SCRIPT``: c stops at the birth, and the inspector says why."""
    from autograd_viz.cli import tui as tui_commands
    from autograd_viz.tui import VizApp
    from autograd_viz.tui.driver import LiveDriver
    from tests.viz.tui.tuiting import settle

    seen: dict[str, Any] = {}

    def headless(attached: LiveDriver, source: str, output: str | None = None, **_: object) -> int:
        # The TUI, without a terminal. A Pilot needs the main thread: the script runs on a
        # thread of the session's here.
        driver = LiveDriver(attached.session)
        driver.breakpoints = attached.breakpoints
        app = VizApp(driver, source=source)

        async def actions(pilot: Pilot[Any]) -> None:
            await settle(pilot)  # the app lets the first event through: here, the birth
            assert "break on NaN/Inf" in status(app)
            seen["event"] = driver.trace.events[driver.position - 1]
            seen["status"] = status(app)
            await pilot.press("c")  # the next finding: the NaN the Inf makes downstream
            await settle(pilot)
            assert driver.trace.events[driver.position - 1].kind == "anomaly"
            await pilot.press("e")
            await settle(pilot)
            await pilot.press("a")  # with the graph known, a selects the birth
            await settle(pilot)
            seen["selected"] = node_list(app).selected
            seen["inspector"] = inspector(app)
            await pilot.press("q")

        run_app(app, actions, size=(120, 40))
        return 0

    monkeypatch.setattr(tui_commands, "has_terminal", lambda: True)
    monkeypatch.setattr(tui_commands, "run_beside", headless)
    assert main(["run", "--anomaly", str(ROOT / "examples" / "nan_log_zero.py")]) == 0
    event = seen["event"]
    assert event.kind == "anomaly" and event.node_name == "LogBackward0" and event.data["born"]
    assert f"stopped: anomaly LogBackward0#{event.node_id}" in seen["status"]
    assert seen["selected"] == event.node_id
    assert "⚠ Inf born here in the forward pass: log of 0" in seen["inspector"]
