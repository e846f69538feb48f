"""The checks a NaN report does not need are skipped, and the report stays the same.

Three of them: an op that cannot make a NaN or Inf from finite inputs runs
unchecked while nothing is marked (Note [Ops that make no birth] in
``nan/forward/ops.py``), and a backward check reads the recorder's summary of
a gradient when it already counted its NaN and Inf (Note [A gradient
summarized already] in ``nan/forward/backward.py``), or checked it already as an
earlier node's output (Note [A gradient passed on]). Each test sets up the
case where skipping too much would change the report.
"""

from __future__ import annotations

import math
import sys

import pytest

torch = pytest.importorskip("torch")

from autograd_viz.nan.forward.backward import _known_finite  # noqa: E402
from autograd_viz.nan.forward.ops import BOUNDED_OPS  # noqa: E402
from autograd_viz.nan.watch import watch_nan  # noqa: E402
from autograd_viz.sources.pytorch.summary import LARGE, TorchSummary  # noqa: E402


def test_a_nan_from_outside_passes_through_relu_and_tanh_with_no_birth() -> None:
    x = torch.tensor([math.nan, 1.0, -2.0])  # made before the checks: not born inside
    w = torch.ones(3, requires_grad=True)
    with watch_nan() as watch:
        y = x.relu().tanh().neg().abs()
        (y * w).sum().backward()
    report = watch.report
    assert report.first is not None
    assert all(f.phase == "backward" for f in report.findings), report.findings
    assert report.first.node.name == "MulBackward0"


def test_a_birth_right_after_unchecked_ops_is_found_at_its_own_op() -> None:
    w = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    with watch_nan() as watch:
        y = w.relu().tanh()  # finite: no check needed
        line = sys._getframe().f_lineno + 1
        z = y.log()  # log(0): -inf born here
        z.sum().backward()
    first = watch.report.first
    assert first is not None and first.phase == "forward" and first.born
    assert first.aten_op == "aten.log.default"
    assert first.source is not None and first.source.line == line


def test_a_copy_of_an_intentional_minus_inf_carries_the_intention() -> None:
    # clone is one of the ops that cannot make a birth, but an intentional -inf is marked
    # and the copy must be marked too: the softmax of its fully masked row is the birth.
    scores = torch.randn(2, 3, requires_grad=True)
    mask = torch.tensor([[True, True, True], [False, True, False]])
    with watch_nan() as watch:
        masked = scores.masked_fill(mask, -math.inf)
        weights = masked.clone().softmax(dim=-1)
        weights.nansum().backward()
    first = watch.report.first
    assert first is not None and first.phase == "forward" and first.born
    assert first.aten_op == "aten._softmax.default"
    assert not any(f.aten_op == "aten.clone.default" for f in watch.report.findings)


def test_a_value_born_then_negated_still_reaches_the_loss() -> None:
    # neg cannot make a birth, but a lineage is alive: it must carry it to the loss.
    w = torch.ones(1, requires_grad=True)
    with watch_nan() as watch:
        born = torch.zeros(1).log()  # -inf, born, reaches the loss only through neg
        loss = (born.neg() * w).sum()
        loss.backward()
    report = watch.report
    assert report.first is not None and report.first.aten_op == "aten.log.default"
    assert report.contained == 0


def test_the_unchecked_ops_are_the_ones_named_and_never_the_overflowing_ones() -> None:
    assert "aten.tanh.default" in BOUNDED_OPS and "aten.relu_.default" in BOUNDED_OPS
    for overflowing in ("aten.add.Tensor", "aten.mul.Tensor", "aten.exp.default"):
        assert overflowing not in BOUNDED_OPS
    for cast_or_pick in ("aten._to_copy.default", "aten.cat.default", "aten.round.decimals"):
        assert cast_or_pick not in BOUNDED_OPS


def test_an_ignored_unchecked_op_keeps_its_check() -> None:
    # relu is ignored: its NaN output (from a NaN made outside) is declared intentional, so
    # the +inf an exp makes from it later is born there; with relu unchecked it would not be.
    x = torch.tensor([math.nan, 100.0])
    w = torch.ones(2, requires_grad=True)
    with watch_nan(ignore=["relu"]) as ignored:
        (x.relu().exp() * w).sum().backward()
    with watch_nan() as plain:
        (x.relu().exp() * w).sum().backward()
    ignored_ops = [f.aten_op for f in ignored.report.findings if f.phase == "forward"]
    plain_ops = [f.aten_op for f in plain.report.findings if f.phase == "forward"]
    assert "aten.exp.default" in ignored_ops
    assert "aten.exp.default" not in plain_ops


@pytest.mark.parametrize("size", [8, 512, LARGE])  # summarized small, deferred, large
def test_a_backward_finding_is_the_same_whatever_the_recorder_summarized(size: int) -> None:
    def step() -> None:
        x = torch.zeros(size, requires_grad=True)  # sqrt at 0: an Inf born in backward
        w = torch.linspace(1.0, 2.0, size, requires_grad=True)
        b = torch.ones(size, requires_grad=True)
        # AddBackward0 hands its finite gradient on as it came, checked once (Note [A
        # gradient passed on]); the Inf is SqrtBackward0's.
        (x.sqrt() * w + b).sum().backward()

    found = {}
    for values in ("all", "none"):
        with watch_nan(values=values) as watch:
            step()
        first = watch.report.first
        assert first is not None
        found[values] = (first.phase, first.node.name, first.value, first.output_index)
    assert found["all"] == found["none"] == ("backward", "SqrtBackward0", "inf", 0)


def test_a_summary_counts_as_finite_only_once_read_from_finite_values() -> None:
    big = torch.ones(LARGE)
    summary = TorchSummary(big)
    assert not _known_finite(summary)  # not read yet
    summary.resolve(16)
    assert _known_finite(summary)
    bad = torch.ones(LARGE)
    bad[7] = math.inf
    bad_summary = TorchSummary(bad)
    bad_summary.resolve(16)
    assert not _known_finite(bad_summary)
    middle = TorchSummary(torch.ones(512))
    middle.resolve(16)  # settled later, in a batch: its counts are not known yet
    assert not _known_finite(middle)
    assert not _known_finite(None)
