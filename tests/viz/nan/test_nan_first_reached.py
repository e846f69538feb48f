"""``first=True`` stops a program where a NaN or Inf reaches something, not where a contained
one is born (Note [Stopping where a value reaches something] in
``autograd_viz/nan/forward/births.py``).

A birth whose values never reach the loss, a gradient, a parameter or the
model's output (T5's ``log(0)`` cast to an integer) must not stop a healthy
program; one that does reach them stops it there, the error naming where it
was born, and the traceback ending at the program's own line.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz import cli  # noqa: E402
from autograd_viz.nan.forward.checks import NonFiniteError  # noqa: E402
from autograd_viz.nan.watch import watch_nan  # noqa: E402
from tests.viz.nan.test_nan_lineage import T5_LIKE  # noqa: E402


def _stopped(step: Callable[[], None]) -> NonFiniteError:
    with pytest.raises(NonFiniteError) as caught, watch_nan(first=True):
        step()
    return caught.value


def _last_frame(exc: BaseException) -> traceback.FrameSummary:
    frames = traceback.extract_tb(exc.__traceback__)
    assert not [f for f in frames if "autograd_viz" in f.filename], frames
    return frames[-1]


def test_a_contained_birth_does_not_stop_a_t5_like_step(t5_like_script: Path) -> None:
    """The bucket's ``log(0)`` is cast away on every step: the script runs to its end."""
    assert cli.main(["nan", "--first", str(t5_like_script)]) == 0


def test_a_real_birth_stops_the_t5_like_step_and_heads_the_report(
    t5_like_script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["nan", "--first", str(t5_like_script), "--bug"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("NaN born in the forward pass at SqrtBackward0")
    assert "  module        block.2.ff\n" in out


def test_stopped_where_the_loss_is_reached_naming_the_birth() -> None:
    v = torch.tensor([0.0, 1.0, 2.0])
    w = torch.ones(3, requires_grad=True)

    def step() -> None:
        y = v.log() * (v > 0).float() * w  # -inf * 0 = NaN
        y.sum().backward()

    exc = _stopped(step)
    frame = _last_frame(exc)
    assert frame.name == "step" and frame.line == "y.sum().backward()"
    born = _line_of(step, "y = v.log()")
    assert str(exc) == (
        "Op 'aten.log.default' produced inf values in its 0th forward output, born at "
        f"{__file__}:{born} in step; its values reached the loss."
    )
    assert w.grad is None  # stopped before the backward ran


def test_stopped_where_a_parameter_is_written() -> None:
    w = torch.nn.Parameter(torch.ones(3))
    v = torch.tensor([0.0, 1.0, 2.0])

    def step() -> None:
        h = v.log()
        with torch.no_grad():
            w.add_(h)

    exc = _stopped(step)
    assert _last_frame(exc).line == "w.add_(h)"
    assert f"born at {__file__}:{_line_of(step, 'h = v.log()')} in step" in str(exc)
    assert str(exc).endswith("its values reached a parameter.")


def test_stopped_where_the_model_returns_it() -> None:
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x: Any) -> Any:
            return self.linear(x).sqrt()

    torch.manual_seed(0)
    model = Model()
    with torch.no_grad():
        exc = _stopped(lambda: model(torch.randn(3, 4)))
    message = str(exc)
    assert message.startswith("Op 'aten.sqrt.default' produced nan values")
    assert "(module Model)" in message and message.endswith("reached the model's output.")


def test_stopped_at_the_gradient_a_masked_log_makes_naming_the_log() -> None:
    x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)

    def step() -> None:
        torch.where(x > 0, x.log(), 0.0).sum().backward()

    exc = _stopped(step)
    assert str(exc).startswith("Function 'LogBackward0' returned nan values in its 0th output.")
    assert (
        "It came from the forward: Function 'LogBackward0' produced inf values in its 0th "
        f"forward output (op 'aten.log.default'), born at {__file__}:"
        f"{_line_of(step, 'x.log()')} in step." in str(exc)
    )


def test_contained_values_do_not_stop_and_change_nothing() -> None:
    w = torch.ones(3, requires_grad=True)
    v = torch.tensor([0.0, 1.0, 2.0])
    with watch_nan(first=True) as watch:
        (torch.where(v > 0, v.log(), 0.0) * w).sum().backward()
        (v.log().to(torch.long).clamp(min=0) * w).sum().backward()
        (torch.nan_to_num(v.log()) * w).sum().backward()
    assert not watch.found and watch.report.contained == 3
    assert w.grad is not None and bool(torch.isfinite(w.grad).all())


def _line_of(function: Callable[..., Any], marker: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(function)
    (index,) = [i for i, line in enumerate(lines) if marker in line]
    return start + index


@pytest.fixture
def t5_like_script(tmp_path: Path) -> Path:
    script = tmp_path / "t5_like.py"
    script.write_text(T5_LIKE, encoding="utf-8")
    return script


TWO_OVERFLOWS = """
import torch
x = torch.full((4,), 1e30, requires_grad=True)
v = (x * x).mean()  # overflows; the rsqrt after it makes zeros of it, as an RMSNorm's does
n = x * torch.rsqrt(v)
w = torch.full((4,), 1e20, requires_grad=True)
h = n + w * w  # overflows, and reaches the loss
torch.log_softmax(h, 0).sum().backward()
"""


@pytest.mark.parametrize("first", [False, True])
def test_a_birth_a_passed_on_nan_crosses_in_backward_stays_contained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], first: bool
) -> None:
    """Note [Reached through a gradient]: the NaN every gradient carries comes from the second
    overflow; the rsqrt's node passes it on and says nothing of the first. Both ways of
    running name the same birth, and call the other contained."""
    script = tmp_path / "two.py"
    script.write_text(TWO_OVERFLOWS)
    assert cli.main(["nan", *(["--first"] if first else []), str(script)]) == 1
    out = capsys.readouterr().out
    head = out.splitlines()[:4]
    assert head[0].startswith("Inf born in the forward pass at MulBackward0"), out
    assert "h = n + w * w" in head[3], out
    assert "1 more born (1 contained)" in out
    assert "two.py:4 [contained]" in out
