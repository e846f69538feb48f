"""A watcher's own error cuts the call where it happened; later calls are watched whole.

The recorder is made to fail once, inside backward call 1 of 3 (Note [Listener
errors] in ``engine/events.py``): calls 0 and 2 are recorded whole, call 1 up to
the failure and marked as cut, one line says so, and gradients are
bit-identical to the unwatched run. The same on our engine and on PyTorch, and
under ``watch_nan`` (a NaN of the call after the failure is still found).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import autograd_viz
import engine
from autograd_viz.trace import Trace
from autograd_viz.trace.recorder import Recorder
from engine.events import HUB

FAILURE = "injected recorder failure"


@contextmanager
def _fails_once_in_call_1(monkeypatch: pytest.MonkeyPatch, at: int = 3) -> Iterator[list[str]]:
    """The recorder raises once, at the ``at``-th event (or batch) it keeps of backward call 1.

    Past the first, so that the call's ``graph_task_start`` is recorded first and
    the call is in the trace to be marked (the PyTorch bridge hands the rest of
    a small call over as one batch: ``at=2``). Yields the warnings said meanwhile.
    """
    real = Recorder._goes_last
    seen = {"n": 0}

    def fails(self: Recorder, seq: int) -> bool:
        if self.calls_seen == 2:
            seen["n"] += 1
            if seen["n"] == at:
                raise ValueError(FAILURE)
        return real(self, seq)

    monkeypatch.setattr(Recorder, "_goes_last", fails)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        lines: list[str] = []
        yield lines
    lines.extend(str(w.message) for w in said if FAILURE in str(w.message))
    assert seen["n"] >= at, "the failure was never injected"


def _engine_step(i: int) -> list[np.ndarray]:
    w = engine.tensor([1.0, 2.0, 3.0], requires_grad=True, name="w")
    y = (w * w * float(i + 1)).exp().sum()
    y.backward()
    assert w.grad is not None
    return [np.array(w.grad.numpy(), copy=True)]


def _engine_nan_step(i: int) -> list[np.ndarray]:
    w = engine.tensor([0.0, 1.0, 4.0], requires_grad=True, name="w")
    scale = 1.0 if i == 2 else 2.0  # call 2 takes sqrt(0)'s gradient: an Inf
    y = (w * scale).sqrt().sum() if i == 2 else (w * scale).exp().sum()
    y.backward()
    assert w.grad is not None
    return [np.array(w.grad.numpy(), copy=True)]


def _bits(values: list[Any]) -> list[bytes]:
    return [np.ascontiguousarray(v).tobytes() for v in values]


def _calls(trace: Trace) -> dict[int, Any]:
    return {info.call: info for info in trace.graph_tasks.values() if info.call is not None}


def _check_cut(trace: Trace, lines: list[str], tmp_path: Path) -> None:
    calls = _calls(trace)
    assert sorted(calls) == [0, 1, 2]
    assert calls[0].cut is None and calls[2].cut is None
    assert calls[1].cut is not None and FAILURE in calls[1].cut
    assert "backward call 1" in calls[1].cut
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "backward call 1" in lines[0]

    def kinds(info: Any) -> list[str]:
        return [e.kind for e in trace.events if e.graph_task == info.id]

    for whole in (calls[0], calls[2]):
        assert kinds(whole)[0] == "graph_task_start" and kinds(whole)[-1] == "graph_task_end"
    assert kinds(calls[0]) == kinds(calls[2])  # the same program: recorded alike
    cut = kinds(calls[1])
    assert cut[0] == "graph_task_start" and "graph_task_end" not in cut
    assert 0 < len(cut) < len(kinds(calls[0]))
    trace.state_at(len(trace))  # the cut call replays
    path = tmp_path / "cut.jsonl"
    trace.save(path)
    loaded = Trace.load(path)
    assert _calls(loaded)[1].cut == calls[1].cut
    assert len(loaded.events) == len(trace.events)


def _run(step: Callable[[int], list[Any]]) -> list[Any]:
    return [g for i in range(3) for g in step(i)]


def test_engine_call_cut_by_a_recorder_error_and_the_next_recorded_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    plain = _run(_engine_step)
    with _fails_once_in_call_1(monkeypatch) as lines, autograd_viz.record() as trace:
        watched = _run(_engine_step)
        assert HUB.active
    assert _bits(watched) == _bits(plain)
    _check_cut(trace, lines, tmp_path)


def test_watch_nan_finds_the_inf_after_a_recorder_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with np.errstate(all="ignore"):
        plain = _run(_engine_nan_step)
        with _fails_once_in_call_1(monkeypatch) as lines, autograd_viz.watch_nan() as watch:
            watched = _run(_engine_nan_step)
    assert _bits(watched) == _bits(plain)
    assert len(lines) == 1
    first = watch.report.first
    assert first is not None
    assert _calls(watch.trace)[2].id == first.graph_task


def test_a_listener_without_on_error_is_still_unsubscribed() -> None:
    def broken(event: Any) -> None:
        raise ValueError("broken listener")

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with engine.events.listen(broken):
            _engine_step(0)
            assert not any(item is broken for item in HUB.listeners)
    assert [w for w in said if "unsubscribed" in str(w.message)]


def test_a_failing_on_error_unsubscribes() -> None:
    class Broken:
        def __call__(self, event: Any) -> None:
            raise ValueError("broken listener")

        def on_error(self, exc: Exception, graph_task: int) -> None:
            raise RuntimeError("and its on_error too")

    broken = Broken()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with engine.events.listen(broken):
            _engine_step(0)
            assert not any(item is broken for item in HUB.listeners)
    assert [w for w in said if "and its on_error too" in str(w.message)]


# -- PyTorch ------------------------------------------------------------------------------


def _torch_step(i: int) -> list[Any]:
    torch = pytest.importorskip("torch")
    torch.manual_seed(i)
    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(2, 4)
    torch.tanh(x @ w).pow(2).sum().backward()
    return [w.grad.detach().numpy().copy()]


def _torch_nan_step(i: int) -> list[Any]:
    torch = pytest.importorskip("torch")
    w = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
    (torch.sqrt(w) if i == 2 else torch.exp(w * 2.0)).sum().backward()
    return [w.grad.detach().numpy().copy()]


def test_torch_call_cut_by_a_recorder_error_and_the_next_recorded_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    plain = _run(_torch_step)
    with _fails_once_in_call_1(monkeypatch, at=2) as lines, autograd_viz.record() as trace:
        watched = _run(_torch_step)
        assert HUB.active
    assert _bits(watched) == _bits(plain)
    _check_cut(trace, lines, tmp_path)


def test_torch_watch_nan_finds_the_inf_after_a_recorder_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("torch")
    plain = _run(_torch_nan_step)
    with _fails_once_in_call_1(monkeypatch, at=2) as lines, autograd_viz.watch_nan() as watch:
        watched = _run(_torch_nan_step)
    assert _bits(watched) == _bits(plain)
    assert len(lines) == 1
    first = watch.report.first
    assert first is not None
    assert _calls(watch.trace)[2].id == first.graph_task


# -- what says so -------------------------------------------------------------------------

SCRIPT = """\
import engine

