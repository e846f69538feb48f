"""Training runs: which backward calls to record, a flight recorder, a trace written as it goes."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import engine
from autograd_viz.nan.watch import watch_nan
from autograd_viz.trace import Trace
from autograd_viz.trace.calls import CallSelection, CallSelectionError, parse_steps
from autograd_viz.trace.recording import record
from engine.calls import CALLS
from engine.events import HUB

# -- choosing calls ------------------------------------------------------------------------


def test_steps_are_indices_and_ranges_merged_in_order() -> None:
    assert parse_steps("10-12,100") == [(10, 13), (100, 101)]
    assert parse_steps(" 5 , 0-2,1-3,7-7") == [(0, 4), (5, 6), (7, 8)]
    selection = CallSelection(steps="100,10-12")
    assert selection.steps == "10-12,100"
    assert [i for i in range(200) if selection.wants(i)] == [10, 11, 12, 100]
    assert CallSelection(steps=range(3, 6)).steps == "3-5"
    assert CallSelection(steps=[4, 2, 3]).steps == "2-4"


def test_every_and_steps_together_keep_the_calls_either_names() -> None:
    selection = CallSelection(steps="1,2", every=5)
    assert [i for i in range(12) if selection.wants(i)] == [0, 1, 2, 5, 10]
    assert selection.filters
    assert not CallSelection(last=3).filters
    assert CallSelection(last=3).wants(12345)
    assert selection.describe() == "calls 1-2 and every 5th call"
    assert CallSelection(every=1, last=2).describe() == "every call, the last 2 kept"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": "3-1"}, "ends before it starts"),
        ({"steps": "a"}, "'a' is not a call index"),
        ({"steps": "1,,2"}, "'' is not a call index"),
        ({"steps": "-1"}, "'-1' is not a call index"),
        ({"steps": [1, -2]}, "-2 is not a call index"),
        ({"steps": "\u0661"}, "is not a call index"),  # an Arabic-Indic digit: not ASCII
        ({"every": 0}, "every must be a positive integer"),
        ({"last": -3}, "last must be a positive integer"),
        ({"last": True}, "last must be a positive integer"),
    ],
)
def test_a_selection_that_names_no_calls_says_why(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(CallSelectionError, match=message):
        CallSelection(**kwargs)
    with pytest.raises(CallSelectionError, match=message), record(**kwargs):
        pass


# -- our engine ----------------------------------------------------------------------------


class _Reentrant(engine.Function):
    """Its backward runs a backward of its own: a reentrant call, part of the outer one."""

    @staticmethod
    def forward(ctx: Any, x: engine.Tensor) -> engine.Tensor:
        return x * 1.0

    @staticmethod
    def backward(ctx: Any, grad: engine.Tensor) -> engine.Tensor:
        inner = engine.tensor([1.0], requires_grad=True)
        with engine.enable_grad():
            (inner * 2.0).sum().backward()
        return grad


def _engine_loop(steps: int) -> list[np.ndarray]:
    """A small training loop on our engine, with a reentrant backward in every step."""
    rng = np.random.default_rng(0)
    w = engine.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    grads = []
    for step in range(steps):
        x = engine.tensor(rng.standard_normal((5, 3)))
        loss = (_Reentrant.apply(x @ w).tanh() * float(step + 1)).sum()
        loss.backward()
        grads.append(w.grad.data.copy())
        w.grad = None
    return grads


def _calls(trace: Trace) -> list[int | None]:
    return [info.call for info in trace.graph_tasks.values() if info.parent is None]


@pytest.mark.parametrize(
    ("kwargs", "calls"),
    [
        ({}, [0, 1, 2, 3, 4, 5, 6]),
        ({"steps": "1-2,5"}, [1, 2, 5]),
        ({"every": 3}, [0, 3, 6]),
        ({"last": 2}, [5, 6]),
        ({"every": 2, "last": 3}, [2, 4, 6]),
        ({"steps": [0, 6], "every": 4}, [0, 4, 6]),
    ],
)
def test_record_keeps_the_chosen_calls_with_their_reentrant_calls_and_results_unchanged(
    kwargs: dict[str, Any], calls: list[int]
) -> None:
    plain = _engine_loop(7)
    with record(**kwargs) as trace:
        watched = _engine_loop(7)
    assert all(np.array_equal(a, b) for a, b in zip(plain, watched, strict=True))
    assert _calls(trace) == calls
    children = [info for info in trace.graph_tasks.values() if info.parent is not None]
    assert len(children) == len(calls), "each kept call keeps its reentrant call"
    assert all(info.call is None and info.parent in trace.graph_tasks for info in children)
    kept = set(trace.graph_tasks)
    assert {e.graph_task for e in trace.events} == kept
    whole = _whole(trace)
    assert whole.stats().graph_tasks == 2 * len(calls)


def _whole(trace: Trace) -> Trace:
    """``trace`` after a save and a load: a valid file."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        trace.save(path)
        loaded = Trace.load(path)
    assert loaded == trace
    return loaded


