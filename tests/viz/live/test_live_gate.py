"""Whose work a live session gates, and stopping it at every step (Note [Whose work a session
gates], Note [Where a stop cancels] in ``autograd_viz.live``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import engine
from autograd_viz.live import LiveSession, SessionCancelled
from autograd_viz.trace import Trace
from engine import events
from engine.activity import ACTIVITY
from engine.devices import set_sim_device_count, sim_device_count
from tests.viz.live.test_live import CASES, _error_mid_backward, _inputs_pruned

TIMEOUT = 10.0


def _square_on_sim1() -> engine.Tensor:
    w = engine.tensor([1.0, 2.0], requires_grad=True, device="sim:1", name="w")
    (w * w).sum().backward()
    assert w.grad is not None
    return w.grad


GRAPHS: dict[str, Callable[[], Any]] = {
    **CASES,
    "error": _error_mid_backward,
    "pruned": _inputs_pruned,
    "square_on_sim1": _square_on_sim1,
}


@pytest.fixture(autouse=True)
def two_sim_devices() -> Iterator[None]:
    before = sim_device_count()
    set_sim_device_count(max(before, 2))
    yield
    set_sim_device_count(before)


def _plain_backward() -> np.ndarray:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    (x * 3.0).sum().backward()
    assert x.grad is not None
    return x.grad.numpy()


def _in_thread(fn: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    """Run ``fn`` on a fresh thread; fail if it has not returned within ``timeout``."""
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(fn()), name="unrelated")
    worker.start()
    worker.join(timeout)
    assert not worker.is_alive(), "the backward hung"
    return out[0]


def test_a_finished_session_gates_no_later_backward_on_any_thread() -> None:
    session = LiveSession(lambda: None).start()
    deadline = time.monotonic() + TIMEOUT
    while not session.finished and time.monotonic() < deadline:
        time.sleep(0.01)
    assert session.finished
    # Nobody called stop(): a forgotten session must not pause anyone.
    np.testing.assert_allclose(_plain_backward(), [3.0, 3.0])
    np.testing.assert_allclose(_in_thread(_plain_backward), [3.0, 3.0])
    np.testing.assert_allclose(_in_thread(CASES["two_devices"]().numpy), [12.0, 24.0])
    assert session.frontier == 0
    session.stop()
    engine.get_default_engine().shutdown()


def test_a_session_finished_after_stepping_gates_nobody() -> None:
    session = LiveSession(CASES["seed"]).start()
    while session.step(timeout=TIMEOUT) is not None:
        pass
    recorded = session.frontier
    np.testing.assert_allclose(_in_thread(_plain_backward), [3.0, 3.0])
    assert session.frontier == recorded
    session.stop()


def test_a_running_session_gates_only_its_target() -> None:
    session = LiveSession(CASES["two_devices"]).start()
    try:
        first = session.step(timeout=TIMEOUT)
        assert first is not None and first.kind == "graph_task_start"
        # The target is paused mid-backward; other threads' backward passes run on,
        # devices included, and are not recorded.
        np.testing.assert_allclose(_in_thread(_plain_backward), [3.0, 3.0])
        np.testing.assert_allclose(_in_thread(CASES["two_devices"]().numpy), [12.0, 24.0])
        assert session.frontier == 1
        while session.step(timeout=TIMEOUT) is not None:
            pass
        assert session.error is None
        np.testing.assert_allclose(session.result.numpy(), [12.0, 24.0])
        assert {e.graph_task for e in session.trace.events} == {first.graph_task}
    finally:
        session.stop()
        engine.get_default_engine().shutdown()


def _event_count(target: Callable[[], Any]) -> int:
    with LiveSession(target) as session:
        count = 0
        while session.step(timeout=TIMEOUT) is not None:
            count += 1
    engine.get_default_engine().shutdown()
    return count


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_stop_at_every_step_unblocks_the_target_and_leaves_no_thread(name: str) -> None:
    target = GRAPHS[name]
    before = set(threading.enumerate())
    total = _event_count(target)
    assert total > 5
    for k in range(total + 1):
        session = LiveSession(target).start()
        for _ in range(k):
            session.step(timeout=TIMEOUT)
        session.stop(timeout=TIMEOUT)
        assert session._thread is not None and not session._thread.is_alive(), k
        assert events.HUB.listeners == (), k
        if k < total and name not in ("error",):
            assert session.error is None or isinstance(session.error, SessionCancelled), k
        deadline = time.monotonic() + TIMEOUT
        while set(threading.enumerate()) - before and time.monotonic() < deadline:
            time.sleep(0.005)
        assert set(threading.enumerate()) - before == set(), k
        assert ACTIVITY.inside == ACTIVITY.blocked, k
    # The engine still works, devices included.
    np.testing.assert_allclose(_square_on_sim1().numpy(), [2.0, 4.0])
    engine.get_default_engine().shutdown()


def _training_loop() -> engine.Tensor:
    w = engine.tensor([1.0, 2.0], requires_grad=True, name="w")
    for _ in range(20):
        (w * w).sum().backward()
    assert w.grad is not None
    return w.grad


def test_a_session_stops_recording_at_max_events_and_lets_the_target_run_on(
    tmp_path: Path,
) -> None:
    with pytest.warns(RuntimeWarning, match="recorded 50 events"):
        session = LiveSession(_training_loop, max_events=50).start()
        try:
            session.run_to_end(timeout=TIMEOUT)
            assert session.truncated and session.frontier == 50
            assert session.step(timeout=TIMEOUT) is None  # nothing more to step through
            deadline = time.monotonic() + TIMEOUT
            while not session.finished and time.monotonic() < deadline:
                time.sleep(0.01)
            assert session.finished and session.error is None
            np.testing.assert_allclose(session.result.numpy(), [40.0, 80.0])
        finally:
            session.stop()
    session.trace.save(tmp_path / "live.jsonl")
    assert len(Trace.load(tmp_path / "live.jsonl")) == 50


def test_max_events_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_events must be a positive integer"):
        LiveSession(_training_loop, max_events=0)


def test_stop_returns_at_once_while_other_threads_keep_the_engine_busy() -> None:
    done = threading.Event()

    def busy() -> None:
        while not done.is_set():
            _plain_backward()

    worker = threading.Thread(target=busy, name="busy")
    worker.start()
    try:
        session = LiveSession(CASES["two_devices"]).start()
        for _ in range(3):
            session.step(timeout=TIMEOUT)
        started = time.monotonic()
        session.stop(timeout=TIMEOUT)
        assert time.monotonic() - started < TIMEOUT / 4
        assert isinstance(session.error, SessionCancelled)
    finally:
        done.set()
        worker.join()
        engine.get_default_engine().shutdown()
