"""``autograd-viz grads TRACE.jsonl``: what a recorded trace says (exact zeros and where they
began, pruned leaves, the flow), the same as a watched run says it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from grads_programs import write

from autograd_viz.cli.grads import report_on_trace
from autograd_viz.cli.main import main
from autograd_viz.grads.report import PRUNED, ZEROS

pytestmark = pytest.mark.oracle


def recorded(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> Path:
    trace = tmp_path / f"{name}.jsonl"
    assert main(["record", "-o", str(trace), str(write(tmp_path, name)), "-"]) == 0
    capsys.readouterr()
    return trace


def test_zeros_and_flow_read_from_a_trace_match_the_watched_run(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = recorded(tmp_path, "zeros_relu", capsys)
    report = report_on_trace(str(trace))
    assert report.calls == 2
    zeros = {r.finding.parameter: r.finding for r in report.findings(ZEROS)}
    assert set(zeros) == {"enc.weight", "enc.bias", "head.weight"}
    assert "became all zeros at ReluBackward0" in zeros["enc.weight"].why
    assert "became all zeros at AddmmBackward0" in zeros["head.weight"].why
    assert not report.found
    flow = {row.module: row for row in report.last.flow}
    assert flow["enc"].grad_norm == 0 and flow["enc"].flag == "vanishing"
    assert flow["head"].grad_norm > 0
    assert main(["grads", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "read from a trace" in out and "gradient of exact zeros: 3" in out


def test_pruned_leaves_read_from_a_trace(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = report_on_trace(str(recorded(tmp_path, "pruned", capsys)))
    pruned = {r.finding.parameter for r in report.findings(PRUNED)}
    assert pruned == {"0.weight", "0.bias"}
    assert report.findings(ZEROS) == []


def test_a_trace_takes_no_arguments_and_a_bad_one_is_one_line(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = recorded(tmp_path, "healthy", capsys)
    assert main(["grads", str(trace), "extra"]) == 2
    assert "is a trace, read as it was recorded" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not a trace\n", encoding="utf-8")
    assert main(["grads", str(bad)]) == 3
    assert "invalid trace file" in capsys.readouterr().err
