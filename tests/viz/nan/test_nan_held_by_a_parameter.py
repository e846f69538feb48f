"""A parameter holding a NaN or an Inf that no checked op made: the value enters the
computation at the first op that reads it (Note [A parameter that holds a NaN] in
``autograd_viz/nan/forward/births.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz import cli  # noqa: E402
from autograd_viz.nan.watch import watch_nan  # noqa: E402
from autograd_viz.trace import Trace  # noqa: E402

pytestmark = pytest.mark.oracle


def _model() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _train(model: Any, steps: int, write_at: int | None, value: float) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    losses = []
    for step in range(steps):
        if step == write_at:
            with torch.no_grad():
                model[2].weight.view(-1)[3] = value  # the program writes it, as a bad load would
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(("value", "word"), [(float("inf"), "Inf"), (float("nan"), "NaN")])
def test_a_parameter_holding_a_value_is_where_the_value_entered(value: float, word: str) -> None:
    with watch_nan() as watch:
        _train(_model(), 3, 1, value)
    report = watch.report
    first = report.first
    assert first is not None and first.phase == "forward"
    assert first.node.name == "AddmmBackward0" and first.module == "2"
    assert first.held == ("2.weight",)
    assert first.cause == f"parameter 2.weight held {word} before this op"
    # Said once: the next step reads parameters the optimizer wrote from NaN gradients,
    # which were seen (passed on), and the same parameter again.
    assert report.source_count == 0 and not report.sources


def test_a_checkpoint_loaded_with_a_nan_names_the_parameter() -> None:
    """``load_state_dict`` copies a tensor's values in (no literal): before anything was
    found, that is a value nobody saw, named at its first read."""
    state = _model().state_dict()
    state["0.bias"][5] = float("nan")
    model = _model()
    with watch_nan() as watch:
        model.load_state_dict(state)
        _train(model, 2, None, 0.0)
    first = watch.report.first
    assert first is not None and first.held == ("0.bias",)
    assert first.cause == "parameter 0.bias held NaN before this op"


def test_a_step_from_a_nan_gradient_another_rank_sent_names_no_parameter() -> None:
    """An allreduce brings another rank's NaN into ``.grad`` (nothing checked made it, and
    this process found nothing yet); the optimizer's step writes it into the parameters.
    The value came from a backward (the other rank reports its birth): no parameter here is
    said to have held it."""
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    x = torch.randn(5, 4)
    with watch_nan() as watch:
        for step in range(3):
            opt.zero_grad()
            model(x).sum().backward()
            if step == 0:
                with torch.no_grad():
                    model[0].weight.grad.view(-1)[7] = float("nan")  # as an allreduce writes
            opt.step()
    report = watch.report
    assert report.first is not None
    assert not report.first.held and not any(f.held for f in report.sources)


def test_results_are_the_same_watched_and_not() -> None:
    plain = _train(_model(), 3, 1, float("inf"))
    with watch_nan():
        watched = _train(_model(), 3, 1, float("inf"))
    assert str(plain) == str(watched)  # nan compares unequal; their text is the same


def test_a_healthy_run_and_a_nan_born_in_an_op_name_no_parameter() -> None:
    with watch_nan() as watch:
        _train(_model(), 3, None, 0.0)
    assert watch.report.first is None
    model = _model()
    with watch_nan() as watch:
        torch.log(model(torch.zeros(2, 4)) * 0).sum().backward()  # log of 0: born in log
    first = watch.report.first
    assert first is not None and first.held == () and first.cause == "log of 0"


PROGRAM = """
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
with torch.no_grad():
    model[2].weight[1, 2] = float("inf")  # a checkpoint loaded with an overflow
loss = model(torch.randn(2, 4)).sum()
loss.backward()
"""


def test_the_cli_says_the_value_entered_and_a_trace_says_it_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "held.py"
    script.write_text(PROGRAM, encoding="utf-8")
    trace_path = tmp_path / "held.jsonl"
    assert cli.main(["nan", "-o", str(trace_path), str(script)]) == 1
    out = capsys.readouterr().out
    assert "Inf entered the forward pass at AddmmBackward0" in out
    assert "why           parameter 2.weight held Inf before this op" in out
    assert "module        2" in out
    trace = Trace.load(trace_path)
    (event,) = [e for e in trace.events if e.data.get("held_inputs")]
    assert list(event.data["held_inputs"]) == [2] and list(event.data["held_names"]) == ["2.weight"]
    assert cli.main(["nan", str(trace_path)]) == 1
    again = capsys.readouterr().out
    assert "why           parameter 2.weight held Inf before this op" in again
