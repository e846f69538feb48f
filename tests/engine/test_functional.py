"""``engine.functional``: linear, activations, mse_loss, nll_loss, cross_entropy."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine
import engine.functional as F
from engine import Tensor

RNG = np.random.default_rng(2)


def leaf(*shape: int) -> Tensor:
    """A float64 leaf that requires grad, with distinct random values."""
    return engine.tensor(RNG.standard_normal(shape), dtype=engine.float64, requires_grad=True)


def labels(*values: int) -> Tensor:
    return engine.tensor(list(values), dtype=engine.int64)


# -- gradients -------------------------------------------------------------------
@pytest.mark.parametrize("input_shape", [(4,), (3, 4), (2, 3, 4)])
def test_linear_gradcheck(input_shape: tuple[int, ...]) -> None:
    assert engine.gradcheck(F.linear, (leaf(*input_shape), leaf(5, 4), leaf(5)))
    assert engine.gradcheck(F.linear, (leaf(*input_shape), leaf(5, 4)))


def test_linear_values() -> None:
    x, w, b = leaf(3, 4), leaf(5, 4), leaf(5)
    expected = x.detach().numpy() @ w.detach().numpy().T + b.detach().numpy()
    np.testing.assert_allclose(F.linear(x, w, b).detach().numpy(), expected, rtol=1e-12)


def test_activations() -> None:
    x = engine.tensor([[-1.5, 0.5], [2.0, -0.25]], dtype=engine.float64, requires_grad=True)
    assert engine.gradcheck(F.relu, (x,))
    assert engine.gradcheck(F.tanh, (x,))
    assert engine.gradcheck(lambda x: F.log_softmax(x, 1), (x,))
    assert F.relu(x).detach().numpy().tolist() == [[0.0, 0.5], [2.0, 0.0]]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_gradcheck(reduction: str) -> None:
    assert engine.gradcheck(
        lambda x, y: F.mse_loss(x, y, reduction=reduction), (leaf(3, 4), leaf(3, 4))
    )


def test_mse_loss_broadcast_target_warns_and_gets_summed_gradient() -> None:
    x, y = leaf(3, 4), leaf(4)
    with pytest.warns(UserWarning, match="Using a target size"):
        assert engine.gradcheck(F.mse_loss, (x, y))


def test_mse_loss_values() -> None:
    x, y = leaf(3, 4), leaf(3, 4)
    diff = x.detach().numpy() - y.detach().numpy()
    np.testing.assert_allclose(F.mse_loss(x, y).item(), (diff**2).mean(), rtol=1e-12)
    np.testing.assert_allclose(F.mse_loss(x, y, reduction="sum").item(), (diff**2).sum())
    assert F.mse_loss(x, y, reduction="none").shape == (3, 4)


NLL_CASES: dict[str, tuple[tuple[int, ...], Callable[[], Tensor], dict[str, Any]]] = {
    "mean": ((4, 3), lambda: labels(0, 2, 1, 2), {}),
    "sum": ((4, 3), lambda: labels(0, 2, 1, 2), {"reduction": "sum"}),
    "none": ((4, 3), lambda: labels(0, 2, 1, 2), {"reduction": "none"}),
    "ignore_index": ((4, 3), lambda: labels(0, -100, 1, 2), {}),
    "custom_ignore_index": ((4, 3), lambda: labels(0, 1, 1, 2), {"ignore_index": 1}),
    "weight": ((4, 3), lambda: labels(0, 2, 1, 2), {"weight": engine.tensor([0.2, 1.0, 3.0])}),
    "weight_none": (
        (4, 3),
        lambda: labels(0, 2, 1, 2),
        {"weight": engine.tensor([0.2, 1.0, 3.0]), "reduction": "none"},
    ),
    "one_sample": ((3,), lambda: engine.tensor(2), {}),
    "spatial": ((2, 3, 2), lambda: engine.tensor([[0, 2], [1, 1]]), {}),
    "spatial_none": ((2, 3, 2), lambda: engine.tensor([[0, 2], [1, 1]]), {"reduction": "none"}),
}


@pytest.mark.parametrize("name", sorted(NLL_CASES))
def test_nll_loss_gradcheck(name: str) -> None:
    shape, target, kwargs = NLL_CASES[name]
    assert engine.gradcheck(lambda x: F.nll_loss(x, target(), **kwargs), (leaf(*shape),))


@pytest.mark.parametrize("name", sorted(NLL_CASES))
def test_cross_entropy_gradcheck(name: str) -> None:
    shape, target, kwargs = NLL_CASES[name]
    assert engine.gradcheck(lambda x: F.cross_entropy(x, target(), **kwargs), (leaf(*shape),))


def test_nll_loss_values() -> None:
    x = leaf(4, 3)
    t = labels(0, 2, -100, 2)
    picked = x.detach().numpy()[[0, 1, 3], [0, 2, 2]]
    np.testing.assert_allclose(F.nll_loss(x, t).item(), -picked.mean(), rtol=1e-12)
    np.testing.assert_allclose(
        F.nll_loss(x, t, reduction="none").detach().numpy(),
        [-picked[0], -picked[1], 0.0, -picked[2]],
    )


def test_nll_loss_every_target_ignored_is_nan() -> None:
    assert np.isnan(F.nll_loss(leaf(2, 3), labels(-100, -100)).item())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_with_probabilities_gradcheck(reduction: str) -> None:
    p = engine.tensor(RNG.dirichlet(np.ones(3), size=4))
    assert engine.gradcheck(lambda x: F.cross_entropy(x, p, reduction=reduction), (leaf(4, 3),))


def test_second_order() -> None:
    """The losses' backward formulas are differentiable (gradcheck of a gradient)."""
    t = labels(0, 2, 1, 2)

    def first_grads(x: Tensor, y: Tensor, w: Tensor) -> tuple[Tensor, ...]:
        with engine.enable_grad():  # gradcheck's finite differences run under no_grad
            hidden = F.tanh(F.linear(x, w))
            loss = F.cross_entropy(hidden, t) + F.mse_loss(hidden, y)
            return engine.grad(loss, (x, w), create_graph=True)

    assert engine.gradcheck(first_grads, (leaf(4, 3), leaf(4, 3), leaf(3, 3)))


