"""``nan TRACE`` on a trace that ``record --values leaves|none`` wrote (Note [Values tiers]).

``record`` runs no NaN check: such a trace holds only the values it kept. With
the leaves' gradients kept, a NaN in one is reported; with no values kept at
all, ``nan`` says the trace cannot tell, rather than "no NaN or Inf found".
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from autograd_viz import cli

SCRIPT = """
import torch
w = torch.nn.Parameter(torch.tensor([-1.0, 4.0]))
b = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
(w.sqrt() * b).sum().backward()  # sqrt(-1): the leaves' gradients hold a NaN
"""

CLEAN = SCRIPT.replace("-1.0", "1.0")


def _recorded(tmp_path: Path, source: str, values: str) -> Path:
    script = tmp_path / "step.py"
    script.write_text(textwrap.dedent(source), encoding="utf-8")
    trace = tmp_path / f"{values}.jsonl"
    assert cli.main(["record", "--values", values, "-o", str(trace), str(script)]) == 0
    return trace


def test_a_nan_in_the_leaves_recorded_gradients_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _recorded(tmp_path, SCRIPT, "leaves")
    capsys.readouterr()
    assert cli.main(["nan", str(trace)]) == 1
    out = capsys.readouterr().out
    assert "no NaN or Inf found" not in out
    assert "NaN first seen in the backward pass at AccumulateGrad" in out
    assert "NaN reached the gradient of leaf b" in out
    assert "anomaly mode names" not in out, "no node's output was recorded to say which"
    assert cli.main(["nan", "--call", "0", str(trace)]) == 1


def test_clean_leaves_say_nothing_was_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _recorded(tmp_path, CLEAN, "leaves")
    capsys.readouterr()
    assert cli.main(["nan", str(trace)]) == 0
    assert "no NaN or Inf found in 1 backward call" in capsys.readouterr().out


def test_a_trace_without_values_or_checks_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _recorded(tmp_path, SCRIPT, "none")
    capsys.readouterr()
    assert cli.main(["nan", str(trace)]) != 0
    captured = capsys.readouterr()
    assert "no NaN or Inf found" not in captured.out
    (line,) = captured.err.strip().splitlines()
    assert "recorded without values (--values none) and without the NaN checks" in line


def test_a_trace_nan_recorded_without_values_keeps_its_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "step.py"
    script.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    trace = tmp_path / "checked.jsonl"
    assert cli.main(["nan", "--values", "none", "-o", str(trace), str(script)]) == 1
    capsys.readouterr()
    assert cli.main(["nan", str(trace)]) == 1
    assert "NaN born in the forward pass at SqrtBackward0" in capsys.readouterr().out
