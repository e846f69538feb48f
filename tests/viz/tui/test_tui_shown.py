"""The app says what is shown; panels redraw themselves from it, only when their part changed."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from textual.pilot import Pilot

from autograd_viz.trace import Trace
from autograd_viz.tui.capture import PrintCapture
from autograd_viz.tui.shown import EnginePanel, Inspector, ShownPanel
from tests.viz.tui.tuiting import demo_trace, node_list, replay_app, run_app, status


@pytest.fixture(scope="module")
def trace() -> Trace:
    return demo_trace()


def test_the_panels_follow_what_the_app_says_is_shown(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("s", "s", "n")
        shown = app.shown
        assert shown is not None and shown.state.step == app.driver.position
        assert shown.selected == node_list(app).selected
        assert status(app).startswith(f"step {app.driver.position} of {len(trace.events)}")
        for panel in app.query(ShownPanel):
            assert panel.shown is shown  # bound to the app's

    run_app(app, actions)


def test_a_panel_is_redrawn_only_when_its_part_changed(
    trace: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: dict[str, int] = {"engine": 0, "inspector": 0}

    def counting(name: str, update: Any) -> Any:
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> None:
            drawn[name] += 1
            update(self, *args, **kwargs)

        return wrapped

    monkeypatch.setattr(EnginePanel, "update", counting("engine", EnginePanel.update))
    monkeypatch.setattr(Inspector, "update", counting("inspector", Inspector.update))
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("n")
        before = dict(drawn)
        app.refresh_status()  # the same step, the same node: nothing to redraw
        app.refresh_view()
        assert drawn == before
        app.message = "something new"
        app.refresh_status()
        assert drawn == before  # the status bar is not one of them
        assert "something new" in status(app)
        steps = 0
        while drawn["engine"] == before["engine"] and steps < len(trace.events):
            await pilot.press("s")
            steps += 1
        assert drawn["engine"] > before["engine"]  # a step that moved the queues redrew them

    run_app(app, actions)


def test_print_capture_passes_on_whole_lines_per_thread() -> None:
    capture = PrintCapture()
    passed: list[str] = []
    start = threading.Barrier(2)

    def program(name: str) -> None:
        start.wait()
        for i in range(200):
            for piece in (name, " ", str(i), "\n"):  # as print(name, i) writes
                passed.append(capture.lines(piece, stderr=False))

    threads = [threading.Thread(target=program, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = "".join(passed).splitlines()
    assert sorted(lines) == sorted(f"{n} {i}" for n in ("a", "b") for i in range(200))
    capture.lines("no newline yet", stderr=True)
    assert capture.output == []
    capture.flush()
    assert capture.output == [(True, "no newline yet")]
    assert capture.keep("x\n", stderr=False) is False  # not the first piece any more
