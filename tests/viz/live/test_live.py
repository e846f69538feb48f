"""Live sessions: stepping under the gate, breakpoints, stopping mid-backward."""

from __future__ import annotations

import math
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import engine
from autograd_viz import NodeStatus, record
from autograd_viz.launch.script import ScriptNotFoundError
from autograd_viz.live import Breakpoint, LiveSession, SessionCancelled, non_finite
from engine import events
from engine.activity import ACTIVITY
from tests.graphs import FailsInBackward, Reentrant

TIMEOUT = 10.0


def _two_devices() -> engine.Tensor:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    a = (x.to("sim:0") * 2.0).to("sim:1")
    b = (x.to("sim:1") * 3.0).to("sim:0")
    (a.to("cpu") * b.to("cpu")).sum().backward()
    assert x.grad is not None
    return x.grad


def _seed_example() -> tuple[engine.Tensor, engine.Tensor]:
    a = engine.tensor([2.0, 3.0], requires_grad=True, name="a")
    b = engine.tensor([6.0, 4.0], requires_grad=True, name="b")
    q = 3 * a**3 - b**2
    q.backward(engine.ones(2))
    assert a.grad is not None and b.grad is not None
    return a.grad, b.grad


def _reentrant() -> engine.Tensor:
    x = engine.tensor([2.0], requires_grad=True, name="x")
    Reentrant.apply(x, 2).sum().backward()
    assert x.grad is not None
    return x.grad


def _error_mid_backward() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    (FailsInBackward.apply(x * 2.0) * 3.0).sum().backward()


def _grad_with_captures() -> tuple[engine.Tensor, ...]:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    w = engine.tensor([3.0, 4.0], requires_grad=True, name="w")
    h = x * w
    return engine.grad((h * h).sum(), (x, h))


def _step_all(session: LiveSession, limit: int = 10_000) -> list[Any]:
    seen = []
    for _ in range(limit):
        event = session.step(timeout=TIMEOUT)
        if event is None:
            return seen
        seen.append(event)
    raise AssertionError("the session did not finish")


