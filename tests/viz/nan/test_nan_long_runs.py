"""``nan`` over a run of any length holds the same few things at its end as early on."""

from __future__ import annotations

import pytest

from autograd_viz.nan.watch import watch_nan

torch = pytest.importorskip("torch")


def _held_after(steps: int) -> tuple[int, int, int]:
    """Check a PyTorch loop that makes a new Inf reaching the loss at every step; what the
    watch holds at the end: events kept, findings and births held, and calls reported."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(3, 4)
    with watch_nan(keep_trace=False) as watch:
        for _ in range(steps):
            model.zero_grad()
            # log(0) is -inf, born here every step, and reaches the loss each time.
            loss = model(x).sum() + torch.log(torch.zeros(()))
            loss.backward()
    scan = watch._scan
    assert scan is not None
    report = watch.report
    assert report.first is not None and "log" in (report.first.op or "")
    return len(watch.trace.events), scan.held, report.backward_calls


def test_what_a_long_run_holds_does_not_grow_with_its_calls() -> None:
    # Both runs go past the 100 findings a report lists in full (KEPT_FINDINGS).
    events_short, held_short, calls_short = _held_after(105)
    events_long, held_long, calls_long = _held_after(210)
    assert (calls_short, calls_long) == (105, 210)
    assert events_short == events_long == 0, "no call is kept once read"
    # The findings listed and the births asked about are capped (keep, EARLY, WAITING):
    # twice the calls holds no more.
    assert held_long <= held_short, (held_short, held_long)
