"""Functional ops record PyTorch's graph, node for node, with PyTorch's values and gradients."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine
import engine.functional as F

Signature = tuple[str, tuple[Any, ...]] | None
"""A node's name and its next functions' signatures, in edge order (``None``: no edge)."""

_rng = np.random.default_rng(7)
X2 = _rng.standard_normal((4, 5)).astype(np.float32)
X3 = _rng.standard_normal((2, 5, 3)).astype(np.float32)
X4 = _rng.standard_normal((2, 5, 3, 2)).astype(np.float32)
X5 = _rng.standard_normal((2, 5, 3, 2, 2)).astype(np.float32)
T2 = np.array([1, 0, 4, 2])
T2_IGNORED = np.array([1, -100, 4, 2])
T3 = _rng.integers(0, 5, (2, 3))
T4 = _rng.integers(0, 5, (2, 3, 2))
T5 = _rng.integers(0, 5, (2, 3, 2, 2))
PROBS = _rng.random((4, 5)).astype(np.float32)
WEIGHT = _rng.random(5).astype(np.float32) + 0.5
W = _rng.standard_normal((6, 5)).astype(np.float32)
B = _rng.standard_normal(6).astype(np.float32)


def signature(node: Any) -> Signature:
    if node is None:
        return None
    name = node.name().removeprefix("torch::autograd::")
    return (name, tuple(signature(fn) for fn, _ in node.next_functions))


Program = Callable[[Any, Any, Callable[[np.ndarray[Any, Any]], Any]], Any]


def _leaf_maker(m: Any, leaves: list[Any]) -> Callable[[np.ndarray[Any, Any]], Any]:
    def leaf(array: np.ndarray[Any, Any]) -> Any:
        t = m.tensor(array, requires_grad=True)
        leaves.append(t)
        return t

    return leaf


def _noncontiguous(m: Any, leaf: Any, array: np.ndarray[Any, Any]) -> Any:
    """A leaf whose first and last dimensions are swapped back: a non-contiguous view."""
    return leaf(np.ascontiguousarray(np.swapaxes(array, 0, -1))).transpose(0, -1)


PROGRAMS: dict[str, Program] = {
    "linear 2-D": lambda m, f, leaf: f.linear(leaf(X2), leaf(W), leaf(B)),
    "linear 2-D, no bias": lambda m, f, leaf: f.linear(leaf(X2), leaf(W)),
    "linear 2-D, constant input": lambda m, f, leaf: f.linear(m.tensor(X2), leaf(W), leaf(B)),
    "linear 2-D, bias only": lambda m, f, leaf: f.linear(m.tensor(X2), m.tensor(W), leaf(B)),
    "linear 1-D": lambda m, f, leaf: f.linear(leaf(X2[0]), leaf(W), leaf(B)),
    "linear 1-D, no bias": lambda m, f, leaf: f.linear(leaf(X2[0]), leaf(W)),
    "linear 3-D": lambda m, f, leaf: f.linear(leaf(X4[0]), leaf(W[:, :2]), leaf(B)),
    "linear 3-D, no bias": lambda m, f, leaf: f.linear(leaf(X4[0]), leaf(W[:, :2])),
    "linear 4-D": lambda m, f, leaf: f.linear(leaf(X4), leaf(W[:, :2]), leaf(B)),
    "linear 3-D, non-contiguous": lambda m, f, leaf: f.linear(
        _noncontiguous(m, leaf, X4[0]), leaf(W[:, :2]), leaf(B)
    ),
    "linear 4-D, non-contiguous": lambda m, f, leaf: f.linear(
        _noncontiguous(m, leaf, X4), leaf(W[:, :2]), leaf(B)
    ),
    "addmm": lambda m, f, leaf: m.addmm(leaf(B), leaf(X2), leaf(W.T.copy()), beta=0.5, alpha=2.0),
    "mse_loss": lambda m, f, leaf: f.mse_loss(leaf(X2), m.tensor(PROBS)),
    "mse_loss, both": lambda m, f, leaf: f.mse_loss(leaf(X2), leaf(PROBS), reduction="sum"),
    "mse_loss none": lambda m, f, leaf: f.mse_loss(leaf(X2), m.tensor(PROBS), reduction="none"),
    "nll_loss": lambda m, f, leaf: f.nll_loss(leaf(X2), m.tensor(T2)),
    "nll_loss 1-D": lambda m, f, leaf: f.nll_loss(leaf(X2[0]), m.tensor(T2[0])),
    "nll_loss 1-D none": lambda m, f, leaf: f.nll_loss(
        leaf(X2[0]), m.tensor(T2[0]), reduction="none"
    ),
    "nll_loss 3-D": lambda m, f, leaf: f.nll_loss(leaf(X3), m.tensor(T3)),
    "nll_loss 3-D none": lambda m, f, leaf: f.nll_loss(leaf(X3), m.tensor(T3), reduction="none"),
    "nll_loss 4-D": lambda m, f, leaf: f.nll_loss(leaf(X4), m.tensor(T4)),
    "nll_loss 4-D none": lambda m, f, leaf: f.nll_loss(leaf(X4), m.tensor(T4), reduction="none"),
    "nll_loss 5-D sum": lambda m, f, leaf: f.nll_loss(leaf(X5), m.tensor(T5), reduction="sum"),
    "nll_loss 3-D, non-contiguous": lambda m, f, leaf: f.nll_loss(
        _noncontiguous(m, leaf, X3), m.tensor(T3)
    ),
    "cross_entropy": lambda m, f, leaf: f.cross_entropy(leaf(X2), m.tensor(T2)),
    "cross_entropy weight": lambda m, f, leaf: f.cross_entropy(
        leaf(X2), m.tensor(T2_IGNORED), m.tensor(WEIGHT)
    ),
    "cross_entropy 1-D": lambda m, f, leaf: f.cross_entropy(leaf(X2[0]), m.tensor(T2[0])),
    "cross_entropy 3-D": lambda m, f, leaf: f.cross_entropy(leaf(X3), m.tensor(T3)),
    "cross_entropy 4-D": lambda m, f, leaf: f.cross_entropy(leaf(X4), m.tensor(T4)),
    "cross_entropy probabilities": lambda m, f, leaf: f.cross_entropy(leaf(X2), m.tensor(PROBS)),
    "cross_entropy probabilities sum": lambda m, f, leaf: f.cross_entropy(
        leaf(X2), m.tensor(PROBS), reduction="sum"
    ),
    "cross_entropy probabilities none": lambda m, f, leaf: f.cross_entropy(
        leaf(X2), m.tensor(PROBS), reduction="none"
    ),
    "cross_entropy probabilities weight": lambda m, f, leaf: f.cross_entropy(
        leaf(X2), m.tensor(PROBS), m.tensor(WEIGHT)
    ),
    "cross_entropy probabilities smoothed": lambda m, f, leaf: f.cross_entropy(
        leaf(X2), m.tensor(PROBS), label_smoothing=0.2
    ),
    **{
        f"cross_entropy smoothed {reduction}{', weight' if weighted else ''}": (
            lambda m, f, leaf, reduction=reduction, weighted=weighted: f.cross_entropy(
                leaf(X2),
                m.tensor(T2_IGNORED),
                m.tensor(WEIGHT) if weighted else None,
                ignore_index=-100,
                reduction=reduction,
                label_smoothing=0.1,
            )
        )
        for reduction in ("mean", "sum", "none")
        for weighted in (False, True)
    },
    "cross_entropy smoothed 3-D": lambda m, f, leaf: f.cross_entropy(
        leaf(X3), m.tensor(T3), label_smoothing=0.3
    ),
    "softmax": lambda m, f, leaf: f.softmax(leaf(X2), dim=1),
    "log_softmax": lambda m, f, leaf: f.log_softmax(leaf(X2), dim=0),
    "sigmoid": lambda m, f, leaf: f.sigmoid(leaf(X2)),
    "tanh": lambda m, f, leaf: f.tanh(leaf(X2)),
    "relu": lambda m, f, leaf: f.relu(leaf(X2)),
    "1.0 / x": lambda m, f, leaf: 1.0 / leaf(X2),
    "2 / x": lambda m, f, leaf: 2 / leaf(X2),
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", PROGRAMS)
def test_graph_values_and_gradients_are_pytorchs(torch: Any, name: str) -> None:
    program = PROGRAMS[name]
    ours: list[Any] = []
    theirs: list[Any] = []
    got = program(engine, F, _leaf_maker(engine, ours))
    expected = program(torch, torch.nn.functional, _leaf_maker(torch, theirs))
    assert signature(got.grad_fn) == signature(expected.grad_fn)
    assert got.shape == tuple(expected.shape)
    np.testing.assert_allclose(
        got.detach().numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6
    )
    seed = np.linspace(0.5, 1.5, got.numel(), dtype=np.float32).reshape(got.shape)
    got.backward(engine.tensor(seed))
    expected.backward(torch.tensor(seed))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-6)


def _double(x: np.ndarray[Any, Any]) -> engine.Tensor:
    return engine.tensor(x.astype(np.float64), requires_grad=True)


@pytest.mark.parametrize("input_shape", [(4, 5), (5,), (2, 4, 5), (2, 2, 4, 5)])
def test_linear_gradcheck(input_shape: tuple[int, ...]) -> None:
    x = _double(_rng.standard_normal(input_shape))
    w, b = _double(W), _double(B)
    assert engine.gradcheck(F.linear, (x, w, b))
    assert engine.gradcheck(F.linear, (x, w))


def test_addmm_gradcheck_and_gradgradcheck() -> None:
    bias, a, b = _double(B), _double(X2), _double(W.T.copy())

    def scaled(bias: engine.Tensor, a: engine.Tensor, b: engine.Tensor) -> engine.Tensor:
        return engine.addmm(bias, a, b, beta=0.5, alpha=2.0)

    assert engine.gradcheck(scaled, (bias, a, b))
    assert engine.gradgradcheck(scaled, (bias, a, b))
    assert engine.gradcheck(engine.addmm, (_double(np.ones((4, 6))), a, b))


def test_addmm_with_beta_zero_ignores_nan_in_input() -> None:
    out = engine.addmm(
        engine.full((6,), float("nan")), engine.tensor(X2), engine.tensor(W.T), beta=0
    )
    assert np.isfinite(out.numpy()).all()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_label_smoothing_gradcheck(reduction: str, weighted: bool) -> None:
    weight = engine.tensor(WEIGHT.astype(np.float64)) if weighted else None

    def loss(x: engine.Tensor) -> engine.Tensor:
        return F.cross_entropy(
            x, engine.tensor(T2_IGNORED), weight, reduction=reduction, label_smoothing=0.25
        )

    assert engine.gradcheck(loss, (_double(X2),))


@pytest.mark.parametrize("shape_and_target", [(X3, T3), (X4, T4), (X5, T5), (X2[0], T2[0])])
def test_nll_loss_of_every_rank_gradcheck(shape_and_target: tuple[Any, Any]) -> None:
    x, target = shape_and_target

    def loss(t: engine.Tensor) -> engine.Tensor:
        return F.nll_loss(t, engine.tensor(target), reduction="none")

    assert engine.gradcheck(loss, (_double(x),))
    assert engine.gradgradcheck(loss, (_double(x),))


def test_label_smoothing_outside_zero_one_is_refused() -> None:
    with pytest.raises(
        RuntimeError, match=r"^label_smoothing must be between 0.0 and 1.0. Got: 1.5$"
    ):
        F.cross_entropy(engine.tensor(X2), engine.tensor(T2), label_smoothing=1.5)
