"""Held gradients: summarized together when the call ends, with the numbers each has alone."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import autograd_viz  # noqa: E402
from autograd_viz.sources import deferred  # noqa: E402
from autograd_viz.sources.deferred import DeferredSummary, float_summary  # noqa: E402
from autograd_viz.sources.pytorch import held, saved, watch  # noqa: E402
from autograd_viz.trace.summary import TensorSummary  # noqa: E402

pytestmark = pytest.mark.oracle


def _gru() -> tuple[Any, Any]:
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(16, 16)
    xs = torch.randn(6, 8, 16)

    def build() -> Any:
        cell.zero_grad(set_to_none=True)
        h = torch.zeros(8, 16)
        for x in xs:
            h = cell(x, h)
        return h.pow(2).sum()

    return cell, build


def _summaries(trace: Any) -> list[tuple[str, str, Any]]:
    """Every summary of every event, as text (repr tells -0.0 from 0.0), in order."""
    found = []
    for event in trace.events:
        for key, value in sorted(event.data.items()):
            items = value if isinstance(value, tuple | list) else (value,)
            for item in items:
                if isinstance(item, TensorSummary):
                    found.append((event.kind, key, repr(item)))
    return found


@pytest.fixture
def holding_off(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Turn holding off: every gradient summarized as it comes, as before holding."""

    def off() -> None:
        monkeypatch.setattr(watch, "holds_inputs", lambda node, fan_in: ())
        monkeypatch.setattr(watch, "holds_outputs", lambda node, fan_in: ())
        summarize = saved.summarize_tensor
        monkeypatch.setattr(
            saved,
            "summarize_tensor",
            lambda tensor, device, max_values=0, hold=False: summarize(tensor, device, max_values),
        )

    return off


def test_a_trace_with_held_gradients_has_the_numbers_of_one_without(holding_off: Any) -> None:
    cell, build = _gru()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with autograd_viz.record() as with_holding:
            build().backward()
        grads = [p.grad.clone() for p in cell.parameters()]
        holding_off()
        with autograd_viz.record() as without:
            build().backward()
    ours, theirs = _summaries(with_holding), _summaries(without)
    assert len(ours) > 200 and ours == theirs
    for grad, p in zip(grads, cell.parameters(), strict=True):
        assert torch.equal(grad, p.grad)  # and the gradients are the same, bit for bit


def test_most_gradients_of_a_recurrent_net_are_held(monkeypatch: pytest.MonkeyPatch) -> None:
    _, build = _gru()
    counted = {"held": 0}
    hold = held.hold_or_none

    def counting(tensor: Any, meta: Any, max_values: int) -> Any:
        summary = hold(tensor, meta, max_values)
        counted["held"] += summary is not None
        return summary

    monkeypatch.setattr("autograd_viz.sources.pytorch.emitter.hold_or_none", counting)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with autograd_viz.record() as trace:
            build().backward()
    starts = sum(1 for e in trace.events if e.kind == "node_start")
    assert counted["held"] > starts  # outputs and inputs of most nodes
    assert not held._held  # all settled when the call ended


def _stolen(watched: bool) -> bool:
    """Whether ``w.grad`` is the very tensor ``TanhBackward0`` made."""
    torch.manual_seed(0)
    w = torch.randn(20, 30, requires_grad=True)
    loss = (w.tanh() * 3.0).sum()
    made: list[int] = []
    tanh = loss.grad_fn.next_functions[0][0].next_functions[0][0]
    assert tanh.name() == "TanhBackward0"
    tanh.register_hook(lambda grads_in, grads_out: made.append(grads_in[0].data_ptr()))
    if watched:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with autograd_viz.record():
                loss.backward()
    else:
        loss.backward()
    assert w.grad is not None
    return w.grad.data_ptr() == made[0]


def test_gradients_are_still_stolen_by_accumulate_grad() -> None:
    """A gradient held by the recorder would make ``.grad`` a copy: none that becomes one is."""
    assert _stolen(watched=False)  # what PyTorch does: tanh's gradient becomes .grad
    assert _stolen(watched=True)


def test_a_gradient_changed_in_place_after_it_was_held_keeps_no_numbers() -> None:
    tensor = torch.arange(100, dtype=torch.float32)
    meta = held.meta_of(((100,), "float32", "cpu"))
    assert meta is not None
    summary = held.hold_or_none(tensor, meta, 0)
    assert type(summary) is DeferredSummary
    tensor.mul_(2)  # bumps the version counter: what was summarized is gone
    deferred.settle_waiting()
    assert type(summary) is TensorSummary
    assert summary.shape == (100,) and summary.min is None and summary.norm is None


def test_held_numbers_are_each_tensors_alone_and_the_cap_settles_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(n).astype(np.float32) for n in (65, 300, 300, 3000, 65)]
    tensors = [torch.from_numpy(a.copy()) for a in arrays]
    monkeypatch.setattr(held, "HOLD_BYTES", 2000)  # the 3000-float tensor passes the cap
    summaries = []
    for tensor in tensors:
        meta = held.meta_of(((tensor.numel(),), "float32", "cpu"))
        assert meta is not None
        summaries.append(held.hold_or_none(tensor, meta, 0))
    assert type(summaries[3]) is TensorSummary  # settled at once, with the ones before
    assert type(summaries[4]) is DeferredSummary
    assert summaries[1] is not summaries[2]
    first = summaries[4].mean  # reading one settles it
    deferred.settle_waiting()
    assert summaries[4].mean == first
    for array, summary in zip(arrays, summaries, strict=True):
        assert repr(summary) == repr(float_summary(array, array.shape, "float32", "cpu"))


def test_only_plain_cpu_floats_of_middle_size_are_held() -> None:
    assert held.meta_of(((8, 8), "float32", "cpu")) is None  # 64: summarized at once
    assert held.meta_of(((1 << 14,), "float32", "cpu")) is None  # large: where it lives
    assert held.meta_of(((100,), "int64", "cpu")) is None
    assert held.meta_of(((100,), "bfloat16", "cpu")) is None
    assert held.meta_of(((100,), "float32", "cuda:0")) is None
    meta = held.meta_of(((10, 10), "float64", "cpu"))
    assert meta == ((10, 10), "float64", "cpu", 100, 800)
    assert held.hold_or_none(torch.ones(10, 10, dtype=torch.float64), meta, 100) is None
    sparse = torch.eye(10, dtype=torch.float64).to_sparse()
    assert held.hold_or_none(sparse, meta, 0) is None