def test_a_call_not_recorded_runs_with_nobody_listening() -> None:
    seen: list[bool] = []
    w = engine.tensor([1.0, 2.0], requires_grad=True)
    w.register_hook(lambda grad: seen.append(HUB.active))
    with record(every=3):
        for _ in range(7):
            (w * 3.0).sum().backward()
    assert seen == [True, False, False, True, False, False, True]
    assert not HUB.active and not CALLS.watchers


def test_the_flight_recorder_fills_the_trace_when_the_block_ends() -> None:
    with record(last=3) as trace:
        _engine_loop(5)
        assert not trace.events, "the last calls are put in place at the end"
    assert _calls(trace) == [2, 3, 4]
    _whole(trace)


def test_a_second_recording_counts_its_own_calls_from_zero() -> None:
    _engine_loop(2)
    with record(steps="0"):
        pass
    with record(steps="1") as trace:
        _engine_loop(3)
    assert _calls(trace) == [1]


# -- written as it goes --------------------------------------------------------------------


def test_each_call_is_in_the_file_when_it_ends(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    w = engine.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    with record(every=2, output=path) as trace:
        for _ in range(5):
            (w * 2.0).sum().backward()
            seen.append(_calls(Trace.load(path)))
            assert not trace.events, "nothing is held once the call is written"
    assert seen == [[0], [0], [0, 2], [0, 2], [0, 2, 4]]
    loaded = Trace.load(path)
    assert loaded.header["sources"] == ["engine"]
    assert loaded.tail_cut == 0


@pytest.mark.parametrize("kwargs", [{}, {"every": 3}, {"last": 2}, {"steps": "1-2"}])
def test_results_are_bit_identical_while_written_to_a_file(
    tmp_path: Path, kwargs: dict[str, Any]
) -> None:
    plain = _engine_loop(6)
    with record(output=tmp_path / "run.jsonl", **kwargs):
        watched = _engine_loop(6)
    assert all(np.array_equal(a, b) for a, b in zip(plain, watched, strict=True))
    assert Trace.load(tmp_path / "run.jsonl").graph_tasks


def test_a_streamed_trace_is_the_trace_recorded_in_memory(tmp_path: Path) -> None:
    with record(steps="0-3") as in_memory:
        _engine_loop(5)
    with record(steps="0-3", output=tmp_path / "run.jsonl"):
        _engine_loop(5)
    streamed = Trace.load(tmp_path / "run.jsonl")
    assert _same_but_times(streamed, in_memory)


def _same_but_times(a: Trace, b: Trace) -> bool:
    """Two recordings of the same program: the same events, ids and seqs aside."""

    def shape(trace: Trace) -> list[tuple[Any, ...]]:
        return [(e.kind, e.node_name, e.thread) for e in trace.events]

    calls_a = [(i.call, len(i.nodes)) for i in a.graph_tasks.values()]
    calls_b = [(i.call, len(i.nodes)) for i in b.graph_tasks.values()]
    return shape(a) == shape(b) and calls_a == calls_b


def _peak_while_recording(steps: int, path: Path, **kwargs: Any) -> int:
    rng = np.random.default_rng(0)
    w = engine.tensor(rng.standard_normal((16, 16)), requires_grad=True)
    x = engine.tensor(rng.standard_normal((8, 16)))
    gc.collect()
    tracemalloc.start()
    try:
        with record(output=path, **kwargs):
            for _ in range(steps):
                ((x @ w).tanh() @ w).sum().backward()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("kwargs", [{}, {"every": 2}, {"last": 3}])
def test_memory_stays_flat_however_many_calls_are_recorded(
    tmp_path: Path, kwargs: dict[str, Any]
) -> None:
    short = _peak_while_recording(20, tmp_path / "short.jsonl", **kwargs)
    long = _peak_while_recording(200, tmp_path / "long.jsonl", **kwargs)
    assert long < short * 1.5 + 200_000, (short, long)
    assert len(_calls(Trace.load(tmp_path / "long.jsonl"))) == {"every": 100, "last": 3}.get(
        next(iter(kwargs), ""), 200
    )


# -- NaN -----------------------------------------------------------------------------------


def _nan_loop(steps: int, born: int) -> None:
    w = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for step in range(steps):
        x = engine.tensor([1.0, 2.0, 3.0 - step]) if step == born else engine.tensor([1.0] * 3)
        (w * x).sqrt().sum().backward()


def test_watch_nan_last_keeps_the_birth_call_and_the_ones_before(tmp_path: Path) -> None:
    path = tmp_path / "nan.jsonl"
    with np.errstate(all="ignore"), watch_nan(last=3, output=path) as watch:
        _nan_loop(12, born=4)
    assert _calls(watch.trace) == [2, 3, 4], "recording stops at the call with the finding"
    assert watch.found
    assert watch.report.first is not None and watch.report.first.node.name == "SqrtBackward0"
    saved = Trace.load(path)
    assert _calls(saved) == [2, 3, 4]
    assert watch.recording is not None and watch.recording.saved_found


def test_watch_nan_every_checks_every_call_but_records_only_its_own() -> None:
    with np.errstate(all="ignore"), watch_nan(every=5) as watch:
        _nan_loop(12, born=5)
    assert _calls(watch.trace) == [0, 5, 10]
    assert watch.found


# -- PyTorch -------------------------------------------------------------------------------


def test_a_recorded_pytorch_call_keeps_its_modules_and_others_run_without_module_hooks() -> None:
    torch = pytest.importorskip("torch")
    hooks = torch.nn.modules.module._global_forward_pre_hooks
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    x = torch.randn(2, 3)

    def loop() -> list[Any]:
        grads = []
        for _ in range(5):
            model.zero_grad()
            hooked.append(bool(hooks))
            model(x).sum().backward()
            grads.append(model[0].weight.grad.clone())
        return grads

    hooked: list[bool] = []
    plain = loop()
    hooked.clear()
    with record(every=2) as trace:
        watched = loop()
    assert all(torch.equal(a, b) for a, b in zip(plain, watched, strict=True))
    assert hooked == [True, False, True, False, True], "hooks only for a recorded call's forward"
    assert not hooks
    assert _calls(trace) == [0, 2, 4]
    for info in trace.graph_tasks.values():
        assert set(info.modules.values()) == {"Linear", "Tanh", "Sequential"}, info.modules


# -- a live session ------------------------------------------------------------------------


def test_a_live_session_gates_only_the_chosen_calls() -> None:
    from autograd_viz.live import LiveSession

    results: list[list[np.ndarray]] = []
    session = LiveSession(lambda: results.append(_engine_loop(5)), calls=CallSelection(every=2))
    with session:
        session.run_to_end(timeout=60)
    assert session.error is None and results
    trace = session.trace
    top = [info for info in trace.graph_tasks.values() if info.parent is None]
    assert len(top) == 3 and len(trace.graph_tasks) == 6, "calls 0, 2 and 4, each with its own"
    assert all(np.array_equal(a, b) for a, b in zip(results[0], _engine_loop(5), strict=True))
    assert not CALLS.watchers


def test_a_recording_of_every_call_keeps_its_module_paths_beside_one_of_some() -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    with record() as every_call, record(every=3):
        for _ in range(4):
            model(torch.randn(2, 3)).sum().backward()
    assert len(every_call.graph_tasks) == 4
    assert all(info.modules for info in every_call.graph_tasks.values())