def test_node_names() -> None:
    x, y = leaf(4, 3), leaf(4, 3)
    assert F.mse_loss(x, y).grad_fn.name() == "MseLossBackward0"
    assert F.nll_loss(x, labels(0, 1, 2, 0)).grad_fn.name() == "NllLossBackward0"
    loss = F.cross_entropy(x, labels(0, 1, 2, 0))
    assert loss.grad_fn.name() == "NllLossBackward0"
    assert loss.grad_fn.next_functions[0][0].name() == "LogSoftmaxBackward0"


def test_nll_loss_keeps_no_reference_to_its_target() -> None:
    x, t = leaf(2, 3), labels(0, 1)
    loss = F.nll_loss(x, t)
    t.data[...] = 2
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[-0.5, 0.0, 0.0], [0.0, -0.5, 0.0]])


# -- errors ----------------------------------------------------------------------
def _errors(m: Any) -> list[tuple[Callable[[], Any], type[Exception], str]]:
    nn = m.nn.functional if hasattr(m, "nn") else m.functional
    x = m.zeros(3, 4)
    long = m.int64
    return [
        (
            lambda: nn.nll_loss(x, m.tensor([1.0, 0.0, 3.0])),
            RuntimeError,
            "expected target dtype to be Long or Byte, but got Float",
        ),
        (lambda: nn.nll_loss(x, m.tensor([1, 0, 5])), IndexError, "Target 5 is out of bounds."),
        (lambda: nn.nll_loss(x, m.tensor([-1, 0, 1])), IndexError, "Target -1 is out of bounds."),
        (
            lambda: nn.nll_loss(x, m.tensor([1, 0])),
            ValueError,
            "Expected input batch_size (3) to match target batch_size (2).",
        ),
        (
            lambda: nn.nll_loss(x, m.tensor([1, 0, 0]), reduction="foo"),
            ValueError,
            "foo is not a valid value for reduction",
        ),
        (
            lambda: nn.mse_loss(x, x, reduction="foo"),
            ValueError,
            "foo is not a valid value for reduction",
        ),
        (
            lambda: nn.nll_loss(m.zeros(2, 3, 4), m.zeros(2, 3, dtype=long)),
            RuntimeError,
            "Expected target size [2, 4], got [2, 3]",
        ),
        (
            lambda: nn.nll_loss(m.zeros(2), m.zeros(2, dtype=long)),
            ValueError,
            "For 1D input, 1D target must have size 1, but got target size: 2",
        ),
        (
            lambda: nn.nll_loss(m.zeros(2, 3), m.zeros(2, dtype=long), m.ones(4)),
            RuntimeError,
            "weight tensor should be defined either for all 3 classes or no classes but got weight "
            "tensor of shape: [4]",
        ),
    ]


