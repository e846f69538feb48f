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
from tests.viz.sources.summary_numbers import first_difference  # noqa: E402

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
    """Every summary of every event, in order."""
    found = []
    for event in trace.events:
        for key, value in sorted(event.data.items()):
            items = value if isinstance(value, tuple | list) else (value,)
            for item in items:
                if isinstance(item, TensorSummary):
                    found.append((event.kind, key, item))
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
    # Minimum, maximum and counts exact; mean and norm to float64 rounding (Note [Held
    # summaries in tensor ops]).
    assert len(ours) > 200 and first_difference(ours, theirs) is None
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
        alone = float_summary(array, array.shape, "float32", "cpu")
        assert first_difference(summary, alone) is None
        assert summary.mean == pytest.approx(float(np.mean(array.astype(np.float64))), rel=1e-12)


def _held_now(tensors: list[Any], shape: tuple[int, ...] | None = None) -> list[Any]:
    """Hold each tensor (described by ``shape``, or its own), then settle them all."""
    summaries = []
    for tensor in tensors:
        dtype = str(tensor.dtype).removeprefix("torch.")
        meta = held.meta_of((shape or tuple(tensor.shape), dtype, "cpu"))
        assert meta is not None
        summaries.append(held.hold_or_none(tensor, meta, 0))
    assert all(type(s) is DeferredSummary for s in summaries)
    deferred.settle_waiting()
    return summaries


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_held_numbers_of_every_float_dtype_are_numpys_in_float64(dtype: str) -> None:
    rng = np.random.default_rng(5)
    arrays = [(rng.standard_normal((12, 25)) * 10 + i).astype(dtype) for i in range(7)]
    arrays.append(np.full((12, 25), 3.25, dtype))
    for array, summary in zip(
        arrays, _held_now([torch.from_numpy(a) for a in arrays]), strict=True
    ):
        wide = array.astype(np.float64)
        assert summary.dtype == dtype and summary.shape == (12, 25)
        assert summary.min == float(array.min()) and summary.max == float(array.max())
        assert summary.mean == pytest.approx(float(np.mean(wide)), rel=1e-12)
        assert summary.norm == pytest.approx(float(np.sqrt(np.sum(wide * wide))), rel=1e-12)
        assert summary.nan_count == summary.inf_count == 0 and summary.values is None


def test_held_rows_with_nan_or_inf_are_counted_exactly_beside_finite_ones() -> None:
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal(200).astype(np.float32) for _ in range(5)]
    arrays[1][[3, 50, 51]] = np.nan
    arrays[1][7] = np.inf
    arrays[2][[0, 199]] = [np.inf, -np.inf]  # no NaN, but a mean that is one
    arrays[3][9] = -np.inf
    summaries = _held_now([torch.from_numpy(a.copy()) for a in arrays])
    for array, summary in zip(arrays, summaries, strict=True):
        alone = float_summary(array, array.shape, "float32", "cpu")
        assert first_difference(summary, alone) is None
    assert (summaries[1].nan_count, summaries[1].inf_count) == (3, 1)
    assert (summaries[2].nan_count, summaries[2].inf_count) == (0, 2)
    assert summaries[2].min == -np.inf and summaries[2].max == np.inf
    assert (summaries[3].nan_count, summaries[3].inf_count, summaries[3].mean) == (0, 1, -np.inf)
    assert summaries[0].nan_count == summaries[4].nan_count == 0


def test_held_tensors_are_summarized_in_their_own_c_order_whatever_their_layout() -> None:
    rng = np.random.default_rng(7)
    base = [torch.from_numpy(rng.standard_normal((30, 20)).astype(np.float32)) for _ in range(3)]
    transposed = [t.t() for t in base]  # views: strides (1, 20)
    for tensor, summary in zip(transposed, _held_now(transposed), strict=True):
        array = tensor.contiguous().numpy()
        alone = float_summary(array.ravel(), (20, 30), "float32", "cpu")
        assert summary.shape == (20, 30) and first_difference(summary, alone) is None
    # A tensor whose shape is not the one the graph described still has its own numbers.
    odd = [
        torch.arange(100, dtype=torch.float32),
        torch.arange(100, dtype=torch.float32).view(10, 10),
    ]
    first, second = _held_now([t.clone() for t in odd], shape=(10, 10))
    assert first.shape == second.shape == (10, 10)
    assert (
        (first.min, first.max, first.mean) == (second.min, second.max, second.mean) == (0, 99, 49.5)
    )


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


