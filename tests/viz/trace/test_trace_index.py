"""One backward call of a long trace, found and read alone: ``--call K``."""

from __future__ import annotations

import itertools
import json
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import engine
from autograd_viz import cli
from autograd_viz.trace import Trace, index
from autograd_viz.trace.index import CallNotFoundError, calls_in, load_call
from autograd_viz.trace.recording import record


class _Reentrant(engine.Function):
    @staticmethod
    def forward(ctx: Any, x: engine.Tensor) -> engine.Tensor:
        return x * 1.0

    @staticmethod
    def backward(ctx: Any, grad: engine.Tensor) -> engine.Tensor:
        inner = engine.tensor([1.0], requires_grad=True)
        with engine.enable_grad():
            (inner * 2.0).sum().backward()
        return grad


def _loop(steps: int) -> None:
    rng = np.random.default_rng(0)
    w = engine.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    for step in range(steps):
        x = engine.tensor(rng.standard_normal((2, 3)))
        (_Reentrant.apply(x @ w).tanh() * float(step)).sum().backward()


@pytest.fixture(scope="module")
def streamed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("index") / "run.jsonl"
    with record(every=2, output=path):
        _loop(11)
    return path


def _shape(trace: Trace) -> list[tuple[Any, ...]]:
    return [(e.kind, e.seq, e.graph_task, e.node_id) for e in trace.events]


def test_the_calls_are_found_with_their_numbers(streamed: Path) -> None:
    spans = calls_in(streamed)
    assert [span.call for span in spans] == [0, 2, 4, 6, 8, 10]
    assert spans[-1].end == streamed.stat().st_size
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))


@pytest.mark.parametrize("call", [0, 4, 10])
def test_a_call_loads_alone_as_it_is_in_the_whole_trace(streamed: Path, call: int) -> None:
    whole = Trace.load(streamed)
    one = load_call(streamed, call)
    top = [info for info in one.graph_tasks.values() if info.parent is None]
    assert [info.call for info in top] == [call]
    assert len(one.graph_tasks) == 2, "with its reentrant call"
    wanted = set(one.graph_tasks)
    assert _shape(one) == [s for s in _shape(whole) if s[2] in wanted]
    assert one.header == whole.header
    last = one.state_at(len(one)).event
    assert last is not None and last.kind == "graph_task_end" and last.graph_task == top[0].id


def test_a_call_that_is_not_there_says_which_are(streamed: Path) -> None:
    with pytest.raises(CallNotFoundError, match=r"no backward call 3; it holds calls 0, 2, 4"):
        load_call(streamed, 3)


def test_calls_without_numbers_are_taken_by_position(streamed: Path, tmp_path: Path) -> None:
    lines = streamed.read_text(encoding="utf-8").splitlines()
    items = [json.loads(line) for line in lines]
    for item in items:
        item.pop("call", None)
    path = tmp_path / "old.jsonl"
    lines = [json.dumps(item, separators=(",", ":")) + "\n" for item in items]
    path.write_text("".join(lines), encoding="utf-8")
    assert [span.call for span in calls_in(path)] == [None] * 6
    assert _shape(load_call(path, 2)) == _shape(load_call(streamed, 4))
    with pytest.raises(CallNotFoundError, match=r"holds 6 backward calls \(0 to 5\), not call 6"):
        load_call(path, 6)


def test_a_trace_written_another_way_is_loaded_whole_and_the_call_picked(
    streamed: Path, tmp_path: Path
) -> None:
    lines = streamed.read_text(encoding="utf-8").splitlines()
    spaced = [json.dumps(json.loads(line), separators=(", ", ": ")) for line in lines]
    path = tmp_path / "spaced.jsonl"
    path.write_text("\n".join(spaced) + "\n", encoding="utf-8")
    assert calls_in(path) == []
    one = load_call(path, 6)
    assert [e.kind for e in one.events] == [e.kind for e in load_call(streamed, 6).events]
    assert [i.index for i in one.events] == list(range(len(one.events)))


