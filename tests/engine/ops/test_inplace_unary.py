"""In-place unary ops (``exp_`` and friends), ``reciprocal`` and ``masked_fill``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import engine

IN_PLACE = [
    "exp_",
    "log_",
    "sqrt_",
    "abs_",
    "sin_",
    "cos_",
    "tanh_",
    "sigmoid_",
    "relu_",
    "reciprocal_",
    "neg_",
]
SAVES_OUTPUT = {"exp_", "sqrt_", "tanh_", "sigmoid_", "relu_", "reciprocal_"}
VALUES = [0.5, 2.0, 1.5]


def _leaf() -> engine.Tensor:
    return engine.tensor(VALUES, dtype=engine.float64, requires_grad=True)


@pytest.mark.parametrize("name", IN_PLACE)
def test_in_place_matches_out_of_place_and_finite_differences(name: str) -> None:
    def in_place(x: engine.Tensor) -> engine.Tensor:
        return getattr(x * 1.0, name)()  # type: ignore[no-any-return]

    assert engine.gradcheck(in_place, (_leaf(),))
    assert engine.gradgradcheck(in_place, (_leaf(),))
    y = _leaf() * 1.0
    out = getattr(y, name)()
    assert out is y
    assert y.grad_fn.name() == getattr(_leaf(), name[:-1])().grad_fn.name()
    np.testing.assert_allclose(y.detach().numpy(), getattr(_leaf(), name[:-1])().detach().numpy())
    assert y._version == 1


@pytest.mark.parametrize("name", IN_PLACE)
def test_in_place_on_a_leaf_that_requires_grad_is_refused(name: str) -> None:
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used"):
        getattr(_leaf(), name)()


@pytest.mark.parametrize("name", IN_PLACE)
def test_changing_the_result_again_fails_backward_only_where_the_output_was_saved(
    name: str,
) -> None:
    y = _leaf() * 1.0
    getattr(y, name)()
    y.add_(1.0)
    if name in SAVES_OUTPUT:
        with pytest.raises(RuntimeError, match="is at version 2; expected version 1 instead"):
            y.sum().backward()
    else:
        y.sum().backward()


@pytest.mark.oracle
@pytest.mark.parametrize("name", IN_PLACE)
def test_in_place_errors_and_gradients_are_pytorchs(torch: Any, name: str) -> None:
    def run(m: Any) -> tuple[str | None, Any]:
        x = m.tensor(VALUES, dtype=m.float64, requires_grad=True)
        y = x * 1.0
        getattr(y, name)()
        y.add_(1.0)
        try:
            y.sum().backward()
        except RuntimeError as exc:
            return str(exc).split(" Hint:")[0].replace("torch.", "engine."), None
        return None, x.grad.numpy()

    (ours, our_grad), (theirs, their_grad) = run(engine), run(torch)
    assert ours == theirs
    if our_grad is not None:
        np.testing.assert_allclose(our_grad, their_grad)


def test_reciprocal_gradcheck_and_number_over_tensor_is_reciprocal_then_mul() -> None:
    assert engine.gradcheck(engine.reciprocal, (_leaf(),))
    assert engine.gradcheck(lambda x: 3.0 / x, (_leaf(),))
    y = 1.0 / _leaf()
    assert y.grad_fn.name() == "MulBackward0"
    first, second = y.grad_fn.next_functions
    assert first[0].name() == "ReciprocalBackward0"
    assert second[0] is None


def test_masked_fill_gradcheck_and_in_place_form() -> None:
    mask = engine.tensor([True, False, True])
    assert engine.gradcheck(lambda x: x.masked_fill(mask, 0.0), (_leaf(),))
    y = _leaf() * 1.0
    y.masked_fill_(mask, -1.0)
    np.testing.assert_allclose(y.detach().numpy(), [-1.0, 2.0, -1.0])
    assert y.grad_fn.name() == "MaskedFillBackward0"
    with pytest.raises(
        RuntimeError, match="only supports boolean masks, but got mask with dtype Long"
    ):
        _leaf().masked_fill(engine.tensor([1, 0, 1]), 0.0)
