"""In-place ops through views rebase the base's history (PyTorch's CopySlices)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine


def _select_add(lib: Any, x: Any, w: Any) -> Any:
    h = x * 2.0
    h[0] += 5.0
    h[1:].mul_(w[1:])
    return h


def _transpose_add(lib: Any, x: Any, w: Any) -> Any:
    h = (x * 1.0).reshape(2, 3)
    h.T.add_(w.reshape(3, 2))
    return h * h


def _slice_of_slice_div(lib: Any, x: Any, w: Any) -> Any:
    h = x * 3.0
    inner = h[1:][::2]
    inner.div_(w[:3] * w[:3] + 3.0)
    return h.sum() * h


CASES: dict[str, Callable[[Any, Any, Any], Any]] = {
    "select_then_slice": _select_add,
    "transpose": _transpose_add,
    "slice_of_slice": _slice_of_slice_div,
}


@pytest.mark.parametrize("name", list(CASES))
def test_inplace_through_views_matches_finite_differences(name: str) -> None:
    case = CASES[name]
    rng = np.random.default_rng(0)
    x = engine.tensor(rng.standard_normal(6), dtype=engine.float64, requires_grad=True)
    w = engine.tensor(rng.standard_normal(6), dtype=engine.float64, requires_grad=True)
    assert engine.gradcheck(lambda a, b: case(engine, a, b), (x, w))


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(CASES))
def test_inplace_through_views_matches_pytorch(torch: Any, name: str) -> None:
    case = CASES[name]
    data = np.random.default_rng(1).standard_normal((2, 6))
    ours = [engine.tensor(d, requires_grad=True) for d in data]
    theirs = [torch.tensor(d, dtype=torch.float32, requires_grad=True) for d in data]
    out = case(engine, *ours)
    ref = case(torch, *theirs)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5)
    out.sum().backward()
    ref.sum().backward()
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_the_base_gets_copyslices_and_the_view_a_fresh_history() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = x * 2.0
    old = h.grad_fn
    v = h[1:]
    v.add_(1.0)
    assert h.grad_fn.name() == "CopySlices"
    assert h.grad_fn.next_functions[0][0] is old
    assert v.grad_fn is not None and v.grad_fn is not old
    assert h.tolist() == [2.0, 5.0, 7.0] and h._version == v._version == 1


@pytest.mark.oracle
def test_view_of_a_leaf_and_overlapping_views_are_refused_like_pytorch(torch: Any) -> None:
    for lib in (engine, torch):
        leaf = lib.tensor([1.0, 2.0], requires_grad=True)
        with pytest.raises(RuntimeError) as info:
            leaf[0].add_(1.0)
        assert str(info.value) == (
            "a view of a leaf Variable that requires grad is being used in an in-place operation."
        )
        wide = (lib.tensor([1.0], requires_grad=True) * 1.0).expand(3)
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            wide.mul_(2.0)


def test_inplace_on_a_view_without_autograd_just_writes() -> None:
    base = engine.tensor([1.0, 2.0, 3.0])
    base[1:].mul_(10.0)
    assert base.tolist() == [1.0, 20.0, 30.0] and base.grad_fn is None


def test_saved_value_changed_through_a_view_still_raises() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    y = h.exp()
    h[0].mul_(3.0)
    (h.sum() + y.sum()).backward()  # exp saved its output, not h: fine
    z = h * h
    h[1].add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
