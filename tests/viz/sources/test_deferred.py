"""Deferred summaries: the same numbers whenever, and beside whichever others, they settle."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
import threading

import numpy as np
import pytest

from autograd_viz.sources import deferred
from autograd_viz.sources.deferred import DeferredSummary, defer, float_summary, settle_waiting
from autograd_viz.sources.summaries import summarize
from autograd_viz.trace.summary import TensorSummary

LENGTHS = [65, 96, 127, 128, 129, 256, 1000, 3072, 8191, 8192, 8193, 16383]


def _arrays(length: int, count: int, dtype: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    scales = rng.uniform(1e-3, 1e3, size=count)
    return [(rng.standard_normal(length) * s).astype(dtype) for s in scales]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("length", LENGTHS)
def test_a_row_settled_with_others_is_the_row_settled_alone(length: int, dtype: str) -> None:
    arrays = _arrays(length, 7, dtype, length)
    batch = [defer(a, (length,), dtype, "cpu") for a in arrays]
    settle_waiting()
    for array, summary in zip(arrays, batch, strict=True):
        assert type(summary) is TensorSummary
        alone = float_summary(array, (length,), dtype, "cpu")
        assert repr(summary) == repr(alone)  # bit for bit (repr tells -0.0 from 0.0)
        wide = array.astype(np.float64)
        assert summary.min == float(array.min()) and summary.max == float(array.max())
        assert summary.mean == pytest.approx(float(wide.mean()), rel=1e-12, abs=1e-300)
        assert summary.norm == pytest.approx(math.sqrt(float(wide @ wide)), rel=1e-12)
        assert summary.values is None and summary.nan_count == summary.inf_count == 0


def test_reading_before_the_block_settles_gives_the_same_numbers() -> None:
    arrays = _arrays(300, 5, "float32", 1)
    early = [defer(a, (3, 100), "float32", "cpu") for a in arrays]
    assert all(type(s) is DeferredSummary for s in early)
    first = early[2].mean  # settles that one alone
    assert type(early[2]) is TensorSummary and type(early[1]) is DeferredSummary
    settle_waiting()
    assert early[2].mean == first
    for array, summary in zip(arrays, early, strict=True):
        assert summary == float_summary(array, (3, 100), "float32", "cpu")
        assert summary.shape == (3, 100) and summary.dtype == "float32"


def test_the_values_are_copied_when_deferred() -> None:
    array = np.arange(100, dtype=np.float32)
    summary = defer(array, (100,), "float32", "cpu")
    array[:] = -1.0  # the engine reuses the buffer (an in-place add, a stolen gradient)
    assert summary.min == 0.0 and summary.max == 99.0


def test_a_transposed_array_is_summed_in_the_order_of_its_shape() -> None:
    block = np.random.default_rng(3).standard_normal((40, 30)).astype(np.float32)
    transposed = block.T  # not contiguous: copied in C order of the transpose
    summary = defer(transposed, (30, 40), "float32", "cpu")
    assert summary == float_summary(
        np.ascontiguousarray(transposed).ravel(), (30, 40), "float32", "cpu"
    )


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "overflow"])
def test_nan_and_inf_are_counted_as_the_engine_counts_them(bad: str) -> None:
    array = np.linspace(-1, 1, 200, dtype=np.float32)
    if bad == "overflow":  # finite values whose float64 sum is not finite
        array = np.full(200, np.finfo(np.float64).max / 10, dtype=np.float64)
    else:
        array[[3, 50]] = float(bad)
    summary = defer(array, (200,), str(array.dtype), "cpu")
    settle_waiting()
    engine = summarize(array, "cpu")
    assert (summary.nan_count, summary.inf_count) == (engine.nan_count, engine.inf_count)
    for name in ("min", "max", "mean", "norm"):
        ours, theirs = getattr(summary, name), getattr(engine, name)
        assert ours == theirs or (math.isnan(ours) and math.isnan(theirs))


def test_blocks_are_reused_without_mixing_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deferred, "BLOCK_BYTES", 4 * 100 * 3)  # three rows a block
    settle_waiting()
    deferred._BLOCKS.clear()
    arrays = _arrays(100, 10, "float32", 5)
    made = [defer(a, (100,), "float32", "cpu") for a in arrays]  # fills the block three times
    settle_waiting()
    for array, summary in zip(arrays, made, strict=True):
        assert summary == float_summary(array, (100,), "float32", "cpu")


def test_too_many_lengths_settle_and_drop_the_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deferred, "BLOCKS", 3)
    settle_waiting()
    deferred._BLOCKS.clear()
    made = [
        (a, defer(a, a.shape, "float32", "cpu"))
        for a in (np.ones(n, np.float32) for n in range(70, 80))
    ]
    assert len(deferred._BLOCKS) <= 3
    assert [s.mean for _, s in made] == [1.0] * 10


def test_a_deferred_summary_behaves_as_a_tensor_summary() -> None:
    array = np.linspace(0, 1, 128, dtype=np.float32)
    settled = float_summary(array, (128,), "float32", "cpu")
    assert defer(array, (128,), "float32", "cpu") == settled
    assert settled == defer(array, (128,), "float32", "cpu")  # the reflected comparison
    assert hash(defer(array, (128,), "float32", "cpu")) == hash(settled)
    assert repr(defer(array, (128,), "float32", "cpu")) == repr(settled)
    assert pickle.loads(pickle.dumps(defer(array, (128,), "float32", "cpu"))) == settled
    assert copy.deepcopy(defer(array, (128,), "float32", "cpu")) == settled
    renamed = dataclasses.replace(defer(array, (128,), "float32", "cpu"), dtype="bfloat16")
    assert renamed.dtype == "bfloat16" and renamed.mean == settled.mean
    assert dataclasses.asdict(defer(array, (128,), "float32", "cpu")) == dataclasses.asdict(settled)
    with pytest.raises(dataclasses.FrozenInstanceError):
        defer(array, (128,), "float32", "cpu").mean = 0.0  # type: ignore[misc]


def test_threads_that_defer_read_and_settle_at_once_get_their_own_numbers() -> None:
    errors: list[str] = []

    def work(seed: int) -> None:
        arrays = _arrays(96, 200, "float32", seed)
        made = []
        for i, array in enumerate(arrays):
            made.append(defer(array, (96,), "float32", "cpu"))
            if i % 7 == 0:
                settle_waiting()
            if i % 5 == 0:
                _ = made[i // 2].norm
        for array, summary in zip(arrays, made, strict=True):
            if summary != float_summary(array, (96,), "float32", "cpu"):
                errors.append(f"thread {seed}: wrong numbers")

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_a_recorded_pytorch_backward_leaves_no_summary_waiting() -> None:
    torch = pytest.importorskip("torch")
    import autograd_viz

    torch.manual_seed(0)
    cell = torch.nn.GRUCell(16, 16)
    h = torch.zeros(8, 16)
    for x in torch.randn(3, 8, 16):
        h = cell(x, h)
    with autograd_viz.record() as trace:
        h.pow(2).sum().backward()
    found = [
        value
        for event in trace.events
        for field in event.data.values()
        for value in (field if isinstance(field, tuple) else (field,))
        if isinstance(value, TensorSummary)
    ]
    assert len(found) > 50
    assert all(type(value) is TensorSummary for value in found)  # settled when the call ended
    # The numbers are those of the gradients PyTorch computed.
    leaves = {leaf.name: leaf.grad for leaf in trace.state_at(len(trace)).leaves.values()}
    assert leaves["weight_hh"] == float_summary(
        cell.weight_hh.grad.numpy().ravel(), (48, 16), "float32", "cpu"
    )