@pytest.mark.parametrize("case", range(len(_errors(engine))))
def test_errors(case: int) -> None:
    call, kind, message = _errors(engine)[case]
    with pytest.raises(kind, match=re.escape(message) + "$"):
        call()


@pytest.mark.oracle
@pytest.mark.parametrize("case", range(len(_errors(engine))))
def test_error_messages_are_pytorchs(torch: Any, case: int) -> None:
    call, kind, message = _errors(torch)[case]
    with pytest.raises(kind) as caught:
        call()
    assert str(caught.value).splitlines()[0] == message


# -- oracle ----------------------------------------------------------------------
def _pair(torch: Any, array: np.ndarray[Any, Any]) -> tuple[Tensor, Any]:
    """The same float64 leaf in engine and in PyTorch."""
    return (
        engine.tensor(array, dtype=engine.float64, requires_grad=True),
        torch.tensor(array, dtype=torch.float64, requires_grad=True),
    )


def _assert_same_grads(ours: list[Tensor], theirs: list[Any]) -> None:
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.oracle
def test_mlp_classifier_matches_pytorch(torch: Any) -> None:
    """Two-layer MLP on a batch, cross-entropy loss: value and every parameter gradient."""
    shapes = {"w1": (16, 5), "b1": (16,), "w2": (3, 16), "b2": (3,)}
    params = {k: _pair(torch, RNG.standard_normal(s) * 0.5) for k, s in shapes.items()}
    x0 = RNG.standard_normal((8, 5))
    y0 = RNG.integers(0, 3, size=8)

    def loss(m: Any, nn: Any, p: dict[str, Any]) -> Any:
        hidden = nn.relu(nn.linear(m.tensor(x0), p["w1"], p["b1"]))
        return nn.cross_entropy(nn.linear(hidden, p["w2"], p["b2"]), m.tensor(y0))

    ours = loss(engine, F, {k: v[0] for k, v in params.items()})
    theirs = loss(torch, torch.nn.functional, {k: v[1] for k, v in params.items()})
    ours.backward()
    theirs.backward()
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-12)
    _assert_same_grads([v[0] for v in params.values()], [v[1] for v in params.values()])


