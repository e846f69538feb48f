"""``replay`` of several traces (one per rank): ``R`` switches process, each keeps its step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

import engine
from autograd_viz.cli.base import TOOL_FAILED
from autograd_viz.cli.main import main
from autograd_viz.trace import Trace
from autograd_viz.trace.recording import record
from autograd_viz.tui import ReplayDriver, VizApp
from tests.viz.tui.tuiting import run_app


def rank_trace(scale: float, rank: int) -> Trace:
    with record() as trace:
        x = engine.tensor([1.0, 2.0], requires_grad=True, name=f"x{rank}")
        (x * scale).sum().backward()
    return trace


def test_R_switches_between_ranks_each_at_its_own_step() -> None:
    first, second = ReplayDriver(rank_trace(2.0, 0)), ReplayDriver(rank_trace(3.0, 1))
    processes = [("t.rank0.jsonl · rank 0 of 2", first), ("t.rank1.jsonl · rank 1 of 2", second)]
    app = VizApp(first, source=processes[0][0], processes=processes)
    seen: list[tuple[Any, ...]] = []

    async def actions(pilot: Pilot[Any]) -> None:
        for _ in range(3):
            await pilot.press("s")
        await pilot.press("R")
        await pilot.pause()
        seen.append((app.driver, app.title, first.position, second.position))
        await pilot.press("s")
        await pilot.press("R")
        await pilot.pause()
        seen.append((app.driver, app.title, first.position, second.position))

    run_app(app, actions)
    assert seen[0] == (second, "autograd-viz · t.rank1.jsonl · rank 1 of 2", 3, 0)
    assert seen[1] == (first, "autograd-viz · t.rank0.jsonl · rank 0 of 2", 3, 1)


def test_R_with_one_trace_says_how_to_open_several() -> None:
    driver = ReplayDriver(rank_trace(2.0, 0))
    app = VizApp(driver, source="t.jsonl")

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("R")
        await pilot.pause()

    run_app(app, actions)
    assert app.driver is driver


def test_replay_checks_every_trace_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "t.rank0.jsonl"
    rank_trace(2.0, 0).save(good)
    bad = tmp_path / "t.rank1.jsonl"
    bad.write_text("{}\n")
    assert main(["replay", str(good), str(bad)]) == TOOL_FAILED
    assert "t.rank1.jsonl, line 1" in capsys.readouterr().err
