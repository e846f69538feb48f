"""A live session with ``last``: a flight recorder the TUI steps (``run --last N``)."""

from __future__ import annotations

import contextlib
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
from tests.viz.sources.test_training_runs import _calls, _engine_loop, _whole


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


def _nan_loop(steps: int, nan_at: int) -> list[np.ndarray]:
    """A loop whose call ``nan_at`` takes ``log(0)``: its gradients are NaN and Inf."""
    w = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    grads = []
    for step in range(steps):
        scale = 0.0 if step == nan_at else float(step + 1)
        with np.errstate(all="ignore"):  # the NaN is the point
            ((w * scale).log() * w).sum().backward()
        grads.append(w.grad.data.copy())
        w.grad = None
    return grads


@pytest.mark.parametrize("checks", [False, True], ids=["gradients", "nan-checks"])
@pytest.mark.parametrize("last", [1, 2, 3])
def test_a_flight_recorder_session_stops_at_the_first_nan_as_record_last_does(
    checks: bool, last: int
) -> None:
    from autograd_viz.nan.watch import nan_checks

    def program() -> list[np.ndarray]:
        with nan_checks() if checks else contextlib.nullcontext():
            return _nan_loop(10, nan_at=5)

    with record(last=last) as recorded:
        program()
    results: list[list[np.ndarray]] = []
    session = LiveSession(lambda: results.append(program()), calls=CallSelection(last=last))
    with session:
        found = session.run_to_end(timeout=60)  # e stops at the finding, whatever the breakpoints
        assert found is not None and found is session.finding
        assert session.trace.events[session.position - 1] is found, "the view opens on it"
        assert (found.kind == "anomaly") == checks
        assert not session.kept_finding and not session.finished
        assert session.run_to_end(timeout=60) is None  # the rest of its call, then the end
        assert session.kept_finding and session.finished  # after it, the program ran unwatched
    assert session.error is None
    assert all(
        np.array_equal(a, b, equal_nan=True)
        for a, b in zip(results[0], _nan_loop(10, nan_at=5), strict=True)
    )
    kept = session.trace
    assert _calls(kept) == _calls(recorded) == list(range(6 - last, 6))
    assert session.finding is kept.events[session.finding.index], "renumbered with the window"
    ends = [e.graph_task for e in kept.events if e.kind == "graph_task_end"]
    assert ends[-1] == max(kept.graph_tasks), "the call that holds it is kept whole"
    _whole(kept)


def test_a_flight_recorder_session_without_a_nan_keeps_the_last_calls_and_finds_nothing() -> None:
    session = LiveSession(lambda: _nan_loop(6, nan_at=-1), calls=CallSelection(last=2))
    with session:
        assert session.run_to_end(timeout=60) is None
    assert session.finding is None and not session.kept_finding
    assert _calls(session.trace) == [4, 5]
