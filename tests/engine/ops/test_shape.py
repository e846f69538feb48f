"""Shape ops: transpose, permute, T, unsqueeze, squeeze, flatten, cat, stack, view/expand_as."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine
from engine import Tensor

RNG = np.random.default_rng(0)


def leaf(*shape: int) -> Tensor:
    """A float64 leaf that requires grad, with distinct random values."""
    return engine.tensor(RNG.standard_normal(shape), dtype=engine.float64, requires_grad=True)


def weights(*shape: int) -> Tensor:
    """Fixed random weights, so that every output element gets a distinct gradient."""
    return engine.tensor(RNG.standard_normal(shape), dtype=engine.float64)


# -- gradients -------------------------------------------------------------------
GRADCHECKS: dict[str, tuple[Callable[..., Tensor], tuple[int, ...]]] = {
    "transpose": (lambda x: x.transpose(0, 2), (2, 3, 4)),
    "transpose_negative": (lambda x: x.transpose(-1, 0), (2, 3)),
    "t": (lambda x: x.t(), (2, 3)),
    "t_1d": (lambda x: x.t(), (3,)),
    "T": (lambda x: x.T, (2, 3)),
    "permute": (lambda x: x.permute(2, 0, 1), (2, 3, 4)),
    "permute_tuple": (lambda x: x.permute((1, -1, 0)), (2, 3, 4)),
    "unsqueeze": (lambda x: x.unsqueeze(1), (2, 3)),
    "unsqueeze_last": (lambda x: x.unsqueeze(-1), (2, 3)),
    "squeeze_all": (lambda x: x.squeeze(), (1, 3, 1)),
    "squeeze_dim": (lambda x: x.squeeze(-1), (2, 3, 1)),
    "squeeze_dims": (lambda x: x.squeeze((0, 2)), (1, 3, 1)),
    "squeeze_not_one": (lambda x: x.squeeze(1), (2, 3)),
    "flatten": (lambda x: x.flatten(), (2, 3, 4)),
    "flatten_middle": (lambda x: x.flatten(1, 2), (2, 3, 4, 1)),
    "flatten_noncontiguous": (lambda x: x.transpose(0, 1).flatten(), (2, 3)),
    "view_as": (lambda x: x.view_as(engine.zeros(6, dtype=engine.float64)), (2, 3)),
    "expand_as": (lambda x: x.expand_as(engine.zeros(4, 2, 3)), (2, 1)),
}


@pytest.mark.parametrize("name", sorted(GRADCHECKS))
def test_gradcheck_single_input(name: str) -> None:
    fn, shape = GRADCHECKS[name]
    assert engine.gradcheck(fn, (leaf(*shape),))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_gradcheck(dim: int) -> None:
    a, b, c = leaf(2, 3), leaf(2, 3), leaf(2, 3)
    assert engine.gradcheck(lambda a, b, c: engine.cat([a, b, c], dim), (a, b, c))


def test_cat_of_different_lengths_and_a_constant() -> None:
    a, b = leaf(1, 3), leaf(4, 3)
    const = engine.ones(2, 3, dtype=engine.float64)
    out = engine.cat((a, const, b))
    assert out.shape == (7, 3)
    assert out.grad_fn.next_functions[1] == (None, 0)
    w = weights(7, 3)
    (out * w).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), w.numpy()[:1])
    np.testing.assert_array_equal(b.grad.numpy(), w.numpy()[3:])


def test_cat_gradient_pieces_are_views_of_the_incoming_gradient() -> None:
    a, b = leaf(2, 3), leaf(2, 2)
    seen: dict[str, Tensor] = {}
    mid_a, mid_b = a * 1.0, b * 1.0
    mid_a.register_hook(lambda g: seen.setdefault("a", g))
    mid_b.register_hook(lambda g: seen.setdefault("b", g))
    out = engine.cat([mid_a, mid_b], dim=1)
    w = weights(2, 5)
    (out * w).sum().backward()
    base = seen["a"]._base
    assert base is not None and seen["b"]._base is base
    assert base.shape == (2, 5) and seen["a"]._version_counter is base._version_counter
    np.testing.assert_array_equal(seen["a"].numpy(), w.numpy()[:, :3])
    np.testing.assert_array_equal(b.grad.numpy(), w.numpy()[:, 3:])


def test_cat_grad_of_some_inputs_only() -> None:
    a, b, c = leaf(2), leaf(3), leaf(1)
    w = weights(6)
    loss = (engine.cat([a, b, c]) * w).sum()
    (gb,) = engine.autograd.grad(loss, [b])
    np.testing.assert_array_equal(gb.numpy(), w.numpy()[2:5])
    assert a.grad is None and b.grad is None and c.grad is None


def test_cat_second_order_through_create_graph() -> None:
    x = leaf(3)
    out = engine.cat([x * x, x * 3.0, x.sin()])
    (g,) = engine.autograd.grad(out.sum(), [x], create_graph=True)
    xs = x.detach().numpy()
    np.testing.assert_allclose(g.detach().numpy(), 2 * xs + 3.0 + np.cos(xs))
    assert g.grad_fn is not None
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2.0 - np.sin(xs))


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_stack_gradcheck(dim: int) -> None:
    a, b = leaf(2, 3), leaf(2, 3)
    assert engine.gradcheck(lambda a, b: engine.stack((a, b), dim), (a, b))


def test_stack_values_match_numpy() -> None:
    a, b = leaf(2, 3), leaf(2, 3)
    np.testing.assert_array_equal(
        engine.stack([a, b], 1).detach().numpy(),
        np.stack([a.detach().numpy(), b.detach().numpy()], 1),
    )


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x.transpose(0, 1) * x.t()).sum(0),
        lambda x: engine.cat([x * x, x.T.T], 1),
        lambda x: engine.stack([x * x, x], 0).permute(2, 0, 1),
        lambda x: (x.unsqueeze(0) * x.unsqueeze(1)).squeeze().flatten(),
    ],
)
def test_second_order(fn: Callable[[Tensor], Tensor]) -> None:
    """Gradcheck of the gradient itself: the backward formulas are differentiable."""

    def first_grad(x: Tensor) -> Tensor:
        with engine.enable_grad():  # gradcheck's finite differences run under no_grad
            out = fn(x)
            (g,) = engine.grad((out * out).sum(), x, create_graph=True)
        return g

    assert engine.gradcheck(first_grad, (leaf(3, 3),))


# -- node names ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fn", "name"),
    [
        (lambda x: x.transpose(0, 1), "TransposeBackward0"),
        (lambda x: x.t(), "TBackward0"),
        (lambda x: x.T, "PermuteBackward0"),
        (lambda x: x.permute(1, 0), "PermuteBackward0"),
        (lambda x: x.unsqueeze(0), "UnsqueezeBackward0"),
        (lambda x: x.unsqueeze(0).squeeze(), "SqueezeBackward0"),
        (lambda x: x.unsqueeze(0).squeeze(0), "SqueezeBackward1"),
        (lambda x: x.unsqueeze(0).squeeze((0, 1)), "SqueezeBackward2"),
        (lambda x: x.flatten(), "ViewBackward0"),
        (lambda x: x.view_as(x), "ViewBackward0"),
        (lambda x: x.expand_as(x), "ExpandBackward0"),
        (lambda x: engine.cat([x, x]), "CatBackward0"),
        (lambda x: engine.stack([x, x]), "StackBackward0"),
    ],
)
def test_node_names(fn: Callable[[Tensor], Tensor], name: str) -> None:
    assert fn(leaf(2, 3)).grad_fn.name() == name


def test_flatten_of_the_covered_range_returns_input() -> None:
    x = leaf(2, 3)
    assert x.flatten(1) is x
    assert engine.tensor(2.0).flatten().shape == (1,)


def test_no_node_without_grad() -> None:
    x = engine.randn(2, 3)
    assert x.transpose(0, 1).grad_fn is None
    with engine.no_grad():
        assert engine.cat([leaf(2), leaf(2)]).grad_fn is None


# -- views ---------------------------------------------------------------------
VIEWS: dict[str, Callable[[Tensor], Tensor]] = {
    "transpose": lambda x: x.transpose(0, 1),
    "t": lambda x: x.t(),
    "T": lambda x: x.T,
    "permute": lambda x: x.permute(1, 0),
    "unsqueeze": lambda x: x.unsqueeze(1),
    "squeeze": lambda x: x.unsqueeze(0).squeeze(0),
    "expand": lambda x: x.unsqueeze(0).expand(2, 2, 3),
    "view": lambda x: x.view(3, 2),
    "flatten": lambda x: x.flatten(),
    "view_as": lambda x: x.view_as(engine.zeros(6)),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_share_memory_and_version(name: str) -> None:
    base = engine.zeros(2, 3, dtype=engine.float64)
    v = VIEWS[name](base)
    assert v._base is base
    base.add_(1.0)
    assert v._version == base._version == 1
    np.testing.assert_array_equal(v.numpy(), np.ones(v.shape))


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_inplace_on_base_invalidates_a_saved_view(name: str) -> None:
    x = leaf(2, 3)
    base = x * 1.0
    v = VIEWS[name](base)
    y = (v * v).sum()  # saves the view
    base.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_inplace_on_view_invalidates_the_saved_base() -> None:
    base = engine.zeros(2, 3, dtype=engine.float64)
    w = leaf(2, 3)
    y = (base * w).sum()  # saves base
    base.transpose(0, 1).add_(1.0)
    assert base._version == 1
    np.testing.assert_array_equal(base.numpy(), np.ones((2, 3)))
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0"):
        y.backward()


def test_view_of_view_points_at_the_root_base() -> None:
    base = engine.zeros(2, 3)
    assert base.t().unsqueeze(0)._base is base


def test_cat_and_stack_copy() -> None:
    x = engine.zeros(2)
    out = engine.cat([x, x])
    x.add_(1.0)
    assert out._base is None and out._version == 0
    np.testing.assert_array_equal(out.numpy(), np.zeros(4))


def test_T_warns_beyond_two_dimensions() -> None:
    with pytest.warns(UserWarning, match="x.T` on tensors of dimension other than 2"):
        assert engine.zeros(2, 3, 4).T.shape == (4, 3, 2)


# -- errors ----------------------------------------------------------------------
ERRORS: list[tuple[Callable[[Any], Any], type[Exception], str]] = [
    (
        lambda m: m.zeros(3, 4).transpose(0, 2),
        IndexError,
        "Dimension out of range (expected to be in range of [-2, 1], but got 2)",
    ),
    (
        lambda m: m.zeros(3, 4).permute(0),
        RuntimeError,
        "permute(sparse_coo): number of dimensions in the tensor input does not match the length "
        "of the desired ordering of dimensions i.e. input.dim() = 2 is not equal to len(dims) = 1",
    ),
    (
        lambda m: m.zeros(3, 4).permute(0, 0),
        RuntimeError,
        "permute(): duplicate dims are not allowed.",
    ),
    (
        lambda m: m.zeros(3, 4).permute(0, 5),
        IndexError,
        "Dimension out of range (expected to be in range of [-2, 1], but got 5)",
    ),
    (
        lambda m: m.zeros(3, 4).unsqueeze(3),
        IndexError,
        "Dimension out of range (expected to be in range of [-3, 2], but got 3)",
    ),
    (
        lambda m: m.zeros(3, 4).squeeze(2),
        IndexError,
        "Dimension out of range (expected to be in range of [-2, 1], but got 2)",
    ),
    (
        lambda m: m.zeros(2, 3, 4).t(),
        RuntimeError,
        "t() expects a tensor with <= 2 dimensions, but self is 3D",
    ),
    (
        lambda m: m.zeros(3, 4).flatten(1, 0),
        RuntimeError,
        "flatten() has invalid args: start_dim cannot come after end_dim",
    ),
    (lambda m: m.cat([]), ValueError, "torch.cat(): expected a non-empty list of Tensors"),
    (
        lambda m: m.cat([m.zeros(3, 4), m.zeros(3, 5)]),
        RuntimeError,
        "Sizes of tensors must match except in dimension 0. Expected size 4 but got size 5 for "
        "tensor number 1 in the list.",
    ),
    (
        lambda m: m.cat([m.zeros(3, 4), m.zeros(3)]),
        RuntimeError,
        "Tensors must have same number of dimensions: got 2 and 1",
    ),
    (
        lambda m: m.cat([m.zeros(3, 4), m.zeros(3, 4)], 2),
        IndexError,
        "Dimension out of range (expected to be in range of [-2, 1], but got 2)",
    ),
    (
        lambda m: m.cat([m.zeros(()), m.zeros(())]),
        RuntimeError,
        "zero-dimensional tensor (at position 0) cannot be concatenated",
    ),
    (lambda m: m.stack([]), RuntimeError, "stack expects a non-empty TensorList"),
    (
        lambda m: m.stack([m.zeros(3, 4), m.zeros(3)]),
        RuntimeError,
        "stack expects each tensor to be equal size, but got [3, 4] at entry 0 and [3] at entry 1",
    ),
    (
        lambda m: m.stack([m.zeros(3, 4), m.zeros(3, 4)], 3),
        IndexError,
        "Dimension out of range (expected to be in range of [-3, 2], but got 3)",
    ),
]


@pytest.mark.parametrize(("call", "kind", "message"), ERRORS)
def test_errors(call: Callable[[Any], Any], kind: type[Exception], message: str) -> None:
    with pytest.raises(kind, match=re.escape(message) + "$"):
        call(engine)


@pytest.mark.oracle
@pytest.mark.parametrize(("call", "kind", "message"), ERRORS)
def test_error_messages_are_pytorchs(
    torch: Any, call: Callable[[Any], Any], kind: type[Exception], message: str
) -> None:
    with pytest.raises(kind) as caught:
        call(torch)
    assert str(caught.value).splitlines()[0] == message


# -- oracle ----------------------------------------------------------------------
@pytest.mark.oracle
def test_values_and_gradients_match_pytorch(torch: Any) -> None:
    a0, b0 = RNG.standard_normal((2, 3, 1)), RNG.standard_normal((2, 3, 1))
    w0 = RNG.standard_normal((3, 4, 2))

    def run(m: Any, a: Any, b: Any, w: Any) -> Any:
        x = m.cat([a, b * b], 2)  # (2, 3, 2)
        x = x.permute(1, 2, 0).unsqueeze(1)  # (3, 1, 2, 2)
        x = m.stack([x.squeeze(1), x.transpose(2, 3).squeeze()], 1)  # (3, 2, 2, 2)
        x = x.flatten(2).T  # (4, 2, 3)
        return (x.permute(2, 0, 1) * w).sum()

    a, b = engine.tensor(a0, requires_grad=True), engine.tensor(b0, requires_grad=True)
    ta, tb = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    with pytest.warns(UserWarning):
        out = run(engine, a, b, engine.tensor(w0))
    with pytest.warns(UserWarning):
        tout = run(torch, ta, tb, torch.tensor(w0))
    out.backward()
    tout.backward()
    np.testing.assert_allclose(out.item(), tout.item(), rtol=1e-12)
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-12)


@pytest.mark.oracle
@pytest.mark.parametrize("name", sorted(set(GRADCHECKS) - {"view_as", "expand_as"}))
def test_node_names_and_shapes_match_pytorch(torch: Any, name: str) -> None:
    fn, shape = GRADCHECKS[name]
    x0 = RNG.standard_normal(shape)
    out = fn(engine.tensor(x0, requires_grad=True))
    tout = fn(torch.tensor(x0, requires_grad=True))
    np.testing.assert_array_equal(out.detach().numpy(), tout.detach().numpy())
    assert out.grad_fn.name() == tout.grad_fn.name()
