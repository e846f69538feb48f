"""``nan`` reads a run as it goes: the same report as the whole run, in flat memory."""

from __future__ import annotations

import gc
import io
import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

import engine
from autograd_viz import cli
from autograd_viz.cli.nan import print_report
from autograd_viz.nan.report import NanReport
from autograd_viz.nan.scan import NanScan, find_nans
from autograd_viz.nan.watch import nan_checks, watch_nan
from autograd_viz.trace import Trace
from autograd_viz.trace.calls import CallSelection
from autograd_viz.trace.recording import Recording
from autograd_viz.trace.stream import join


def _spreading_loop(steps: int, born: int) -> None:
    """An update loop whose weights turn NaN at step ``born``: every later step holds NaN."""
    w = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for step in range(steps):
        x = engine.tensor([1.0, 2.0, -1.0]) if step == born else engine.tensor([1.0, 2.0, 3.0])
        loss = ((w * x).sqrt() * 2.0).sum()
        loss.backward()
        with engine.no_grad():
            w -= 0.01 * w.grad
        w.grad = None


def _words(report: NanReport) -> str:
    console = Console(file=io.StringIO(), width=100, highlight=False)
    print_report(report, console)
    out = console.file.getvalue()
    assert isinstance(out, str)
    return out


def _same(streamed: NanReport, whole: NanReport, same_run: bool = True) -> None:
    """The same report; of two runs of one program, node ids and times aside."""

    def words(report: NanReport) -> str:
        return _words(report) if same_run else re.sub(r"#\d+", "#N", _words(report))

    assert words(streamed) == words(whole)
    assert streamed.first is not None and whole.first is not None
    first, other = streamed.first, whole.first
    assert (first.node.name, first.cause, first.event_index) == (
        other.node.name,
        other.cause,
        other.event_index,
    )
    assert [n.name for n in streamed.path] == [n.name for n in whole.path]
    assert (streamed.other_count, streamed.source_count) == (whole.other_count, whole.source_count)
    assert streamed.backward_calls == whole.backward_calls
    if same_run:
        assert first.t_ns == other.t_ns and first.node == other.node
        assert streamed.path == whole.path and streamed.torch_node == whole.torch_node


def test_a_run_read_as_it_goes_reports_what_the_whole_run_does(tmp_path: Path) -> None:
    with np.errstate(all="ignore"), watch_nan() as whole:
        _spreading_loop(12, born=4)
    path = tmp_path / "run.jsonl"
    with np.errstate(all="ignore"), watch_nan(keep_trace=False, output=path) as streamed:
        _spreading_loop(12, born=4)
    assert not streamed.trace.events, "each call is dropped once read"
    assert streamed.recorded
    _same(streamed.report, whole.report, same_run=False)
    assert whole.report.other_count > 20, "the NaN spreads into every later step"
    written = Trace.load(path)
    assert [i.call for i in written.graph_tasks.values()] == list(range(12))
    _same(streamed.report, find_nans(written))


@pytest.mark.parametrize("keep", [0, 3, 10])
def test_a_report_that_keeps_some_findings_says_the_same_words(keep: int) -> None:
    parts: list[Trace] = []
    recording = Recording(calls=CallSelection(), gated=False, observe=parts.append)
    with np.errstate(all="ignore"), recording.running(), nan_checks():
        _spreading_loop(8, born=2)
    assert len(parts) == 8, "one part per call"
    scan = NanScan(keep=keep)
    for part in parts:
        scan.add(part)
    report = scan.report()
    whole = find_nans(join(parts))
    assert len(report.findings) < len(whole.findings)
    assert report.unlisted > 0
    _same(report, whole)