for i in range(3):
    w = engine.tensor([1.0, 2.0, 3.0], requires_grad=True, name="w")
    (w * w * float(i + 1)).exp().sum().backward()
"""


def test_record_says_which_call_was_cut_and_the_file_keeps_the_mark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autograd_viz import cli

    script = tmp_path / "three_calls.py"
    script.write_text(SCRIPT, encoding="utf-8")
    out = tmp_path / "run.jsonl"
    with _fails_once_in_call_1(monkeypatch) as lines:
        assert cli.main(["record", "-o", str(out), str(script)]) == 0
    assert len(lines) == 1
    summary = capsys.readouterr().out
    (row,) = [line for line in summary.splitlines() if "cut short" in line]
    assert "1 call by a recorder error" in row and "backward call 1" in row and FAILURE in row
    calls = _calls(Trace.load(out))
    assert [calls[i].cut is not None for i in range(3)] == [False, True, False]


def test_the_call_picker_says_a_call_was_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    from autograd_viz.tui.call_picker import task_choices

    with _fails_once_in_call_1(monkeypatch), autograd_viz.record() as trace:
        _run(_engine_step)
    _, rows = task_choices(trace)
    cut = [label for _, label in rows if "cut short" in label]
    assert len(cut) == 1 and "call 1:" in cut[0] and FAILURE in cut[0]


def test_a_call_whose_graph_cannot_be_read_is_kept_bare_and_marked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from autograd_viz.trace import recorder as recorder_module

    real = recorder_module.snapshot
    seen = {"n": 0}

    def fails_on_call_1(event: Any, *args: Any) -> Any:
        seen["n"] += 1
        if seen["n"] == 2:
            raise ValueError(FAILURE)
        return real(event, *args)

    monkeypatch.setattr(recorder_module, "snapshot", fails_on_call_1)
    plain = _run(_engine_step)
    with warnings.catch_warnings(record=True) as said, autograd_viz.record() as trace:
        warnings.simplefilter("always")
        watched = _run(_engine_step)
    assert _bits(watched) == _bits(plain)
    assert len([w for w in said if FAILURE in str(w.message)]) == 1
    calls = _calls(trace)
    assert [calls[i].cut is not None for i in range(3)] == [False, True, False]
    assert calls[1].nodes == {} and calls[0].nodes and calls[2].nodes
    assert [e.kind for e in trace.events if e.graph_task == calls[1].id] == ["graph_task_start"]
    trace.state_at(len(trace))
    path = tmp_path / "bare.jsonl"
    trace.save(path)
    assert _calls(Trace.load(path))[1].cut == calls[1].cut


def test_the_tui_steps_through_a_cut_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.viz.tui.tuiting import replay_app, run_app, settle, status

    with _fails_once_in_call_1(monkeypatch), autograd_viz.record() as trace:
        _run(_engine_step)
    app = replay_app(trace)
    seen: list[str] = []

    async def actions(pilot: Any) -> None:
        for _ in range(len(trace.events) + 2):
            await pilot.press("s")
        await settle(pilot)
        seen.append(status(app))
        await pilot.press("t")
        await pilot.pause()

    run_app(app, actions)
    assert seen[0].startswith(f"step {len(trace.events)} of {len(trace.events)} ")


def test_a_live_session_goes_on_after_a_recorder_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from autograd_viz.live import LiveSession

    real = Recorder._goes_last
    seen = {"n": 0}

    def fails(self: Recorder, seq: int) -> bool:
        seen["n"] += 1
        if len(self.trace.graph_tasks) == 2 and seen["n"] > 0 and "at" not in seen:
            seen["at"] = seen["n"] + 2  # the third event of the second graph task
        if seen.get("at") == seen["n"]:
            raise ValueError(FAILURE)
        return real(self, seq)

    monkeypatch.setattr(Recorder, "_goes_last", fails)
    plain = _run(_engine_step)
    results: list[Any] = []
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with LiveSession(lambda: results.extend(_run(_engine_step))) as session:
            steps = 0
            while session.step(timeout=30) is not None:
                steps += 1
            assert session.finished and session.error is None
            trace = session.trace
    assert "at" in seen
    assert _bits(results) == _bits(plain)
    assert len([w for w in said if FAILURE in str(w.message)]) == 1
    first, cut, last = (trace.graph_tasks[g] for g in sorted(trace.graph_tasks))
    assert first.cut is None and last.cut is None and cut.cut is not None
    ends = [e.graph_task for e in trace.events if e.kind == "graph_task_end"]
    assert ends == [first.id, last.id]
    assert steps > len(trace.events)  # the cut call's later events were stepped, not kept


def test_torch_backward_nan_check_goes_on_after_its_own_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("torch")
    from autograd_viz.nan.forward import backward as forward_backward

    real = forward_backward._tensor_of
    seen = {"n": 0}

    def fails_once(summary: Any) -> Any:
        seen["n"] += 1
        if seen["n"] == 1:
            raise ValueError(FAILURE)
        return real(summary)

    monkeypatch.setattr(forward_backward, "_tensor_of", fails_once)
    plain = _run(_torch_nan_step)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with autograd_viz.watch_nan() as watch:
            watched = _run(_torch_nan_step)
            checking = [item for item in HUB.listeners if hasattr(item, "on_error")]
    assert seen["n"] > 1
    assert _bits(watched) == _bits(plain)
    assert len(checking) == 2  # the recorder and the backward checks, both still listening
    lines = [str(w.message) for w in said if FAILURE in str(w.message)]
    assert len(lines) == 1 and "backward NaN check" in lines[0]
    first = watch.report.first
    assert first is not None
    assert _calls(watch.trace)[2].id == first.graph_task
    assert [
        a for a in watch.trace.events if a.kind == "anomaly" and a.data.get("phase") != "forward"
    ]
