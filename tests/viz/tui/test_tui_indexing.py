"""A replay indexes its trace ahead in a thread; seeks meanwhile see the same states."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from autograd_viz.trace import Trace
from autograd_viz.trace.replay import ExecutionState, Replayer
from autograd_viz.tui import driver as driver_module
from autograd_viz.tui.driver import ReplayDriver
from tests.viz.tui.tuiting import demo_trace


@pytest.fixture(scope="module")
def trace() -> Trace:
    return demo_trace()


def seen(state: ExecutionState) -> tuple[Any, ...]:
    """Everything a view reads of a state."""
    nodes = {gid: state.nodes(gid) for gid in state.graph_tasks}
    deliveries = {gid: state.deliveries(gid) for gid in state.graph_tasks}
    return (
        state.step,
        nodes,
        deliveries,
        dict(state.queues),
        dict(state.threads),
        state.errors,
        state.anomalies,
        state.leaves,
    )


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Threads take turns every microsecond: inside each other's indexing, if they can."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("fast_switching")
def test_seeks_while_the_trace_is_indexed_ahead_see_the_states_of_a_whole_index(
    trace: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver_module, "INDEX_CHUNK", 7)  # many chunks, so seeks meet the thread
    expected = Replayer(trace.copy())  # indexed whole, on this thread alone
    assert len(trace.events) > 10 * 7
    fresh = trace.copy()  # not yet indexed by anyone
    driver = ReplayDriver(fresh)
    driver.start()
    steps = list(range(len(fresh.events) + 1))
    random.Random(0).shuffle(steps)
    for step in steps:
        driver.goto(step)
        assert seen(driver.state()) == seen(expected.state_at(step))
    assert driver.indexed.wait(10)
    assert fresh._replayed_len == len(fresh.events)
    for step in steps[:50]:
        assert seen(fresh.state_at(step)) == seen(expected.state_at(step))


def test_a_short_trace_is_not_indexed_ahead(trace: Trace) -> None:
    fresh = trace.copy()
    driver = ReplayDriver(fresh)
    assert len(fresh.events) <= driver_module.INDEX_CHUNK
    driver.start()
    assert driver.indexed.is_set()
    assert fresh._replayed_len == -1  # nothing indexed until a step is asked for


def test_indexing_ahead_stops_when_the_replay_does(
    trace: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver_module, "INDEX_CHUNK", 1)
    fresh = trace.copy()
    driver = ReplayDriver(fresh)
    driver.stop()
    driver.start()
    assert driver.indexed.wait(10)
    assert fresh._replayed_len < len(fresh.events)
