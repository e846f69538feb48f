"""Tensor statistics taken of the engine's lazy summaries (``autograd_viz.sources.summaries``)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest

import engine
from autograd_viz.sources import summaries
from autograd_viz.sources.summaries import resolve, resolve_summaries, summarize
from autograd_viz.trace.summary import TensorSummary, new_summary
from engine import events
from engine.events import LazySummary


def test_a_lazy_summary_resolves_while_its_array_lives() -> None:
    array = np.array([1.0, np.nan, np.inf, -2.0])
    lazy = LazySummary(array, "cpu")
    ref = weakref.ref(array)
    del array
    gc.collect()
    assert ref() is None
    gone = resolve(lazy)
    assert gone.shape == (4,) and gone.min is None
    live = np.array([1.0, np.nan, np.inf, -2.0])
    s = resolve(LazySummary(live, "cpu"), max_values=8)
    assert s.nan_count == 1 and s.inf_count == 1 and s.values is not None and len(s.values) == 4
    assert summarize(np.zeros(0), "cpu").norm == 0.0


@pytest.mark.parametrize(
    "values",
    [
        [1.0, -2.5, 3.25],
        [np.nan, 1.0],
        [np.inf, 1.0],
        [np.inf, -np.inf],
        [1e308, 1e308],
        [True, False, True],
        [3, -7],
        list(np.linspace(-1.0, 1.0, 64)),
        list(np.linspace(-1.0, 1.0, 65)),
        # Larger than the small path: finite, then each way the finite pass can fail.
        list(np.linspace(-3.0, 5.0, 1000)),
        [*np.linspace(-3.0, 5.0, 999), np.nan],
        [np.inf, *np.linspace(-3.0, 5.0, 999)],
        [np.inf, -np.inf, *np.linspace(-3.0, 5.0, 998)],
        [1e308] * 100,  # finite float64 elements whose sum overflows
    ],
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, None])
def test_summaries_of_small_and_large_arrays_agree_with_numpy(
    values: list[Any], dtype: Any
) -> None:
    with np.errstate(over="ignore"):  # 1e308 as float32 is inf, on purpose
        array = np.array(values, dtype=dtype) if dtype is not None else np.array(values)
    got = summarize(array, "cpu", max_values=100)
    as_float = array.astype(np.float64)
    with np.errstate(all="ignore"):
        want = [
            np.min(as_float),
            np.max(as_float),
            np.mean(as_float),
            np.sqrt(np.sum(as_float * as_float)),
        ]
    np.testing.assert_allclose([got.min, got.max, got.mean, got.norm], want, rtol=1e-12, atol=1e-12)
    assert got.nan_count == int(np.isnan(as_float).sum())
    assert got.inf_count == int(np.isinf(as_float).sum())
    if array.size > 100:
        assert got.values is None
    else:
        assert got.values is not None
        np.testing.assert_array_equal(got.values, as_float)
    assert got.dtype == str(array.dtype) and got.shape == array.shape


def test_a_remembered_summary_follows_an_in_place_change() -> None:
    # Note [Remembered summaries]: the key is the bytes, so a change is never missed.
    array = np.array([1.0, -2.0])
    first = summarize(array, "cpu", max_values=8)
    assert summarize(array, "cpu", max_values=8) is first
    array[1] = 5.0
    changed = summarize(array, "cpu", max_values=8)
    assert changed.values == (1.0, 5.0) and changed.max == 5.0
    array.shape = (2, 1)
    assert summarize(array, "cpu", max_values=8).shape == (2, 1)
    assert summarize(array.astype(np.float32), "cpu", max_values=8).dtype == "float32"
    assert summarize(array, "sim:0", max_values=8).device == "sim:0"
    assert summarize(array, "cpu", max_values=0).values is None


def test_remembered_summaries_stay_bounded() -> None:
    for i in range(3 * summaries._REMEMBER):
        summarize(np.array([float(i)]), "cpu")
    assert 0 < len(summaries._REMEMBERED) <= summaries._REMEMBER


def test_equal_arrays_share_a_summary_and_nan_ones_too() -> None:
    nan = np.array([np.nan, 1.0])
    assert summarize(nan, "cpu") is summarize(nan.copy(), "cpu")
    assert summarize(nan, "cpu").nan_count == 1
    assert summarize(np.array([0.0]), "cpu").min == 0.0
    negative_zero = summarize(np.array([-0.0]), "cpu", max_values=1)
    assert str(negative_zero.values) == "(-0.0,)"  # other bits: not 0.0's summary


def test_summaries_built_through_the_twin_class_equal_the_constructors() -> None:
    # Note [Building frozen records]: the fast builder makes a real, frozen TensorSummary.
    values = ((2, 3), "float32", "sim:0", -1.0, 4.0, 0.5, 7.0, 1, 2, (1.0, 2.0))
    built = new_summary(*values)
    assert type(built) is TensorSummary
    assert built == TensorSummary(*values)
    with pytest.raises(AttributeError):
        built.min = 0.0  # type: ignore[misc]
    assert not hasattr(built, "__dict__")


def test_a_large_strided_array_is_summarized_like_numpy() -> None:
    array = np.arange(-600.0, 600.0, dtype=np.float32).reshape(30, 40).T[::2]
    got = summarize(array, "cpu")
    as_float = array.astype(np.float64)
    assert got.shape == (20, 30) and got.dtype == "float32" and got.finite
    np.testing.assert_allclose(
        [got.min, got.max, got.mean, got.norm],
        [as_float.min(), as_float.max(), as_float.mean(), np.sqrt((as_float**2).sum())],
        rtol=1e-12,
    )


def test_a_gradient_routed_twice_is_summarized_once() -> None:
    # AddBackward0 passes one tensor to both inputs: node_end shows one summary twice, and the
    # accumulate events that route it reuse node_end's (nothing but the engine runs between).
    a = engine.tensor([1.0, 2.0], requires_grad=True)
    b = engine.tensor([3.0, 4.0], requires_grad=True)
    loss = ((a * 2.0) + (b * 3.0)).sum()
    got: list[events.Event] = []
    with events.listen(lambda e: got.append(resolve_summaries(e))):
        loss.backward()
    add_end = next(e for e in got if e.kind == "node_end" and e.node_name == "AddBackward0")
    first, second = add_end.data["outputs"]
    assert first is second and first is not None
    routed = [
        e for e in got if e.kind == "accumulate" and e.data.get("from_node") == add_end.node_id
    ]
    assert len(routed) == 2 and all(e.data["grad"] is first for e in routed)
    assert first.summary.values is None and first.summary.max == 1.0
    np.testing.assert_allclose(a.grad.numpy(), [2.0, 2.0])
    np.testing.assert_allclose(b.grad.numpy(), [3.0, 3.0])