@pytest.fixture
def no_new_threads() -> Iterator[None]:
    """The test leaves no thread behind and the engine quiescent."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + TIMEOUT
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert set(threading.enumerate()) - before == set()
    assert ACTIVITY.inside == ACTIVITY.blocked, "an engine thread is still busy"


CASES: dict[str, Callable[[], Any]] = {
    "seed": _seed_example,
    "two_devices": _two_devices,
    "reentrant": _reentrant,
    "grad_captures": _grad_with_captures,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_stepping_event_by_event_records_what_a_free_run_records(
    name: str, no_new_threads: None
) -> None:
    target = CASES[name]
    with record() as free:
        expected = target()
    engine.get_default_engine().shutdown()  # the session starts its own device threads
    with LiveSession(target) as session:
        stepped = _step_all(session)
        assert session.finished and session.error is None

    # The same steps as an unpaused run. Between threads the order may differ, and so may
    # the thread that delivers a shared node's last input (and enqueues it).
    def key(e: Any) -> tuple[Any, ...]:
        return (e.kind, e.node_name)

    assert sorted(map(key, stepped)) == sorted(map(key, free.events))
    assert [e.index for e in stepped] == list(range(len(stepped)))
    # Replaying the live trace ends where the engine ended.
    final = session.trace.state_at(len(session.trace))
    got = session.result
    for value, want in zip(
        got if isinstance(got, tuple) else (got,),
        expected if isinstance(expected, tuple) else (expected,),
        strict=True,
    ):
        np.testing.assert_allclose(value.numpy(), want.numpy())
    assert all(not q for q in final.queues.values())
    assert all(t.stack == () for t in final.threads.values())
    assert {g.status for g in final.graph_tasks.values()} == {"ok"}
    if name == "grad_captures":
        (captured,) = final.captured.values()
        np.testing.assert_allclose(captured[0].values, got[0].numpy())
        np.testing.assert_allclose(captured[1].values, got[1].numpy())
    else:
        leaves = {leaf.name: leaf.grad for leaf in final.leaves.values()}
        first = got[0] if isinstance(got, tuple) else got
        np.testing.assert_allclose(leaves["a" if name == "seed" else "x"].values, first.numpy())


def test_stepping_is_deterministic_across_device_threads(no_new_threads: None) -> None:
    runs = []
    for _ in range(4):
        with LiveSession(_two_devices) as session:
            runs.append([(e.kind, e.node_name, e.thread) for e in _step_all(session)])
    assert all(run == runs[0] for run in runs[1:])
    assert {t for _, _, t in runs[0]} >= {"autograd-sim:0", "autograd-sim:1"}


def test_exactly_one_engine_step_per_step(no_new_threads: None) -> None:
    emitted: list[events.Event] = []
    counter_lock = threading.Lock()

    def count(event: events.Event) -> None:
        with counter_lock:
            emitted.append(event)

    session = LiveSession(_two_devices)
    events.subscribe(count)  # subscribed first: it sees events before the gate holds them
    try:
        session.start()
        previous = 0
        while True:
            event = session.step(timeout=TIMEOUT)
            if event is None:
                break
            assert session.frontier == previous + 1
            previous = session.frontier
            assert ACTIVITY.wait_quiescent(TIMEOUT)
            with counter_lock:
                seqs = {e.seq for e in emitted}
            released = {e.seq for e in session.trace.events}
            # Only the events now paused at the gate (one per paused thread) are ahead.
            ahead = seqs - released
            paused_threads = {e.thread for e in emitted if e.seq in ahead}
            assert len(ahead) == len(paused_threads) <= 3
    finally:
        session.stop()
        events.unsubscribe(count)


def test_step_node_stops_at_each_node_start() -> None:
    with record() as free:
        _seed_example()
    expected = [e.node_name for e in free.events if e.kind == "node_start"]
    with LiveSession(_seed_example) as session:
        names = []
        while (event := session.step_node(timeout=TIMEOUT)) is not None:
            assert event.kind == "node_start"
            assert session.state.node(event.node_id).status is NodeStatus.RUNNING
            names.append(event.node_name)
    assert names == expected and len(names) == 6


def test_back_replays_and_forward_past_the_frontier_releases_the_engine() -> None:
    with LiveSession(_seed_example) as session:
        for _ in range(6):
            session.step(timeout=TIMEOUT)
        assert session.frontier == session.position == 6
        at_six = session.state.nodes()
        session.back(4)
        assert session.position == 2 and session.frontier == 6
        assert session.state.step == 2
        replayed = [session.step(timeout=TIMEOUT) for _ in range(4)]
        assert session.frontier == 6, "replaying recorded steps does not move the engine"
        assert [e.index for e in replayed if e is not None] == [2, 3, 4, 5]
        assert session.state.nodes() == at_six
        event = session.step(timeout=TIMEOUT)
        assert event is not None and event.index == 6 and session.frontier == 7
        session.back(100)
        assert session.position == 0


def test_breakpoint_on_node_name_kind_and_id() -> None:
    with LiveSession(_seed_example) as session:
        session.add_breakpoint(node="PowBackward0", kind="node_start")
        hit = session.continue_(timeout=TIMEOUT)
        assert hit is not None and hit.kind == "node_start" and hit.node_name == "PowBackward0"
        assert session.position == session.frontier == hit.index + 1
        assert session.state.node(hit.node_id).status is NodeStatus.RUNNING
        pow_id = hit.node_id
        session.breakpoints.clear()
        session.add_breakpoint(node=pow_id, kind="node_end")
        hit = session.continue_(timeout=TIMEOUT)
        assert hit is not None and hit.node_id == pow_id and hit.kind == "node_end"
        session.breakpoints.clear()
        assert session.continue_(timeout=TIMEOUT) is None
        assert session.finished
    np.testing.assert_allclose(session.result[0].numpy(), [36.0, 81.0])


def test_breakpoint_on_a_non_finite_gradient() -> None:
    def target() -> engine.Tensor:
        x = engine.tensor([0.0, 1.0], requires_grad=True)
        engine.sqrt(x).sum().backward()
        assert x.grad is not None
        return x.grad

    with LiveSession(target) as session:
        session.add_breakpoint(predicate=non_finite)
        hit = session.continue_(timeout=TIMEOUT)
        assert hit is not None and non_finite(hit)
        assert hit.node_name == "SqrtBackward0" and hit.kind == "node_end"
        (out,) = hit.data["outputs"]
        assert out.inf_count == 1
        session.run_to_end(timeout=TIMEOUT)
    assert math.isinf(float(session.result.numpy()[0]))


def test_breakpoints_reject_unknown_kinds_and_non_callables() -> None:
    with pytest.raises(ValueError, match="unknown event kind 'node_begin'"):
        Breakpoint(kind="node_begin")
    with pytest.raises(TypeError, match="predicate must be callable"):
        Breakpoint(predicate=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("steps", [0, 1, 5, 12, 25])
def test_stop_mid_backward_cancels_cleanly(steps: int, no_new_threads: None) -> None:
    session = LiveSession(_two_devices).start()
    for _ in range(steps):
        session.step(timeout=TIMEOUT)
    session.stop()
    assert isinstance(session.error, SessionCancelled)
    assert "live session was stopped" in str(session.error)
    # Raised on purpose: its traceback ends in the engine's frames, without the gate's or the
    # event hub's (Note [A traceback as without us]).
    frames = traceback.extract_tb(session.error.__traceback__)
    assert frames[0].name == "_two_devices"
    assert all(
        f.filename.startswith(os.path.dirname(engine.__file__))
        and os.path.basename(f.filename) not in ("events.py", "emitting.py")
        for f in frames[1:]
    ), frames
    assert events.HUB.listeners == ()
    # The engine is usable afterwards, devices included.
    np.testing.assert_allclose(_two_devices().numpy(), [12.0, 24.0])
    engine.get_default_engine().shutdown()


def test_stop_while_free_running_with_a_breakpoint_pending(no_new_threads: None) -> None:
    session = LiveSession(_reentrant).start()
    session.add_breakpoint(kind="reentrant_enter")
    hit = session.continue_(timeout=TIMEOUT)
    assert hit is not None and hit.kind == "reentrant_enter"
    state = session.state
    assert any(len([f for f in t.stack if f.node_id is None]) == 2 for t in state.threads.values())
    session.stop()
    assert isinstance(session.error, SessionCancelled)


def test_an_error_in_backward_reaches_the_session_and_the_trace(no_new_threads: None) -> None:
    with LiveSession(_error_mid_backward) as session:
        stepped = _step_all(session)
    assert isinstance(session.error, ValueError)
    assert "this backward always fails" in str(session.error)
    errors = [e for e in stepped if e.kind == "error"]
    assert errors and errors[0].data["exc_type"] == "ValueError"
    final = session.trace.state_at(len(session.trace))
    assert final.errors and final.node(errors[0].node_id).status is NodeStatus.FAILED
    (task,) = final.graph_tasks.values()
    assert task.status == "error" and "this backward always fails" in (task.error or "")


def test_a_script_with_arguments(tmp_path: Path, no_new_threads: None) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import sys\n"
        "import engine\n"
        "scale = float(sys.argv[1])\n"
        "x = engine.tensor([1.0, 2.0], requires_grad=True, name='x')\n"
        "(x * scale).sum().backward()\n"
        "print('grad', x.grad)\n"
    )
    with LiveSession(script, ["2.5"]) as session:
        session.run_to_end(timeout=TIMEOUT)
        assert session.finished and session.error is None
    leaves = session.trace.state_at(len(session.trace)).leaves
    (leaf,) = leaves.values()
    assert leaf.name == "x" and leaf.grad is not None and leaf.grad.values == (2.5, 2.5)


def test_bad_targets_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ScriptNotFoundError, match="no such file"):
        LiveSession(tmp_path / "missing.py")
    with pytest.raises(TypeError, match="callable or a script path"):
        LiveSession(42)  # type: ignore[arg-type]
    session = LiveSession(_seed_example)
    with pytest.raises(RuntimeError, match="start the live session first"):
        session.step()
    session.start()
    with pytest.raises(RuntimeError, match="already started"):
        session.start()
    session.stop()


def test_step_times_out_when_the_target_does_no_backward(no_new_threads: None) -> None:
    release = threading.Event()
    session = LiveSession(lambda: release.wait(TIMEOUT)).start()
    with pytest.raises(TimeoutError, match="no engine event"):
        session.step(timeout=0.1)
    release.set()
    assert session.step(timeout=TIMEOUT) is None and session.finished
    session.stop()


def test_a_live_trace_saves_and_loads_exactly(tmp_path: Path, no_new_threads: None) -> None:
    from autograd_viz import Trace

    with LiveSession(_two_devices) as session:
        _step_all(session)
    path = tmp_path / "live.jsonl"
    session.trace.save(path)
    loaded = Trace.load(path)
    assert loaded == session.trace
    final = loaded.state_at(len(loaded))
    (leaf,) = [leaf for leaf in final.leaves.values() if leaf.name == "x"]
    assert leaf.grad is not None and leaf.grad.values == (12.0, 24.0)


def _inputs_pruned() -> engine.Tensor:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    w = engine.tensor([3.0, 4.0], requires_grad=True, name="w")
    (x * w).sum().backward(inputs=[x])
    assert w.grad is None and x.grad is not None
    return x.grad


def test_stepping_backward_with_inputs_prunes_the_other_leaf(no_new_threads: None) -> None:
    with LiveSession(_inputs_pruned) as session:
        stepped = _step_all(session)
    assert session.error is None
    np.testing.assert_allclose(session.result.numpy(), [3.0, 4.0])
    final = session.trace.state_at(len(session.trace))
    statuses = {n.info.leaf.name: n.status for n in final.nodes().values() if n.info.leaf}
    assert statuses == {"x": NodeStatus.DONE, "w": NodeStatus.PRUNED}
    assert [e.kind for e in stepped].count("node_start") == 3


def _nan_in_backward() -> None:
    x = engine.tensor([0.0, 1.0], requires_grad=True)
    with engine.detect_anomaly():
        (engine.sqrt(x) * 0.0).sum().backward()


def test_stepping_into_an_anomaly(no_new_threads: None) -> None:
    with pytest.warns(UserWarning), LiveSession(_nan_in_backward) as session:
        stepped = _step_all(session)
    assert isinstance(session.error, RuntimeError)
    assert "returned nan values in its 0th output" in str(session.error)
    anomalies = [e for e in stepped if e.kind == "anomaly"]
    assert len(anomalies) == 1 and anomalies[0].node_name == "SqrtBackward0"
    final = session.trace.state_at(len(session.trace))
    assert final.anomalies == tuple(anomalies)
    assert final.node(anomalies[0].node_id).status is NodeStatus.FAILED


def _backward_then_wait(done: threading.Event) -> Callable[[], None]:
    """A target that runs one backward, then goes on outside the engine until ``done``
    (a server or an eval loop: for a controller, it never finishes)."""

    def target() -> None:
        _seed_example()
        done.wait(6 * TIMEOUT)

    return target


@pytest.mark.parametrize("move", ["continue_", "run_to_end", "step"])
def test_cancel_ends_a_move_that_waits_on_a_target_that_never_finishes(
    move: str, no_new_threads: None
) -> None:
    done = threading.Event()
    # step waits for an event that never comes; continue_ and run_to_end for an end.
    target = (lambda: done.wait(6 * TIMEOUT)) if move == "step" else _backward_then_wait(done)
    session = LiveSession(target).start()
    result: list[Any] = []
    waiting = threading.Thread(target=lambda: result.append(getattr(session, move)()))
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive()  # it waits, with no timeout: the target has not finished
    session.cancel()
    waiting.join(TIMEOUT / 2)  # long before the target ends
    assert not waiting.is_alive() and result == [None]
    assert session.cancelled
    done.set()
    session.stop()
    assert session.error is None and session.finished


def test_a_session_attached_here_runs_its_target_on_this_thread(no_new_threads: None) -> None:
    seen: list[threading.Thread] = []

    def target() -> int:
        seen.append(threading.current_thread())
        _seed_example()
        return 5

    session = LiveSession(target).attach()
    stepper = threading.Thread(target=lambda: session.run_to_end(timeout=TIMEOUT))
    stepper.start()
    assert session.run() == 5
    stepper.join(TIMEOUT)
    session.stop()
    assert seen == [threading.current_thread()]
    assert session.result == 5 and session.error is None
    assert [e.kind for e in session.trace.events][-1] == "graph_task_end"
    with pytest.raises(RuntimeError, match="already started"):
        session.attach()