def test_a_held_transpose_of_held_memory_takes_its_numbers_and_a_strided_slice_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(8)
    base = torch.from_numpy(rng.standard_normal((20, 20)).astype(np.float32))
    product = base[:10]  # contiguous: mm's output
    transposed = product.t()  # TBackward0's view of it: the same memory, densely
    columns = base[:, :10]  # the same address and length, other elements
    reduced: list[int] = []
    settle_blocks = held.settle_blocks

    def counting(blocks: Any) -> None:
        reduced.extend(len(rows) for rows, _ in blocks)
        settle_blocks(blocks)

    monkeypatch.setattr(held, "settle_blocks", counting)
    summaries = _held_now([product, transposed, columns])
    assert sorted(reduced) == [1, 1]  # the transpose's memory is reduced once
    for tensor, summary in zip((product, transposed, columns), summaries, strict=True):
        array = tensor.contiguous().numpy()
        alone = float_summary(array.ravel(), array.shape, "float32", "cpu")
        assert summary.shape == array.shape and first_difference(summary, alone) is None
    first, second, third = summaries
    assert (second.min, second.max, second.mean, second.norm) == (
        first.min,
        first.max,
        first.mean,
        first.norm,
    )
    assert third.max == float(columns.max()) and third.mean != first.mean


def test_held_permuted_tensors_are_summarized_in_their_c_order() -> None:
    """Permuted 4-D tensors (channels last) stack into a block that is not C-contiguous."""
    rng = np.random.default_rng(9)
    permuted = [
        torch.from_numpy(rng.standard_normal((2, 3, 4, 5)).astype(np.float32)).permute(0, 3, 1, 2)
        for _ in range(3)
    ]
    assert torch.stack(permuted).is_contiguous() is False  # what made the block unreadable
    for tensor, summary in zip(permuted, _held_now(permuted), strict=True):
        alone = float_summary(tensor.contiguous().numpy().ravel(), (2, 5, 3, 4), "float32", "cpu")
        assert summary.shape == (2, 5, 3, 4) and first_difference(summary, alone) is None


def test_a_failure_settling_held_blocks_loses_no_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(10)
    arrays = [rng.standard_normal((8, 9)).astype(np.float32) for _ in range(4)]
    arrays[2][1, 1] = np.nan

    def failing(blocks: Any) -> None:
        raise RuntimeError("no block today")

    monkeypatch.setattr(held, "settle_blocks", failing)
    with pytest.warns(RuntimeWarning, match="no block today.*summarizing each alone"):
        summaries = _held_now([torch.from_numpy(a.copy()) for a in arrays])
    for array, summary in zip(arrays, summaries, strict=True):
        assert type(summary) is TensorSummary
        alone = float_summary(array.ravel(), (8, 9), "float32", "cpu")
        assert first_difference(summary, alone) is None
    assert summaries[2].nan_count == 1


def test_a_held_summary_whose_tensor_was_dropped_reads_without_numbers() -> None:
    summary = held.hold(torch.arange(100, dtype=torch.float32), (100,), "float32", "cpu")
    held._held.clear()  # as if settling had lost it
    assert summary.min is None and summary.norm is None and summary.shape == (100,)
    assert type(summary) is TensorSummary


class _ChannelsLastBlock(torch.nn.Module):
    """A ConvNeXt block's layout: a depthwise conv, norm and MLP in channels last, then a
    layer scale, which saves the MLP's output permuted back (not C-contiguous)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.norm = torch.nn.LayerNorm(8)
        self.fc = torch.nn.Linear(8, 8)
        self.gamma = torch.nn.Parameter(torch.full((8,), 0.5))

    def forward(self, x: Any) -> Any:
        y = self.conv(x).permute(0, 2, 3, 1)
        return x + self.fc(self.norm(y)).permute(0, 3, 1, 2).mul(self.gamma.reshape(1, -1, 1, 1))


def test_a_channels_last_model_is_recorded_and_saved_with_every_number(tmp_path: Any) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        _ChannelsLastBlock(), _ChannelsLastBlock(), torch.nn.Conv2d(8, 4, 1)
    )
    x = torch.randn(2, 8, 3, 3)
    model(x).pow(2).sum().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say: every summary settles
        with autograd_viz.record() as trace:
            model(x).pow(2).sum().backward()
    for grad, p in zip(plain, model.parameters(), strict=True):
        assert torch.equal(grad, p.grad)
    (task,) = trace.graph_tasks.values()
    saved_summaries = [s for node in task.nodes.values() for s in node.saved or ()]
    numbered = [s for s in saved_summaries if isinstance(s, TensorSummary) and s.numel > 64]
    assert numbered and all(s.min is not None for s in numbered)
    path = tmp_path / "t.jsonl"
    trace.save(path)
    assert len(autograd_viz.Trace.load(path).events) == len(trace.events)
