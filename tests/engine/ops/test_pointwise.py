"""Pointwise ops: unary functions, clamp, maximum/minimum, where, and clamp_/zero_/fill_."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine
from engine import Tensor

RNG = np.random.default_rng(1)


def leaf(*shape: int, low: float | None = None, away_from: tuple[float, ...] = ()) -> Tensor:
    """A float64 leaf that requires grad.

    ``low`` gives values in ``[low, low + 2)``; ``away_from`` keeps every value at least 0.1 from
    those points (kinks, where finite differences are meaningless).
    """
    data = RNG.standard_normal(shape) if low is None else low + 2 * RNG.random(shape)
    for p in away_from:
        near = np.abs(data - p) < 0.1
        data = np.where(near, p + np.copysign(0.1 + np.abs(data - p), data - p), data)
    return engine.tensor(data, dtype=engine.float64, requires_grad=True)


def weights(*shape: int) -> Tensor:
    return engine.tensor(RNG.standard_normal(shape), dtype=engine.float64)


UNARY: dict[str, tuple[Callable[[Tensor], Tensor], dict[str, Any]]] = {
    "exp": (engine.exp, {}),
    "log": (engine.log, {"low": 0.2}),
    "sqrt": (engine.sqrt, {"low": 0.2}),
    "abs": (engine.abs, {"away_from": (0.0,)}),
    "sin": (engine.sin, {}),
    "cos": (engine.cos, {}),
    "tanh": (engine.tanh, {}),
    "sigmoid": (engine.sigmoid, {}),
    "relu": (engine.relu, {"away_from": (0.0,)}),
    "relu_method": (lambda x: x.relu(), {"away_from": (0.0,)}),
    "clamp_both": (lambda x: x.clamp(-0.5, 0.5), {"away_from": (-0.5, 0.5)}),
    "clamp_min": (lambda x: engine.clamp(x, min=0.3), {"away_from": (0.3,)}),
    "clamp_max": (lambda x: engine.clamp(x, max=-0.2), {"away_from": (-0.2,)}),
    "abs_operator": (abs, {"away_from": (0.0,)}),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", [(), (5,), (2, 3)])
def test_unary_gradcheck(name: str, shape: tuple[int, ...]) -> None:
    fn, kwargs = UNARY[name]
    assert engine.gradcheck(fn, (leaf(*shape, **kwargs),))


BINARY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "maximum": engine.maximum,
    "minimum": engine.minimum,
    "maximum_method": lambda a, b: a.maximum(b),
    "where": lambda a, b: engine.where(a > b, a, b * 2),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize(
    ("shape_a", "shape_b"), [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1), (1, 3)), ((), (2, 2))]
)
def test_binary_gradcheck_with_broadcasting(
    name: str, shape_a: tuple[int, ...], shape_b: tuple[int, ...]
) -> None:
    # Keep a and b apart so no element sits on a tie (where maximum is not differentiable).
    a = leaf(*shape_a)
    b = engine.tensor(RNG.standard_normal(shape_b) + 5.0, requires_grad=True)
    b.data[RNG.random(shape_b) < 0.5] -= 10.0
    assert engine.gradcheck(BINARY[name], (a, b))


def test_where_broadcasts_condition_and_takes_numbers() -> None:
    cond = engine.tensor([[True], [False]])
    x = leaf(3)
    assert engine.gradcheck(lambda x: engine.where(cond, x, 2.0), (x,))
    assert engine.gradcheck(lambda x: engine.where(cond, -1, x), (x,))
    out = engine.where(cond, x, 2.0)
    assert out.shape == (2, 3)
    out.backward(engine.ones(2, 3, dtype=engine.float64))
    # Row 0 takes x, row 1 takes the number: each x element gets exactly one gradient.
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(3))


def test_where_routes_each_gradient_to_its_branch() -> None:
    a, b = leaf(4), leaf(4)
    cond = engine.tensor([True, False, True, False])
    w = weights(4)
    (engine.where(cond, a, b) * w).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.where(cond.numpy(), w.numpy(), 0))
    np.testing.assert_array_equal(b.grad.numpy(), np.where(cond.numpy(), 0, w.numpy()))


def test_where_dtypes_follow_pytorch_promotion() -> None:
    cond = engine.tensor([True, False])
    ints = engine.tensor([1, 2])
    assert engine.where(cond, 1, 0).dtype == engine.int64
    assert engine.where(cond, 1.0, 0).dtype == engine.float32
    assert engine.where(cond, ints, 0.5).dtype == engine.float32
    assert engine.where(cond, engine.zeros(2), engine.tensor(1.0, dtype=engine.float64)).dtype == (
        engine.float32
    )
    assert engine.where(cond, engine.zeros(2), engine.zeros(2, dtype=engine.float64)).dtype == (
        engine.float64
    )


def test_where_method_is_input_where_condition_else_other() -> None:
    x = engine.tensor([1.0, -2.0, 3.0])
    np.testing.assert_array_equal(x.where(x > 0, 0.0).numpy(), [1.0, 0.0, 3.0])


def test_maximum_and_minimum_split_ties_evenly() -> None:
    a = engine.tensor([1.0, 2.0, 3.0], dtype=engine.float64, requires_grad=True)
    b = engine.tensor([1.0, 0.0, 5.0], dtype=engine.float64, requires_grad=True)
    engine.maximum(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 1.0, 0.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5, 0.0, 1.0])
    a.grad = b.grad = None
    engine.minimum(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 0.0, 1.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5, 1.0, 0.0])


def test_maximum_with_a_number_and_nan() -> None:
    x = engine.tensor([float("nan"), -1.0, 2.0], requires_grad=True)
    out = engine.maximum(x, 0.0)
    assert np.isnan(out.data[0])
    np.testing.assert_array_equal(out.data[1:], [0.0, 2.0])
    assert engine.maximum(engine.tensor([1, 5]), 2.5).dtype == engine.float32


def test_clamp_gradient_passes_on_the_bounds() -> None:
    x = engine.tensor([-1.0, 0.0, 0.5, 1.0, 2.0], requires_grad=True)
    x.clamp(0.0, 1.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 1.0, 1.0, 0.0])


def test_clamp_min_above_max_gives_max_and_keeps_integers() -> None:
    x = engine.tensor([-3.0, 0.0, 3.0])
    np.testing.assert_array_equal(x.clamp(2.0, 1.0).numpy(), [1.0, 1.0, 1.0])
    ints = engine.tensor([-3, 0, 3])
    assert ints.clamp(-1, 1).dtype == engine.int64
    np.testing.assert_array_equal(ints.clamp(-1, 1).numpy(), [-1, 0, 1])
    as_float = ints.clamp(min=0.5)
    assert as_float.dtype == engine.float32
    np.testing.assert_array_equal(as_float.numpy(), [0.5, 0.5, 3.0])
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type int64"):
        ints.clamp_(min=0.5)


def test_float_functions_promote_integers_to_the_default_dtype() -> None:
    ints = engine.tensor([0, 1, 2])
    for fn in (engine.exp, engine.log, engine.sqrt, engine.sin, engine.tanh, engine.sigmoid):
        assert fn(ints).dtype == engine.float32
    assert engine.abs(engine.tensor([-2, 3])).dtype == engine.int64
    np.testing.assert_array_equal(engine.relu(engine.tensor([-2, 3])).numpy(), [0, 3])


def test_log_and_sqrt_out_of_domain_do_not_warn() -> None:
    with np.errstate(all="raise"):
        out = engine.log(engine.tensor([0.0, -1.0]))
        root = engine.sqrt(engine.tensor([-1.0]))
    assert out.data[0] == -np.inf
    assert np.isnan(out.data[1])
    assert np.isnan(root.data[0])


def test_sigmoid_is_stable_for_large_inputs() -> None:
    with np.errstate(over="raise", divide="raise", invalid="raise"):
        out = engine.sigmoid(engine.tensor([-1000.0, -40.0, 0.0, 40.0, 1000.0], dtype="float64"))
    np.testing.assert_allclose(out.numpy(), [0.0, 4.248354255291589e-18, 0.5, 1.0, 1.0])


# -- second order ----------------------------------------------------------------
SECOND_ORDER: dict[str, tuple[Callable[..., Tensor], tuple[Tensor, ...]]] = {
    "exp": (engine.exp, (leaf(2, 3),)),
    "log": (engine.log, (leaf(2, 3, low=0.5),)),
    "sqrt": (engine.sqrt, (leaf(2, 3, low=0.5),)),
    "sin": (engine.sin, (leaf(4),)),
    "cos": (engine.cos, (leaf(4),)),
    "tanh": (engine.tanh, (leaf(4),)),
    "sigmoid": (engine.sigmoid, (leaf(4),)),
    "abs_squared": (lambda x: engine.abs(x) * x, (leaf(4, away_from=(0.0,)),)),
    "relu_squared": (lambda x: engine.relu(x) * x, (leaf(4, away_from=(0.0,)),)),
    "clamp_squared": (lambda x: x.clamp(-0.5, 0.5) * x, (leaf(6, away_from=(-0.5, 0.5)),)),
    "maximum_product": (
        lambda a, b: engine.maximum(a, b) * a * b,
        (leaf(2, 3), engine.tensor(RNG.standard_normal(3) + 3, requires_grad=True)),
    ),
    "where_product": (lambda a, b: engine.where(a > 0, a * b, b * b), (leaf(2, 3), leaf(3))),
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_second_order(name: str) -> None:
    fn, inputs = SECOND_ORDER[name]
    assert engine.gradgradcheck(fn, inputs)


def test_third_order_of_exp_is_exp() -> None:
    x = leaf(3)
    (g,) = engine.grad(engine.exp(x).sum(), x, create_graph=True)
    (gg,) = engine.grad(g.sum(), x, create_graph=True)
    (ggg,) = engine.grad(gg.sum(), x)
    np.testing.assert_allclose(ggg.numpy(), np.exp(x.data))


# -- graph -----------------------------------------------------------------------
NODE_NAMES = [
    (engine.exp, "ExpBackward0"),
    (engine.log, "LogBackward0"),
    (engine.sqrt, "SqrtBackward0"),
    (engine.abs, "AbsBackward0"),
    (engine.sin, "SinBackward0"),
    (engine.cos, "CosBackward0"),
    (engine.tanh, "TanhBackward0"),
    (engine.sigmoid, "SigmoidBackward0"),
    (engine.relu, "ReluBackward0"),
    (lambda x: x.clamp(min=0.0), "ClampBackward1"),
    (lambda x: engine.maximum(x, x * 2), "MaximumBackward0"),
    (lambda x: engine.minimum(x, 0.0), "MinimumBackward0"),
    (lambda x: engine.where(x > 0, x, 0.0), "WhereBackward0"),
]


@pytest.mark.parametrize(("fn", "name"), NODE_NAMES, ids=[n for _, n in NODE_NAMES])
def test_node_names(fn: Callable[[Tensor], Tensor], name: str) -> None:
    assert fn(leaf(3, low=0.5)).grad_fn.name() == name


def test_where_records_one_edge_per_value_operand() -> None:
    x = leaf(3)
    out = engine.where(x > 0, x, 0.0)
    assert len(out.grad_fn.next_functions) == 2
    assert out.grad_fn.next_functions[1] == (None, 0)


def test_no_node_without_grad() -> None:
    x = engine.tensor([1.0, 2.0])
    for fn, _ in NODE_NAMES:
        out = fn(x)
        assert out.grad_fn is None
        assert not out.requires_grad
    with engine.no_grad():
        assert engine.exp(leaf(2)).grad_fn is None


def test_maximum_computes_only_the_requested_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.ops.pointwise as pointwise

    calls = []
    real_where = pointwise.where

    def counting_where(*args: Any) -> Tensor:
        calls.append(args)
        return real_where(*args)

    a, b = leaf(3), leaf(3) + 4.0
    out = engine.maximum(a, b).sum()
    monkeypatch.setattr(pointwise, "where", counting_where)
    (ga,) = engine.grad(out, a, retain_graph=True)
    only_a = len(calls)
    calls.clear()
    engine.grad(out, (a, b))
    assert 0 < only_a < len(calls)
    np.testing.assert_array_equal(ga.numpy(), np.zeros(3))


def test_saved_tensors_are_released_after_backward() -> None:
    x = leaf(3)
    y = engine.tanh(x)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.sum().backward()


def test_modifying_a_saved_input_in_place_is_detected() -> None:
    x = leaf(3)
    h = x * 1.0
    y = engine.sin(h)
    h.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# -- in place --------------------------------------------------------------------
def test_clamp__matches_clamp_and_bumps_the_version() -> None:
    x = engine.tensor([-1.0, 0.0, 0.5, 1.0, 2.0], requires_grad=True)
    h = x * 1.0
    version = h._version
    out = h.clamp_(0.0, 1.0)
    assert out is h
    assert h._version == version + 1
    assert h.grad_fn.name() == "ClampBackward1"
    np.testing.assert_array_equal(h.data, [0.0, 0.0, 0.5, 1.0, 1.0])
    h.sum().backward()
    # The gradient uses the values before clamping, so the bounds themselves pass it.
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 1.0, 1.0, 0.0])


def test_clamp__gradcheck() -> None:
    def fn(x: Tensor) -> Tensor:
        return (x * 2.0).clamp_(-0.5, 0.5) * x

    assert engine.gradcheck(fn, (leaf(6, away_from=(-0.25, 0.25)),))


def test_zero__under_autograd_blocks_the_gradient_of_the_old_value() -> None:
    x = leaf(3)
    h = x * 2.0
    h.zero_()
    assert h.grad_fn.name() == "ZeroBackward0"
    np.testing.assert_array_equal(h.data, np.zeros(3))
    (h + x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(3))


def test_fill__with_a_number_and_with_a_tensor() -> None:
    x = leaf(3)
    h = x * 2.0
    h.fill_(1.5)
    assert h.grad_fn.name() == "FillBackward2"
    np.testing.assert_array_equal(h.data, [1.5, 1.5, 1.5])
    (h * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.5, 1.5, 1.5])

    v = engine.tensor(0.5, dtype=engine.float64, requires_grad=True)
    z = engine.zeros(2, 3, dtype=engine.float64).fill_(v)
    assert z.grad_fn.name() == "FillBackward3"
    w = weights(2, 3)
    (z * w).sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), w.numpy().sum())


def test_fill__and_zero__without_grad_just_write() -> None:
    t = engine.ones(2)
    assert t.zero_() is t
    assert t.grad_fn is None
    np.testing.assert_array_equal(t.fill_(7).numpy(), [7.0, 7.0])
    assert t._version == 2


def test_inplace_on_a_leaf_that_requires_grad_is_refused() -> None:
    for op in (lambda x: x.clamp_(0, 1), lambda x: x.zero_(), lambda x: x.fill_(1.0)):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            op(leaf(2))


# -- errors ----------------------------------------------------------------------
ERRORS: list[tuple[Callable[[], Any], type[Exception], str]] = [
    (
        lambda: engine.ones(2).clamp(),
        RuntimeError,
        "At least one of 'min' or 'max' must not be None",
    ),
    (lambda: engine.ones(2).clamp(engine.zeros(2)), TypeError, "engine.maximum"),
    (lambda: engine.ones(2).clamp(max="1"), TypeError, "argument 'max' must be a number"),
    (
        lambda: engine.where(engine.ones(2), engine.ones(2), 0.0),
        RuntimeError,
        "where expected condition to be a boolean tensor, but got a tensor with dtype Float",
    ),
    (
        lambda: engine.maximum(engine.ones(2), engine.ones(2, device="sim:0")),
        RuntimeError,
        "Expected all tensors to be on the same device",
    ),
    (
        lambda: engine.where(engine.ones(2, device="sim:0") > 0, engine.ones(2), 0.0),
        RuntimeError,
        "Expected all tensors to be on the same device",
    ),
    (
        lambda: engine.ones(3).fill_(engine.ones(2)),
        RuntimeError,
        "fill_ only supports 0-dimension value tensor but got tensor with 1 dimensions",
    ),
    (lambda: engine.maximum(engine.ones(2), "a"), TypeError, "unsupported operand type"),
    (
        lambda: engine.maximum(engine.ones(2), engine.ones(3)),
        RuntimeError,
        "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0",
    ),
]


@pytest.mark.parametrize(("call", "kind", "message"), ERRORS)
def test_errors(call: Callable[[], Any], kind: type[Exception], message: str) -> None:
    with pytest.raises(kind, match=re.escape(message)):
        call()


def test_ops_run_on_another_device() -> None:
    x = engine.tensor([0.5, -1.0], device="sim:0", requires_grad=True)
    out = engine.where(x > 0, engine.exp(x), engine.maximum(x, engine.tensor(-0.5)))
    assert out.device == engine.device("sim:0")
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [np.exp(0.5), 0.0])


# -- oracle ----------------------------------------------------------------------
SPECIAL = np.array([-2.0, -1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 1.5, 3.0])
"""Values on the kinks and ties, where the one-sided choices of PyTorch must be reproduced."""

ORACLE_UNARY = ["exp", "log", "sqrt", "abs", "sin", "cos", "tanh", "sigmoid", "relu"]


@pytest.mark.oracle
@pytest.mark.parametrize("name", ORACLE_UNARY)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unary_matches_pytorch(name: str, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    x0 = np.concatenate([SPECIAL, RNG.standard_normal(7)]).astype(dtype)
    if name in ("log", "sqrt"):
        x0 = np.abs(x0) + 0.1
    w0 = RNG.standard_normal(x0.shape).astype(dtype)
    x, tx = engine.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    out, tout = getattr(engine, name)(x), getattr(torch, name)(tx)
    assert out.grad_fn.name() == tout.grad_fn.name()
    assert out.dtype == np.dtype(dtype)
    # float32 results may differ from PyTorch's by an ulp, which 1 - y * y (tanh) magnifies.
    tol = {"rtol": 1e-5, "atol": 1e-7} if dtype == "float32" else {"rtol": 1e-12}
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), **tol)
    (out * engine.tensor(w0)).sum().backward()
    (tout * torch.tensor(w0)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), **tol)


@pytest.mark.oracle
@pytest.mark.parametrize(
    ("lo", "hi"), [(-0.5, 1.0), (None, 0.0), (0.0, None), (1.0, -1.0), (-1, 1)]
)
def test_clamp_matches_pytorch(lo: float | None, hi: float | None) -> None:
    torch = pytest.importorskip("torch")
    x0 = np.concatenate([SPECIAL, [np.nan]])
    x, tx = engine.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    out, tout = x.clamp(lo, hi), tx.clamp(lo, hi)
    np.testing.assert_array_equal(out.detach().numpy(), tout.detach().numpy())
    out.sum().backward()
    tout.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    assert out.grad_fn.name() == tout.grad_fn.name()

    h, th = x.detach() * 1.0, tx.detach() * 1.0
    h.requires_grad_()
    th.requires_grad_()
    hh, thh = h * 1.0, th * 1.0
    hh.clamp_(lo, hi)
    thh.clamp_(lo, hi)
    (hh * hh).sum().backward()
    (thh * thh).sum().backward()
    np.testing.assert_array_equal(h.grad.numpy(), th.grad.numpy())


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["maximum", "minimum"])
@pytest.mark.parametrize(("shape_a", "shape_b"), [((9,), (9,)), ((9, 1), (9,)), ((9,), ())])
def test_maximum_minimum_match_pytorch(
    name: str, shape_a: tuple[int, ...], shape_b: tuple[int, ...]
) -> None:
    torch = pytest.importorskip("torch")
    a0 = np.broadcast_to(SPECIAL.reshape((9,) + (1,) * (len(shape_a) - 1)), shape_a).copy()
    b0 = np.broadcast_to(np.array(0.5), shape_b).copy() if shape_b == () else SPECIAL[::-1].copy()
    a, b = engine.tensor(a0, requires_grad=True), engine.tensor(b0, requires_grad=True)
    ta, tb = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    out, tout = getattr(engine, name)(a, b), getattr(torch, name)(ta, tb)
    np.testing.assert_array_equal(out.detach().numpy(), tout.detach().numpy())
    w0 = RNG.standard_normal(tout.shape)
    (out * engine.tensor(w0)).sum().backward()
    (tout * torch.tensor(w0)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-12)


@pytest.mark.oracle
def test_where_matches_pytorch() -> None:
    torch = pytest.importorskip("torch")
    c0 = RNG.random((3, 1)) < 0.5
    a0, b0 = RNG.standard_normal((3, 4)), RNG.standard_normal(4)
    a, b = engine.tensor(a0, requires_grad=True), engine.tensor(b0, requires_grad=True)
    ta, tb = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    out = engine.where(engine.tensor(c0), a, b)
    tout = torch.where(torch.tensor(c0), ta, tb)
    np.testing.assert_array_equal(out.detach().numpy(), tout.detach().numpy())
    w0 = RNG.standard_normal((3, 4))
    (out * engine.tensor(w0)).sum().backward()
    (tout * torch.tensor(w0)).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-12)
    for args in ((1, 0), (1.0, 0), (np.int64(2), 0.5)):
        assert str(engine.where(engine.tensor(c0), *args).dtype) == str(
            torch.where(torch.tensor(c0), *args).dtype
        ).removeprefix("torch.")


@pytest.mark.oracle
def test_second_order_matches_pytorch() -> None:
    torch = pytest.importorskip("torch")
    x0 = RNG.standard_normal(5)

    def f(mod: Any, x: Any) -> Any:
        return (mod.tanh(x) * mod.sigmoid(x) + mod.exp(x) * mod.sin(x)).sum()

    x, tx = engine.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    (g,) = engine.grad(f(engine, x), x, create_graph=True)
    (tg,) = torch.autograd.grad(f(torch, tx), tx, create_graph=True)
    (gg,) = engine.grad((g * g).sum(), x)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), tx)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-10)


@pytest.mark.oracle
def test_zero_and_fill_node_names_match_pytorch() -> None:
    torch = pytest.importorskip("torch")
    x, tx = leaf(3), torch.zeros(3, dtype=torch.float64, requires_grad=True)
    for op in (lambda t: t.zero_(), lambda t: t.fill_(2.0)):
        assert op(x * 1.0).grad_fn.name() == op(tx * 1.0).grad_fn.name()
    v, tv = engine.tensor(1.0, requires_grad=True), torch.tensor(1.0, requires_grad=True)
    assert (x * 1.0).fill_(v).grad_fn.name() == (tx * 1.0).fill_(tv).grad_fn.name()
