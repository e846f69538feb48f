"""A leaf's first gradient: stolen when nobody else holds it, copied otherwise.

Note [Stealing the first gradient]: ``.grad`` is later added into in place, so
it must never share memory with a tensor the user (or another leaf) can reach.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import engine
from engine.tensor import Tensor


def _leaf(*values: float) -> Tensor:
    return engine.tensor(list(values), dtype=engine.float64, requires_grad=True)


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> list[Tensor]:
    """The gradients AccumulateGrad copied instead of stealing."""
    copied: list[Tensor] = []
    original = Tensor.detach_copy_for_grad

    def counted(self: Tensor) -> Tensor:
        copied.append(self)
        return original(self)

    monkeypatch.setattr(Tensor, "detach_copy_for_grad", counted)
    return copied


def test_a_gradient_nobody_else_holds_is_stolen(copies: list[Tensor]) -> None:
    a = engine.tensor(np.arange(6.0).reshape(2, 3))
    w = engine.tensor(np.ones((3, 2)), requires_grad=True)
    b = _leaf(0.5, -0.5)
    ((a @ w + b).tanh() * 2.0).sum().backward()
    assert copies == []
    expected = a.numpy().T @ (2.0 * (1 - np.tanh(a.numpy() @ np.ones((3, 2)) + [0.5, -0.5]) ** 2))
    np.testing.assert_allclose(w.grad.numpy(), expected)
    assert w.grad.numpy().flags.writeable and w.grad.numpy().flags.owndata


def test_the_same_gradient_routed_to_two_leaves_is_not_shared() -> None:
    x, y = _leaf(1.0, 2.0), _leaf(3.0, 4.0)
    (x + y).sum().backward()  # AddBackward0 hands one tensor to both leaves
    assert not np.shares_memory(x.grad.numpy(), y.grad.numpy())
    (x * 3.0).sum().backward()  # added into x.grad in place
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0])
    np.testing.assert_array_equal(y.grad.numpy(), [1.0, 1.0])


def test_a_gradient_a_hook_kept_is_copied() -> None:
    x = _leaf(1.0, 2.0)
    kept: list[Tensor] = []
    x.register_hook(kept.append)
    (x * 2.0).sum().backward()
    assert not np.shares_memory(kept[0].numpy(), x.grad.numpy())
    (x * 2.0).sum().backward()
    np.testing.assert_array_equal(kept[0].numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0])


def test_a_tensor_a_hook_returns_from_outside_is_copied() -> None:
    x = _leaf(1.0, 2.0)
    replacement = engine.tensor([10.0, 20.0], dtype=engine.float64)
    x.register_hook(lambda g: replacement)
    (x * 2.0).sum().backward()
    (x * 2.0).sum().backward()
    np.testing.assert_array_equal(replacement.numpy(), [10.0, 20.0])
    np.testing.assert_array_equal(x.grad.numpy(), [20.0, 40.0])


def test_a_gradient_given_to_backward_is_copied() -> None:
    x = _leaf(1.0, 2.0)
    given = engine.tensor([5.0, 6.0], dtype=engine.float64)
    x.backward(given)
    x.backward(given)
    np.testing.assert_array_equal(given.numpy(), [5.0, 6.0])
    np.testing.assert_array_equal(x.grad.numpy(), [10.0, 12.0])


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda a, b: engine.cat([a, b]).sum(), id="cat-slices"),
        pytest.param(lambda a, b: (a.sum() + b.sum()) * 1.0, id="broadcast-views"),
        pytest.param(lambda a, b: engine.stack([a, b]).sum(), id="stack-rows"),
    ],
)
def test_gradients_that_are_views_are_copied_and_stay_writeable(build: Any) -> None:
    a, b = _leaf(1.0, 2.0), _leaf(3.0, 4.0)
    build(a, b).backward()
    assert not np.shares_memory(a.grad.numpy(), b.grad.numpy())
    build(a, b).backward()  # in place into both
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(b.grad.numpy(), [2.0, 2.0])


def test_create_graph_keeps_the_gradient_graph(copies: list[Tensor]) -> None:
    x = _leaf(1.0, 2.0)
    (x * x).sum().backward(create_graph=True)
    assert x.grad.grad_fn is not None
    x.grad.sum().backward()
    np.testing.assert_array_equal(x.grad.detach().numpy(), [4.0, 6.0])


def test_stolen_gradients_match_pytorch(torch: Any) -> None:
    def run(lib: Any) -> list[np.ndarray]:
        x = lib.tensor([0.5, -1.0, 2.0], dtype=lib.float64, requires_grad=True)
        w = lib.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=lib.float64, requires_grad=True)
        for _ in range(2):
            ((x @ w).tanh() * (x @ w)).sum().backward()
        return [x.grad.detach().numpy().copy(), w.grad.detach().numpy().copy()]

    for ours, theirs in zip(run(engine), run(torch), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)