def test_the_last_call_of_a_file_cut_short_is_dropped(streamed: Path, tmp_path: Path) -> None:
    whole = streamed.read_bytes()
    cut_in_its_record = tmp_path / "cut_early.jsonl"
    cut_in_its_record.write_bytes(whole[: calls_in(streamed)[-1].start + 20])
    assert [span.call for span in calls_in(cut_in_its_record)] == [0, 2, 4, 6, 8]
    data = streamed.read_bytes()
    path = tmp_path / "cut.jsonl"
    record_end = data.index(b"\n", calls_in(streamed)[-1].start) + 1  # its graph_task line
    path.write_bytes(data[: record_end + 50])  # cut in its first node record
    assert [span.call for span in calls_in(path)] == [0, 2, 4, 6, 8, 10]
    assert load_call(path, 10).events == []
    assert _shape(load_call(path, 8)) == _shape(load_call(streamed, 8))


def _peak_loading(tmp_path: Path, steps: int) -> int:
    path = tmp_path / f"run{steps}.jsonl"
    with record(output=path):
        _loop(steps)
    tracemalloc.start()
    try:
        load_call(path, steps // 2)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_loading_one_call_takes_memory_independent_of_the_files_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index, "BLOCK", 1 << 14)  # both files span many blocks
    small, big = _peak_loading(tmp_path, 20), _peak_loading(tmp_path, 400)
    assert big < small * 1.5 + 100_000, (small, big)


def test_dot_and_timeline_take_call(
    streamed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "g.dot"
    assert cli.main(["dot", str(streamed), "--call", "4", "-o", str(out)]) == 0
    assert "graph task" in capsys.readouterr().out
    timeline = tmp_path / "t.json"
    assert cli.main(["timeline", "--call", "10", str(streamed), "-o", str(timeline)]) == 0
    assert json.loads(timeline.read_text(encoding="utf-8"))["traceEvents"]
    capsys.readouterr()
    assert cli.main(["dot", str(streamed), "--call", "5", "-o", str(out)]) != 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "no backward call 5; it holds calls 0, 2, 4, 6, 8, 10" in err[0]
    assert cli.main(["dot", str(streamed), "--call", "x", "-o", str(out)]) == 2
    assert "expected a call number" in capsys.readouterr().err


def _nan_loop(steps: int) -> None:
    """A NaN born in each step's forward pass: events of no graph task before every call."""
    w = engine.tensor([1.0, 2.0], requires_grad=True)
    for step in range(steps):
        with np.errstate(all="ignore"):
            (w * engine.tensor([1.0, -float(step)])).sqrt().sum().backward()


@pytest.mark.parametrize("block", [index.BACK_BLOCK, 7, 200])
def test_a_call_brings_its_forward_pass_and_leaves_the_next_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    from autograd_viz.nan.watch import watch_nan

    path = tmp_path / "nan.jsonl"
    with watch_nan(keep_trace=False, output=path):
        _nan_loop(6)
    monkeypatch.setattr(index, "BACK_BLOCK", block)  # lines cut across blocks read backwards
    whole = Trace.load(path)
    forward = [e for e in whole.events if e.graph_task == 0]
    assert forward, "the NaN checks' findings in each forward pass"
    parts = list(index.iter_calls(path))
    assert [e for part in parts for e in _shape(part)] == _shape(whole), "nothing lost or twice"
    for call in range(1, 6):
        one = load_call(path, call)
        (info,) = one.graph_tasks.values()
        own = [e for e in one.events if e.graph_task == 0]
        assert own, f"call {call} starts with its forward pass"
        assert one.events.index(own[-1]) < info.first_event, "and it ends with its backward"
        assert all(e.t_ns < one.events[info.first_event].t_ns for e in own)
        assert one.events[-1].kind == "graph_task_end"