def _peak_while_checking(steps: int) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        with np.errstate(all="ignore"), watch_nan(keep_trace=False) as watch:
            _spreading_loop(steps, born=3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert watch.report.first is not None and watch.report.backward_calls == steps
    return peak


def test_memory_stays_flat_however_long_the_run_checked() -> None:
    # In a fresh interpreter, as a program is checked: what earlier tests in
    # this process left behind (caches, counters) is not the checker's memory.
    code = (
        "from tests.viz.nan.test_nan_streamed import _peak_while_checking as peak\n"
        "peak(5)\n"  # what a first run sets up once (imports, caches)
        "print(peak(40), peak(200))\n"  # past the findings a report lists in full
    )
    root = Path(__file__).resolve().parents[3]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    short, long = (int(n) for n in done.stdout.split()[-2:])
    assert long < short * 1.5 + 200_000, (short, long)


TRAIN = """\
import numpy as np
import engine
w = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
for step in range({steps}):
    x = engine.tensor([1.0, 2.0, -1.0 if step == {born} else 3.0])
    with np.errstate(all='ignore'):
        ((w * x).sqrt() * 2.0).sum().backward()
    with engine.no_grad():
        w -= 0.01 * w.grad
    w.grad = None
"""


def test_the_command_reports_a_long_run_as_its_trace_file_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(steps=30, born=5), encoding="utf-8")
    output = tmp_path / "nan.jsonl"
    assert cli.main(["nan", "-o", str(output), str(script)]) == 1
    captured = capsys.readouterr()
    assert f"trace saved to {output}" in captured.err
    whole = find_nans(Trace.load(output))
    assert whole.backward_calls == 30
    console = Console(file=io.StringIO(), highlight=False)  # the command's width, off a terminal
    print_report(whole, console)
    assert captured.out == console.file.getvalue()


def test_nan_on_a_trace_file_says_what_it_said_running_the_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(steps=12, born=4), encoding="utf-8")
    output = tmp_path / "nan.jsonl"
    assert cli.main(["nan", "-o", str(output), str(script)]) == 1
    ran = capsys.readouterr().out
    assert cli.main(["nan", str(output)]) == 1
    assert capsys.readouterr().out == ran
    assert cli.main(["nan", str(output), "--call", "2"]) == 0
    assert "no NaN or Inf found in 1 backward call" in capsys.readouterr().out
    assert cli.main(["nan", "--call", "4", str(output)]) == 1
    assert "born in the forward pass at SqrtBackward0" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["--first", "T"], 2, "--first: for a script that nan runs; T is a trace"),
        (["-o", "x.jsonl", "--last", "2", "T"], 2, "-o, --last: for a script"),
        (["T", "--call", "99"], 3, "T: the trace holds no backward call 99; it holds calls 0-2"),
        (["S", "--call", "1"], 2, "--call K picks a call of a trace file (.jsonl), not of a"),
    ],
)
def test_nan_says_which_options_go_with_a_trace(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    status: int,
    message: str,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(steps=3, born=1), encoding="utf-8")
    trace = tmp_path / "t.jsonl"
    assert cli.main(["nan", "-o", str(trace), str(script)]) == 1
    capsys.readouterr()
    paths = {"T": str(trace), "S": str(script)}
    assert cli.main(["nan", *[paths.get(word, word) for word in argv]]) == status
    assert message.replace("T", str(trace)) in capsys.readouterr().err


def _peak_reading(path: Path) -> int:
    from autograd_viz.trace.index import iter_calls

    gc.collect()
    tracemalloc.start()
    try:
        scan = NanScan(keep=100)
        for part in iter_calls(path):
            scan.add(part)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert scan.report().first is not None
    return peak


def test_reading_a_trace_for_nans_takes_the_memory_of_a_call_whatever_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autograd_viz.trace import index

    monkeypatch.setattr(index, "BLOCK", 1 << 12)  # the calls are found a block at a time
    sizes = {}
    for steps in (40, 160):  # both past the findings a report lists in full
        path = tmp_path / f"t{steps}.jsonl"
        with np.errstate(all="ignore"), watch_nan(keep_trace=False, output=path):
            _spreading_loop(steps, born=2)
        sizes[steps] = _peak_reading(path)
    assert sizes[160] < sizes[40] * 1.5 + 100_000, sizes