@pytest.mark.oracle
def test_rnn_cell_matches_pytorch(torch: Any) -> None:
    """``h' = tanh(W_ih x + b_ih + W_hh h + b_hh)``, three steps, against ``torch.nn.RNNCell``."""
    cell = torch.nn.RNNCell(4, 6).double()
    params = [
        p.detach().numpy() for p in (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    ]
    w_ih, w_hh, b_ih, b_hh = (engine.tensor(p, requires_grad=True) for p in params)
    xs0 = RNG.standard_normal((3, 2, 4))
    h0 = RNG.standard_normal((2, 6))
    target0 = RNG.standard_normal((3, 2, 6))
    h, th = _pair(torch, h0)

    states, tstates = [], []
    ours_h, theirs_h = h, th
    for step in range(3):
        ours_h = F.tanh(
            F.linear(engine.tensor(xs0[step]), w_ih, b_ih) + F.linear(ours_h, w_hh, b_hh)
        )
        theirs_h = cell(torch.tensor(xs0[step]), theirs_h)
        states.append(ours_h)
        tstates.append(theirs_h)
    ours = F.mse_loss(engine.stack(states), engine.tensor(target0))
    theirs = torch.nn.functional.mse_loss(torch.stack(tstates), torch.tensor(target0))
    np.testing.assert_allclose(states[0].detach().numpy(), tstates[0].detach().numpy(), rtol=1e-12)
    ours.backward()
    theirs.backward()
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-12)
    _assert_same_grads(
        [w_ih, w_hh, b_ih, b_hh, h],
        [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh, th],
    )


@pytest.mark.oracle
@pytest.mark.parametrize("name", sorted(NLL_CASES))
def test_losses_match_pytorch(torch: Any, name: str) -> None:
    shape, target, kwargs = NLL_CASES[name]
    t = target()
    tkwargs = dict(kwargs)
    if "weight" in kwargs:
        tkwargs["weight"] = torch.tensor(kwargs["weight"].numpy(), dtype=torch.float64)
    x0 = RNG.standard_normal(shape)
    w0 = RNG.standard_normal(() if kwargs.get("reduction", "mean") != "none" else t.shape)
    for ours_fn, theirs_fn in [
        (F.nll_loss, torch.nn.functional.nll_loss),
        (F.cross_entropy, torch.nn.functional.cross_entropy),
    ]:
        x, tx = _pair(torch, x0)
        ours = ours_fn(x, t, **kwargs)
        theirs = theirs_fn(tx, torch.tensor(t.numpy()), **tkwargs)
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)
        (ours * engine.tensor(w0)).sum().backward()
        (theirs * torch.tensor(w0)).sum().backward()
        _assert_same_grads([x], [tx])


@pytest.mark.oracle
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_and_soft_cross_entropy_match_pytorch(torch: Any, reduction: str) -> None:
    x0, y0 = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
    p0 = RNG.dirichlet(np.ones(3), size=4)
    (x, tx), (y, ty) = _pair(torch, x0), _pair(torch, y0)
    ours = (
        F.mse_loss(x, y, reduction=reduction).sum()
        + F.cross_entropy(x, engine.tensor(p0), reduction=reduction).sum()
    )
    nn = torch.nn.functional
    theirs = (
        nn.mse_loss(tx, ty, reduction=reduction).sum()
        + nn.cross_entropy(tx, torch.tensor(p0), reduction=reduction).sum()
    )
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-12)
    ours.backward()
    theirs.backward()
    _assert_same_grads([x, y], [tx, ty])


@pytest.mark.oracle
def test_second_order_matches_pytorch(torch: Any) -> None:
    x0, w0 = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 3))
    t0 = np.array([0, 2, 1, 2])

    def run(m: Any, nn: Any, grad: Callable[..., Any], x: Any, w: Any) -> tuple[Any, Any]:
        loss = nn.cross_entropy(nn.tanh(nn.linear(x, w)), m.tensor(t0))
        (gw,) = grad(loss, w, create_graph=True)
        (gx,) = grad((gw * gw).sum(), x)
        return gw, gx

    (x, tx), (w, tw) = _pair(torch, x0), _pair(torch, w0)
    gw, gx = run(engine, F, engine.grad, x, w)
    tgw, tgx = run(torch, torch.nn.functional, torch.autograd.grad, tx, tw)
    np.testing.assert_allclose(gw.detach().numpy(), tgw.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-10)
