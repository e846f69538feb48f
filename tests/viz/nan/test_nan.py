"""NaN provenance (``autograd_viz.nan.report``) and ``autograd-viz nan``, checked against PyTorch."""

from __future__ import annotations

import re
import runpy
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import autograd_viz
import engine
from autograd_viz import cli
from autograd_viz.nan.report import NanReport
from autograd_viz.nan.scan import find_nans
from autograd_viz.trace import Trace
from engine.anomaly import detect_anomaly

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
BUGGY = ["nan_log_zero", "nan_sqrt_zero", "nan_softmax_overflow", "nan_zero_norm"]


@contextmanager
def _full_anomaly(check_forward: bool = True) -> Iterator[Trace]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mode = detect_anomaly(check_inf=True, check_forward=check_forward, mode="collect")
    with autograd_viz.record() as trace, mode, np.errstate(all="ignore"):
        yield trace


def _example_report(name: str) -> NanReport:
    main = runpy.run_path(str(EXAMPLES / f"{name}.py"))["main"]
    with _full_anomaly() as trace:
        main()
    return find_nans(trace)


def _line_of(name: str, code: str) -> int:
    lines = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8").splitlines()
    (number,) = [i + 1 for i, line in enumerate(lines) if code in line]
    return number


# -- what PyTorch's anomaly mode names -------------------------------------------------


def _torch_names(torch: Any, build: Callable[[], Any]) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly(), pytest.raises(RuntimeError) as caught:
            build().backward()
    match = re.search(r"Function '(\w+)' returned nan values", str(caught.value))
    assert match is not None, str(caught.value)
    return match.group(1)


def _torch_log_zero(torch: Any) -> Any:
    w = torch.tensor([[0.5], [-1.5], [2.0]], requires_grad=True)
    x = torch.tensor([[10.0, -8.0, 9.0], [0.1, 0.2, 0.3]])
    labels = torch.tensor([[1.0], [0.0]])
    p = (x @ w).sigmoid()
    return -(labels * p.log() + (1.0 - labels) * (1.0 - p).log()).mean()


def _torch_sqrt_zero(torch: Any) -> Any:
    a = torch.tensor([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]], requires_grad=True)
    b = torch.tensor([[3.0, 4.0], [1.0, 0.0], [3.0, 1.0]])
    return ((a - b) ** 2).sum(dim=1).sqrt().sum()


def _torch_softmax_overflow(torch: Any) -> Any:
    w = torch.tensor([[2.0, -1.0, 0.5], [30.0, 1.0, -2.0]], requires_grad=True)
    x = torch.tensor([[0.5, 0.1], [0.2, 3.3]])
    labels = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    e = (x @ w).exp()
    p = e / e.sum(dim=1, keepdim=True)
    return -(labels * p.log()).sum() / 2.0


def _torch_zero_norm(torch: Any) -> Any:
    emb = torch.tensor([[3.0, 4.0, 0.0], [1.0, -2.0, 2.0], [0.0, 0.0, 0.0]], requires_grad=True)
    query = torch.tensor([[1.0, 0.0, 1.0]])
    norm = (emb * emb).sum(dim=1, keepdim=True).sqrt()
    return ((emb / norm) * query).sum(dim=1).sum()


