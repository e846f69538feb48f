"""Snapshots of the TUI on replayed traces at fixed sizes (pytest-textual-snapshot).

The traces are recorded one event at a time with node ids and sequence numbers
reset, so every run draws the same screen. ``pytest --snapshot-update`` accepts
a new rendering after looking at it (``snapshot_report.html`` shows the diff).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot

import engine
from autograd_viz.trace import Trace
from tests.viz.dotting import fresh_numbers  # noqa: F401 - a fixture
from tests.viz.tui.tuiting import demo_trace, nan_program, replay_app, stepped_trace

SnapCompare = Callable[..., bool]


@pytest.fixture
def trace(fresh_numbers: None) -> Trace:  # noqa: F811 - the fixture above
    # Sequence numbers count per thread: device workers that outlived an earlier
    # test would number the reentrant task's nodes after that test's.
    engine.get_default_engine().shutdown()
    return demo_trace()


def to_event(trace: Trace, predicate: Callable[[Any], bool]) -> Callable[[Pilot[Any]], Any]:
    """A ``run_before`` that moves the app to just after the first event matching ``predicate``."""

    async def run_before(pilot: Pilot[Any]) -> None:
        target = next(e for e in trace.events if predicate(e))
        await go_to(pilot, target.index + 1)

    return run_before


async def go_to(pilot: Pilot[Any], step: int) -> None:
    """Show ``step``, as clicking its row in the timeline does."""
    app = pilot.app
    app.driver.goto(step)  # type: ignore[attr-defined]
    app.refresh_view(follow=True)  # type: ignore[attr-defined]
    await pilot.pause()


def test_first_screen_at_80x24(snap_compare: SnapCompare, trace: Trace) -> None:
    assert snap_compare(replay_app(trace), press=["s"], terminal_size=(80, 24))


def test_mid_backward_with_busy_queues(snap_compare: SnapCompare, trace: Trace) -> None:
    def queued(step: int) -> int:
        return sum(len(q) for q in trace.state_at(step).queues.values())

    busiest = max(range(len(trace.events) + 1), key=queued)
    assert queued(busiest) >= 3

    async def run_before(pilot: Pilot[Any]) -> None:
        await go_to(pilot, busiest)

    app = replay_app(trace)
    assert snap_compare(app, terminal_size=(160, 48), run_before=run_before)


def test_reentrant_task_in_the_drawn_dag(snap_compare: SnapCompare, trace: Trace) -> None:
    def inner(event: Any) -> bool:
        return event.kind == "node_start" and trace.graph_tasks[event.graph_task].reentrant_depth

    app = replay_app(trace)
    before = to_event(trace, inner)

    async def run_before(pilot: Pilot[Any]) -> None:
        await before(pilot)
        await pilot.press("v", "v")

    assert snap_compare(app, terminal_size=(140, 40), run_before=run_before)


def test_nan_found(snap_compare: SnapCompare, fresh_numbers: None) -> None:  # noqa: F811
    app = replay_app(stepped_trace(nan_program))
    assert snap_compare(app, press=["f", "c"], terminal_size=(120, 36))


def test_help_screen(snap_compare: SnapCompare, trace: Trace) -> None:
    assert snap_compare(replay_app(trace), press=["question_mark"], terminal_size=(100, 40))
