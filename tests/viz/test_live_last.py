"""A live session with ``last``: a flight recorder the TUI steps (``run --last N``)."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import numpy as np
import pytest

import engine
from autograd_viz.live import LiveSession
from autograd_viz.trace import Trace
from autograd_viz.trace.calls import CallSelection
from autograd_viz.trace.recording import record
from autograd_viz.trace.stream import forget_before
from autograd_viz.tui.driver import LiveDriver
from engine.calls import CALLS
from tests.viz.test_training_runs import _calls, _engine_loop, _whole


def _session(steps: int, **calls: Any) -> tuple[LiveSession, list[list[np.ndarray]]]:
    results: list[list[np.ndarray]] = []
    session = LiveSession(lambda: results.append(_engine_loop(steps)), calls=CallSelection(**calls))
    return session, results


@pytest.mark.parametrize(
    ("calls", "kept"),
    [
        ({"last": 2}, [4, 5]),
        ({"last": 1}, [5]),
        ({"last": 9}, [0, 1, 2, 3, 4, 5]),
        ({"every": 2, "last": 2}, [2, 4]),
    ],
)
def test_a_session_keeps_only_the_last_calls_and_results_stay_bit_identical(
    calls: dict[str, Any], kept: list[int]
) -> None:
    session, results = _session(6, **calls)
    with session:
        session.run_to_end(timeout=60)
    assert session.error is None and results
    assert all(np.array_equal(a, b) for a, b in zip(results[0], _engine_loop(6), strict=True))
    trace = session.trace
    assert _calls(trace) == kept
    assert len(trace.graph_tasks) == 2 * len(kept), "each kept call keeps its reentrant call"
    assert [e.index for e in trace.events] == list(range(len(trace.events)))
    assert {e.graph_task for e in trace.events} <= set(trace.graph_tasks)
    for info in trace.graph_tasks.values():
        assert trace.events[info.first_event].kind == "graph_task_start"
        assert trace.events[info.first_event].graph_task == info.id
    assert (session.dropped > 0) == (len(kept) < 6 // calls.get("every", 1))
    trace.state_at(len(trace.events))  # replays whole
    _whole(trace)
    assert not CALLS.watchers


def test_stepping_a_flight_recorder_moves_back_only_over_the_kept_calls() -> None:
    session, _ = _session(5, last=2)
    driver = LiveDriver(session)
    driver.start()
    try:
        seen_calls: set[int] = set()
        while True:
            event = driver.step_node()
            assert 0 <= driver.position <= driver.recorded
            state = driver.state()
            assert state.step == driver.position
            if event is None:
                break
            assert event is driver.trace.events[driver.position - 1]
            top = [i.call for i in driver.trace.graph_tasks.values() if i.parent is None]
            assert len(top) <= 2, top
            seen_calls.update(c for c in top if c is not None)
            if driver.position > 3:  # back and forward again over what is kept
                here = driver.position
                driver.back_node()
                driver.back()
                assert driver.position < here
                while driver.position < here:
                    assert driver.step() is not None
                assert driver.position == here
        assert seen_calls == {0, 1, 2, 3, 4}
        assert _calls(driver.trace) == [3, 4]
        assert driver.goto(10**9) == len(driver.trace.events)
    finally:
        driver.stop()


def _memory_of_session(steps: int) -> tuple[int, int]:
    """The peak while a ``last=2`` session runs ``steps`` calls, and what it holds after."""
    rng = np.random.default_rng(0)
    w = engine.tensor(rng.standard_normal((16, 16)), requires_grad=True)
    x = engine.tensor(rng.standard_normal((8, 16)))

    def loop() -> None:  # the same gradients every step: no new summary to remember
        for _ in range(steps):
            ((x @ w).tanh() @ w).sum().backward()

    session = LiveSession(loop, calls=CallSelection(last=2))
    gc.collect()
    tracemalloc.start()
    try:
        with session:
            session.run_to_end(timeout=120)
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [i.call for i in session.trace.graph_tasks.values()] == [steps - 2, steps - 1]
    return peak, held


def test_a_flight_recorder_session_holds_flat_memory_over_many_calls() -> None:
    # Python's free lists and the collector's timing make the peak move a little at first.
    short_peak, short_held = _memory_of_session(40)
    long_peak, long_held = _memory_of_session(200)
    assert long_peak < short_peak * 1.5 + 200_000, (short_peak, long_peak)
    assert long_held < short_held + 50_000, (short_held, long_held)


def test_forgetting_renumbers_what_is_left_and_drops_late_events_of_forgotten_tasks() -> None:
    with record() as trace:
        _engine_loop(3)
    first_two = [i.first_event for i in trace.graph_tasks.values() if i.parent is None][2]
    late = trace.events[1]._replace(index=len(trace.events))  # an event of call 0, arriving late
    trace.events.append(late)
    expected = [e.kind for e in trace.events[first_two:-1]]
    gone = forget_before(trace, first_two)
    assert _calls(trace) == [2]
    assert len(gone) == 4, "calls 0 and 1, each with its reentrant call"
    assert [e.kind for e in trace.events] == expected
    assert [e.index for e in trace.events] == list(range(len(trace.events)))
    _whole(trace)
    assert forget_before(trace, 0) == ()


def test_a_trace_saved_from_a_flight_recorder_session_loads(tmp_path: Any) -> None:
    session, _ = _session(4, last=2)
    with session:
        session.run_to_end(timeout=60)
    path = tmp_path / "last.jsonl"
    session.trace.save(path)
    assert _calls(Trace.load(path)) == [2, 3]