# name: (its torch twin, producing node, phase, cause, the producing line's code)
CASES: dict[str, tuple[Callable[[Any], Any], str, str, str, str]] = {
    "nan_log_zero": (_torch_log_zero, "LogBackward0", "forward", "log of 0", "(1.0 - p).log()"),
    "nan_sqrt_zero": (
        _torch_sqrt_zero,
        "SqrtBackward0",
        "backward",
        "sqrt at 0 in backward (1/(2·sqrt(0)))",
        ".sqrt()",
    ),
    "nan_softmax_overflow": (
        _torch_softmax_overflow,
        "ExpBackward0",
        "forward",
        "exp overflow",
        "e = x.exp()",
    ),
    "nan_zero_norm": (_torch_zero_norm, "DivBackward0", "forward", "0/0", "return x / norm"),
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", BUGGY)
def test_report_names_the_node_pytorch_names(torch: Any, name: str) -> None:
    build = CASES[name][0]
    report = _example_report(name)
    assert report.torch_node is not None
    assert report.torch_node.name == _torch_names(torch, lambda: build(torch))


@pytest.mark.parametrize("name", BUGGY)
def test_report_names_the_producing_node_its_cause_and_line(name: str) -> None:
    _, node, phase, cause, code = CASES[name]
    report = _example_report(name)
    first = report.first
    assert first is not None
    assert (first.node.name, first.phase, first.cause) == (node, phase, cause)
    assert first.source is not None
    assert Path(first.source.file).resolve() == EXAMPLES / f"{name}.py"
    assert first.source.line == _line_of(name, code)
    assert report.path[-1] == first.node
    assert report.path[0].name in ("NegBackward0", "SumBackward0", "DivBackward0")


def test_sqrt_at_zero_is_born_in_backward_one_node_before_the_one_pytorch_names() -> None:
    report = _example_report("nan_sqrt_zero")
    assert report.first is not None and report.torch_node is not None
    assert report.first.value == "inf" and report.first.born
    assert report.torch_node.name == "PowBackward0"
    pow_finding = next(f for f in report.others if f.node == report.torch_node)
    assert pow_finding.cause == "0 × inf" and not pow_finding.born
    assert [n.name for n in report.path] == ["SumBackward0", "SqrtBackward0"]


def test_collect_mode_reports_every_source() -> None:
    a = engine.tensor([0.0, 1.0], requires_grad=True, name="a")
    b = engine.tensor([-1.0, 4.0], requires_grad=True, name="b")
    with _full_anomaly() as trace:
        (a.log().sum() + b.sqrt().sum()).backward()
    report = find_nans(trace)
    assert report.first is not None
    assert (report.first.node.name, report.first.cause) == ("LogBackward0", "log of 0")
    born_forward = [(f.node.name, f.cause) for f in report.sources if f.phase == "forward"]
    assert born_forward == [("SqrtBackward0", "sqrt of a negative number")]
    assert report.backward_calls == 1


def test_inf_minus_inf_and_zero_times_inf_are_named() -> None:
    x = engine.tensor([100.0, 1.0], requires_grad=True)
    zero = engine.tensor([0.0, 1.0])
    with _full_anomaly() as trace:
        big = x.exp()
        ((big - big) + big * zero).sum().backward()
    causes = {f.node.name: f.cause for f in find_nans(trace).findings if f.phase == "forward"}
    assert causes["ExpBackward0"] == "exp overflow"
    assert causes["SubBackward0"] == "inf − inf"
    assert causes["MulBackward0"] == "0 × inf"


def test_without_anomaly_mode_the_report_reads_the_gradients() -> None:
    x = engine.tensor([0.0, 4.0], requires_grad=True)
    with autograd_viz.record() as trace, np.errstate(all="ignore"):
        x.sqrt().sum().backward()
    report = find_nans(trace)
    assert report.first is not None
    assert (report.first.node.name, report.first.cause) == (
        "SqrtBackward0",
        "sqrt at 0 in backward (1/(2·sqrt(0)))",
    )
    assert report.torch_node is None  # an Inf only: PyTorch's anomaly mode raises for NaN


def test_a_finite_run_has_no_finding() -> None:
    x = engine.tensor([1.0, 4.0], requires_grad=True)
    with _full_anomaly() as trace:
        x.sqrt().sum().backward()
    report = find_nans(trace)
    assert report.first is None and report.findings == () and report.path == ()


# -- the command -----------------------------------------------------------------------


@pytest.mark.parametrize("name", BUGGY)
def test_cli_reports_each_buggy_example(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    _, node, phase, cause, code = CASES[name]
    script = EXAMPLES / f"{name}.py"
    assert cli.main(["nan", str(script)]) == 1
    out = capsys.readouterr().out
    assert f"born in the {phase} pass at {node}" in out
    assert cause in out
    assert f"{script}:{_line_of(name, code)}" in out
    assert "path" in out and "PyTorch" in out


@pytest.mark.parametrize("name", BUGGY)
def test_cli_finds_nothing_in_each_fixed_example(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["nan", str(EXAMPLES / f"{name}_fixed.py")]) == 0
    assert "no NaN or Inf found in 1 backward call" in capsys.readouterr().out


def test_cli_saves_a_loadable_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "nan.jsonl"
    assert cli.main(["nan", "-o", str(output), str(EXAMPLES / "nan_sqrt_zero.py")]) == 1
    trace = Trace.load(output)
    assert trace.stats().anomalies >= 2
    assert find_nans(trace).first is not None
    assert trace.state_at(len(trace)) is not None
    assert "trace saved to" in capsys.readouterr().err


def test_cli_no_forward_checks_only_backward(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["nan", "--no-forward", str(EXAMPLES / "nan_log_zero.py")]) == 1
    out = capsys.readouterr().out
    assert "born in the backward pass at LogBackward0" in out


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("autograd-viz: error:")]


def test_cli_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["nan"]) == 2
    assert _errors(capsys.readouterr().err) == [
        "autograd-viz: error: nan: missing SCRIPT, the Python script to run "
        "(see 'autograd-viz --help')"
    ]
    assert cli.main(["nan", str(tmp_path / "missing.py")]) == 3
    assert _errors(capsys.readouterr().err) == [
        f"autograd-viz: error: cannot run {tmp_path / 'missing.py'}: no such file"
    ]
    script = EXAMPLES / "nan_log_zero.py"
    assert cli.main(["nan", "-o", str(tmp_path / "no" / "t.jsonl"), str(script)]) == 3
    (line,) = _errors(capsys.readouterr().err)
    assert "does not exist" in line


