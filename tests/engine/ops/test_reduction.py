"""Reductions: sum, mean, amax/amin and max/min (full and along a dim)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine
from engine import Tensor

RNG = np.random.default_rng(3)


def leaf(*shape: int) -> Tensor:
    """A float64 leaf with distinct values (no ties, so max/min are differentiable)."""
    data = RNG.permutation(np.arange(int(np.prod(shape)), dtype=np.float64)).reshape(shape)
    return engine.tensor(data * 0.37 + RNG.random(shape) * 0.1, requires_grad=True)


def weights(*shape: int) -> Tensor:
    return engine.tensor(RNG.standard_normal(shape), dtype=engine.float64)


def values(result: Any) -> Tensor:
    return result.values if isinstance(result, tuple) else result


REDUCTIONS: dict[str, Callable[[Tensor], Any]] = {
    "sum": lambda x: x.sum(),
    "sum_dim": lambda x: x.sum(1),
    "mean": lambda x: x.mean(),
    "mean_dim": lambda x: x.mean(1),
    "mean_dims_keepdim": lambda x: x.mean((0, -1), keepdim=True),
    "mean_negative_dim": lambda x: engine.mean(x, -1),
    "mean_empty_dims": lambda x: x.mean(()),
    "amax": lambda x: x.amax(),
    "amax_dim": lambda x: x.amax(1),
    "amax_dims_keepdim": lambda x: x.amax((0, 2), keepdim=True),
    "amin": engine.amin,
    "amin_dim_keepdim": lambda x: x.amin(-1, keepdim=True),
    "max": lambda x: x.max(),
    "max_dim": lambda x: x.max(1),
    "max_dim_keepdim": lambda x: engine.max(x, 0, keepdim=True),
    "min": engine.min,
    "min_dim": lambda x: x.min(-1),
    "min_dim_keepdim": lambda x: x.min(2, keepdim=True),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_gradcheck(name: str) -> None:
    fn = REDUCTIONS[name]
    assert engine.gradcheck(lambda x: values(fn(x)), (leaf(2, 3, 4),))


@pytest.mark.parametrize("name", ["mean", "amax", "amin", "max", "min"])
def test_gradcheck_zero_dim_input(name: str) -> None:
    x = engine.tensor(0.7, dtype=engine.float64, requires_grad=True)
    assert engine.gradcheck(lambda x: values(getattr(x, name)()), (x,))
    assert engine.gradcheck(lambda x: values(getattr(x, name)(0)), (x,))


@pytest.mark.parametrize("name", ["mean_dim", "amax_dim", "max_dim_keepdim", "min_dim"])
def test_gradcheck_after_broadcasting(name: str) -> None:
    fn = REDUCTIONS[name]
    a, b = leaf(2, 1, 4), leaf(3, 1)
    assert engine.gradcheck(lambda a, b: values(fn(a * 0.5 + b)), (a, b))


def test_mean_values_and_shapes() -> None:
    x = leaf(2, 3, 4)
    np.testing.assert_allclose(x.mean().item(), x.data.mean())
    np.testing.assert_allclose(x.mean(1).data, x.data.mean(1))
    assert x.mean((0, 2), keepdim=True).shape == (1, 3, 1)
    assert x.mean(-1).dtype == engine.float64
    assert engine.ones(2, 3).mean().dtype == engine.float32


def test_mean_of_an_empty_tensor_is_nan_without_a_warning() -> None:
    with np.errstate(all="raise"):
        assert np.isnan(engine.zeros(0, 3).mean().item())


def test_amax_ties_share_the_gradient_evenly() -> None:
    x = engine.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], requires_grad=True)
    x.amax(1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    x.grad = None
    x.amin().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[1, 0, 0], [0, 0, 0]])


def test_full_max_ties_share_the_gradient_and_nan_wins() -> None:
    x = engine.tensor([3.0, 1.0, 3.0], requires_grad=True)
    x.max().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.5, 0.0, 0.5])
    y = engine.tensor([np.nan, 1.0, np.nan], requires_grad=True)
    out = y.min()
    assert np.isnan(out.item())
    out.backward()
    np.testing.assert_array_equal(y.grad.numpy(), [0.5, 0.0, 0.5])


def test_max_dim_sends_the_gradient_to_the_returned_index() -> None:
    x = engine.tensor([[1.0, 3.0, 3.0], [5.0, 2.0, 5.0]], dtype=engine.float64, requires_grad=True)
    out = x.max(1)
    np.testing.assert_array_equal(out.values.data, [3.0, 5.0])
    np.testing.assert_array_equal(out.indices.numpy(), [1, 0])
    w = weights(2)
    (out.values * w).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, w.data[0], 0], [w.data[1], 0, 0]])


def test_max_dim_returns_a_named_pair() -> None:
    x = leaf(3, 4)
    result = x.min(0, keepdim=True)
    values_, indices = result
    assert result.values is values_
    assert result.indices is indices
    assert values_.shape == indices.shape == (1, 4)
    assert indices.dtype == engine.int64
    assert not indices.requires_grad
    assert indices.grad_fn is None
    np.testing.assert_array_equal(indices.numpy()[0], x.data.argmin(0))
    np.testing.assert_array_equal(values_.data[0], x.data.min(0))


def test_max_with_a_tensor_is_maximum() -> None:
    a, b = leaf(3), leaf(3)
    out = engine.max(a, b)
    assert out.grad_fn.name() == "MaximumBackward0"
    np.testing.assert_array_equal(out.data, np.maximum(a.data, b.data))
    assert a.min(b).grad_fn.name() == "MinimumBackward0"


def test_integer_reductions_keep_their_dtype() -> None:
    ints = engine.tensor([[3, 1], [2, 4]])
    assert ints.amax().dtype == engine.int64
    assert ints.amax().item() == 4
    np.testing.assert_array_equal(ints.min(1).values.numpy(), [1, 2])
    np.testing.assert_array_equal(ints.max(0).indices.numpy(), [0, 1])


# -- second order ----------------------------------------------------------------
SECOND_ORDER: dict[str, Callable[[Tensor], Tensor]] = {
    "mean": lambda x: (x * x).mean() * x,
    "mean_dim": lambda x: (x * x).mean(1, keepdim=True) * x,
    "amax_dim": lambda x: (x * x).amax(0) * x[0],
    "max": lambda x: (x * x * x).max() * x,
    "max_dim": lambda x: (x * x * x).max(1).values,
    "min_dim_keepdim": lambda x: (x * x).min(0, keepdim=True).values * x,
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_second_order(name: str) -> None:
    assert engine.gradgradcheck(SECOND_ORDER[name], (leaf(3, 4),))


# -- graph -----------------------------------------------------------------------
NODE_NAMES = [
    (lambda x: x.mean(), "MeanBackward0"),
    (lambda x: x.mean(0), "MeanBackward1"),
    (lambda x: x.amax(), "AmaxBackward0"),
    (lambda x: x.amin(1), "AminBackward0"),
    (lambda x: x.max(), "MaxBackward1"),
    (lambda x: x.max(0).values, "MaxBackward0"),
    (lambda x: x.min(), "MinBackward1"),
    (lambda x: x.min(1)[0], "MinBackward0"),
]


@pytest.mark.parametrize(("fn", "name"), NODE_NAMES, ids=[n for _, n in NODE_NAMES])
def test_node_names(fn: Callable[[Tensor], Tensor], name: str) -> None:
    assert fn(leaf(2, 3)).grad_fn.name() == name


def test_saved_input_modified_in_place_is_detected() -> None:
    x = leaf(2, 3)
    h = x * 1.0
    out = h.amax(1)
    h.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_reductions_on_another_device() -> None:
    x = engine.tensor([[1.0, 4.0], [3.0, 2.0]], device="sim:0", requires_grad=True)
    out = x.max(1)
    assert out.indices.device == engine.device("sim:0")
    (out.values.sum() + x.mean()).backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.25, 1.25], [1.25, 0.25]])


# -- errors ----------------------------------------------------------------------
ERRORS: list[tuple[Callable[[], Any], type[Exception], str]] = [
    (
        lambda: engine.tensor([1, 2]).mean(),
        RuntimeError,
        "mean(): could not infer output dtype. Input dtype must be either a floating point or "
        "complex dtype. Got: Long",
    ),
    (
        lambda: engine.zeros(0, 3).max(),
        RuntimeError,
        "max(): Expected reduction dim to be specified for input.numel() == 0.",
    ),
    (
        lambda: engine.zeros(0, 3).min(0),
        IndexError,
        "min(): Expected reduction dim 0 to have non-zero size.",
    ),
    (
        lambda: engine.zeros(3, 0).amax(-1),
        IndexError,
        "amax(): Expected reduction dim 1 to have non-zero size.",
    ),
    (
        lambda: engine.zeros(2, 3).max(2),
        IndexError,
        "Dimension out of range (expected to be in range of [-2, 1], but got 2)",
    ),
    (
        lambda: engine.zeros(2, 3).mean(-3),
        IndexError,
        "Dimension out of range (expected to be in range of [-2, 1], but got -3)",
    ),
]


@pytest.mark.parametrize(("call", "kind", "message"), ERRORS)
def test_errors(call: Callable[[], Any], kind: type[Exception], message: str) -> None:
    with pytest.raises(kind, match=re.escape(message)):
        call()


def test_max_along_an_empty_other_dim_is_empty() -> None:
    out = engine.zeros(0, 3).max(1)
    assert out.values.shape == out.indices.shape == (0,)


# -- oracle ----------------------------------------------------------------------
ORACLE: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "mean": (lambda x: x.mean(), lambda t: t.mean()),
    "mean_dim_keepdim": (lambda x: x.mean(1, keepdim=True), lambda t: t.mean(1, keepdim=True)),
    "mean_dims": (lambda x: x.mean((0, 2)), lambda t: t.mean((0, 2))),
    "amax": (lambda x: x.amax(), lambda t: t.amax()),
    "amax_dim": (lambda x: x.amax(2), lambda t: t.amax(2)),
    "amin_dims_keepdim": (
        lambda x: x.amin((0, 1), keepdim=True),
        lambda t: t.amin((0, 1), keepdim=True),
    ),
    "max": (lambda x: x.max(), lambda t: t.max()),
    "min": (lambda x: x.min(), lambda t: t.min()),
    "max_dim": (lambda x: x.max(1), lambda t: t.max(1)),
    "min_dim_keepdim": (lambda x: x.min(-1, keepdim=True), lambda t: t.min(-1, keepdim=True)),
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", sorted(ORACLE))
@pytest.mark.parametrize("ties", [False, True])
def test_matches_pytorch(name: str, ties: bool) -> None:
    torch = pytest.importorskip("torch")
    ours, theirs = ORACLE[name]
    x0 = (
        RNG.integers(0, 3, (2, 3, 4)).astype(np.float64) if ties else RNG.standard_normal((2, 3, 4))
    )
    x, tx = engine.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    out, tout = ours(x), theirs(tx)
    if isinstance(tout, tuple):
        if not ties:  # PyTorch documents no choice among tied indices
            np.testing.assert_array_equal(out.indices.numpy(), tout.indices.numpy())
        out, tout = out.values, tout.values
    assert out.grad_fn.name() == tout.grad_fn.name()
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-12)
    if ties and name in ("max_dim", "min_dim_keepdim"):
        return  # the gradient follows the index, which may differ among ties
    w0 = RNG.standard_normal(tout.shape)
    (out * engine.tensor(w0)).sum().backward()
    (tout * torch.tensor(w0)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


@pytest.mark.oracle
def test_max_dim_ties_follow_pytorchs_cpu_choice() -> None:
    torch = pytest.importorskip("torch")
    x0 = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 1.0], [0.0, 0.0, 0.0]])
    for fn in (lambda t: t.max(1), lambda t: t.min(0)):
        np.testing.assert_array_equal(
            fn(engine.tensor(x0)).indices.numpy(), fn(torch.tensor(x0)).indices.numpy()
        )


@pytest.mark.oracle
def test_nan_handling_matches_pytorch() -> None:
    torch = pytest.importorskip("torch")
    x0 = np.array([[1.0, np.nan, 3.0], [np.nan, 2.0, np.nan]])
    for name, fn in (
        ("amax", lambda t: t.amax(1)),
        ("max", lambda t: t.max()),
        ("mean", lambda t: t.mean(0)),
    ):
        x, tx = engine.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
        out, tout = fn(x), fn(tx)
        np.testing.assert_array_equal(out.detach().numpy(), tout.detach().numpy(), err_msg=name)
        out.sum().backward()
        tout.sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy(), err_msg=name)


@pytest.mark.oracle
def test_second_order_matches_pytorch() -> None:
    torch = pytest.importorskip("torch")
    x0 = RNG.standard_normal((3, 4))

    def f(x: Any) -> Any:
        return ((x * x).amax(1) * x.mean(0)[:3]).sum() + (x * x * x).max(0).values.sum()

    x, tx = engine.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    (g,) = engine.grad(f(x), x, create_graph=True)
    (tg,) = torch.autograd.grad(f(tx), tx, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-12)
    (gg,) = engine.grad((g * g).sum(), x)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), tx)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-10)


@pytest.mark.oracle
@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin_match_pytorch(torch: Any, name: str, dim: int | None, keepdim: bool) -> None:
    data = np.random.default_rng(3).standard_normal((4, 5))
    ours = getattr(engine.tensor(data, requires_grad=True), name)(dim=dim, keepdim=keepdim)
    theirs = getattr(torch.tensor(data), name)(dim=dim, keepdim=keepdim)
    assert ours.dtype == engine.int64 and not ours.requires_grad
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
