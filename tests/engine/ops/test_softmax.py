"""softmax and log_softmax: values, stability, gradients to second order, errors."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine
from engine import Tensor

RNG = np.random.default_rng(4)


def leaf(*shape: int) -> Tensor:
    return engine.tensor(RNG.standard_normal(shape), dtype=engine.float64, requires_grad=True)


def weights(*shape: int) -> Tensor:
    return engine.tensor(RNG.standard_normal(shape), dtype=engine.float64)


def reference_softmax(x: np.ndarray, dim: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


FUNCTIONS = {"softmax": engine.softmax, "log_softmax": engine.log_softmax}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize(("shape", "dim"), [((5,), 0), ((3, 4), 1), ((3, 4), 0), ((2, 3, 4), -2)])
def test_gradcheck(name: str, shape: tuple[int, ...], dim: int) -> None:
    fn = FUNCTIONS[name]
    assert engine.gradcheck(lambda x: fn(x, dim), (leaf(*shape),))


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_gradcheck_through_broadcasting(name: str) -> None:
    fn = FUNCTIONS[name]
    assert engine.gradcheck(lambda a, b: fn(a + b, -1), (leaf(3, 1), leaf(4)))


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("dim", [0, 1])
def test_second_order(name: str, dim: int) -> None:
    fn = FUNCTIONS[name]
    assert engine.gradgradcheck(lambda x: fn(x * x, dim), (leaf(3, 4),))


def test_values_and_methods() -> None:
    x = leaf(3, 4)
    expected = reference_softmax(x.data, 1)
    np.testing.assert_allclose(engine.softmax(x, 1).data, expected, rtol=1e-12)
    np.testing.assert_allclose(x.softmax(dim=-1).data, expected, rtol=1e-12)
    np.testing.assert_allclose(x.log_softmax(1).data, np.log(expected), rtol=1e-12)
    np.testing.assert_allclose(engine.softmax(x, 0).data.sum(0), np.ones(4), rtol=1e-12)


def test_large_inputs_do_not_overflow() -> None:
    x = engine.tensor([[1000.0, 0.0, -1000.0], [1e30, 1e30, 0.0]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        p = engine.softmax(x, 1)
        logp = engine.log_softmax(x, 1)
    np.testing.assert_allclose(p.numpy(), [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]], atol=1e-30)
    np.testing.assert_allclose(logp.numpy()[0], [0.0, -1000.0, -2000.0])
    assert np.isfinite(logp.numpy()[1, :2]).all()


def test_gradient_of_softmax_sums_to_zero_along_dim() -> None:
    # Softmax is invariant to adding a constant along dim, so its gradient sums to zero there.
    x = leaf(3, 5)
    (engine.softmax(x, 1) * weights(3, 5)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy().sum(1), np.zeros(3), atol=1e-12)


def test_zero_dim_input() -> None:
    x = engine.tensor(2.0, dtype=engine.float64, requires_grad=True)
    assert engine.softmax(x, 0).item() == 1.0
    assert engine.log_softmax(x, -1).item() == 0.0
    assert engine.gradcheck(lambda x: engine.softmax(x, 0), (x,))
    assert engine.gradcheck(lambda x: engine.log_softmax(x, 0), (x,))


def test_node_names_and_saved_output() -> None:
    x = leaf(2, 3)
    assert engine.softmax(x, 1).grad_fn.name() == "SoftmaxBackward0"
    assert engine.log_softmax(x, 1).grad_fn.name() == "LogSoftmaxBackward0"
    y = engine.softmax(x, 1)
    y.add_(1.0)  # the backward reads the output, so changing it must be caught
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


ERRORS: list[tuple[Callable[[], Any], type[Exception], str]] = [
    (
        lambda: engine.softmax(engine.ones(3)),
        TypeError,
        "softmax() missing required argument 'dim'",
    ),
    (
        lambda: engine.ones(3).log_softmax(),
        TypeError,
        "log_softmax() missing required argument 'dim'",
    ),
    (
        lambda: engine.softmax(engine.ones(2, 3), 2),
        IndexError,
        "Dimension out of range (expected to be in range of [-2, 1], but got 2)",
    ),
    (
        lambda: engine.softmax(engine.tensor([1, 2]), 0),
        NotImplementedError,
        "\"softmax_lastdim_kernel_impl\" not implemented for 'Long'",
    ),
]


@pytest.mark.parametrize(("call", "kind", "message"), ERRORS)
def test_errors(call: Callable[[], Any], kind: type[Exception], message: str) -> None:
    with pytest.raises(kind, match=re.escape(message)):
        call()


# -- oracle ----------------------------------------------------------------------
@pytest.mark.oracle
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matches_pytorch(name: str, dim: int, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    x0 = (RNG.standard_normal((3, 4)) * 10).astype(dtype)
    x0[0, 0] = x0[0, 1]  # a tie
    w0 = RNG.standard_normal((3, 4)).astype(dtype)
    x, tx = engine.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    out, tout = FUNCTIONS[name](x, dim), getattr(torch, name)(tx, dim)
    assert out.dtype == np.dtype(dtype)
    assert out.grad_fn.name() == tout.grad_fn.name()
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == "float32" else {"rtol": 1e-12, "atol": 1e-15}
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), **tol)
    (out * engine.tensor(w0)).sum().backward()
    (tout * torch.tensor(w0)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), **tol)


@pytest.mark.oracle
def test_infinities_match_pytorch() -> None:
    torch = pytest.importorskip("torch")
    inf = float("inf")
    x0 = np.array([[-inf, -inf], [inf, 1.0], [-inf, 1.0], [inf, inf]])
    for name in sorted(FUNCTIONS):
        np.testing.assert_array_equal(
            FUNCTIONS[name](engine.tensor(x0), 1).numpy(),
            getattr(torch, name)(torch.tensor(x0), 1).numpy(),
            err_msg=name,
        )


@pytest.mark.oracle
def test_second_order_matches_pytorch() -> None:
    torch = pytest.importorskip("torch")
    x0 = RNG.standard_normal((3, 4))
    w0 = RNG.standard_normal((3, 4))

    def f(mod: Any, x: Any, w: Any) -> Any:
        return (mod.softmax(x, 1) * w).sum() + (mod.log_softmax(x * x, 0) * w).sum()

    x, tx = engine.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    (g,) = engine.grad(f(engine, x, engine.tensor(w0)), x, create_graph=True)
    (tg,) = torch.autograd.grad(f(torch, tx, torch.tensor(w0)), tx, create_graph=True)
    (gg,) = engine.grad((g * g).sum(), x)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), tx)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-10)