def test_cli_failing_script_reports_then_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "fails.py"
    script.write_text(
        "import numpy as np\nimport engine\n"
        "x = engine.tensor([0.0], requires_grad=True)\n"
        "with np.errstate(all='ignore'):\n"
        "    x.log().sum().backward()\n"
        "raise ValueError('after the NaN')\n",
        encoding="utf-8",
    )
    assert cli.main(["nan", str(script)]) == 1  # what was found is the answer
    captured = capsys.readouterr()
    assert "born in the forward pass at LogBackward0" in captured.out
    assert f"{script}:5" in captured.out
    assert _errors(captured.err) == []
    assert f"autograd-viz: {script} raised ValueError: after the NaN" in captured.err


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("raise RuntimeError('no data')", "raised RuntimeError: no data"),
        ("import sys; sys.exit(9)", "exited with status 9"),
    ],
)
def test_cli_a_script_that_fails_before_any_backward_is_not_a_finding(
    code: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "fails.py"
    script.write_text(f"import engine\n{code}\n", encoding="utf-8")
    assert cli.main(["nan", str(script)]) == 4
    captured = capsys.readouterr()
    assert "no NaN or Inf found" not in captured.out
    assert _errors(captured.err) == [
        f"autograd-viz: error: {script} {said}; "
        "no NaN or Inf found in the 0 backward calls before it"
    ]


def test_cli_output_option_after_the_script_saves_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The form the README shows: before, -o went to the script and no trace was written.
    output = tmp_path / "t.jsonl"
    script = EXAMPLES / "nan_sqrt_zero.py"
    assert cli.main(["nan", str(script), "-o", str(output), "--no-inf"]) == 1
    assert find_nans(Trace.load(output)).first is not None
    assert "trace saved to" in capsys.readouterr().err


def test_cli_names_ops_one_way_and_counts_in_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "two.py"
    script.write_text(
        "import numpy as np\nimport engine\n"
        "x = engine.tensor([0.0, 4.0], requires_grad=True)\n"
        "for _ in range(2):\n"
        "    with np.errstate(all='ignore'):\n"
        "        (x.sqrt() * 2.0).sum().backward()\n",
        encoding="utf-8",
    )
    assert cli.main(["nan", str(script)]) == 1
    out = capsys.readouterr().out
    assert "(op sqrt)" in out
    others = next(line for line in out.splitlines() if line.startswith("Other findings"))
    assert "passed one on" not in others and re.search(r"\d+ more born, \d+ passed on", others)
