"""Indexing: ``x[key]`` (basic and advanced), ``x[key] = value``, select, narrow, index_put."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine
from engine import Tensor

RNG = np.random.default_rng(1)


def leaf(*shape: int) -> Tensor:
    """A float64 leaf that requires grad, with distinct random values."""
    return engine.tensor(RNG.standard_normal(shape), dtype=engine.float64, requires_grad=True)


MASK = np.array(
    [[True, False, True, False], [False, False, False, True], [True, True, False, False]]
)

# Keys written once with NumPy/Python values; ``as_engine``/``as_torch`` turn the arrays
# into tensors of the library under test.
KEYS: dict[str, Any] = {
    "int": 1,
    "negative_int": -1,
    "int_pair": (2, -3),
    "slice": slice(1, None),
    "slice_step": (slice(None), slice(0, 4, 2)),
    "slice_clamped": slice(-10, 10),
    "empty_slice": slice(2, 1),
    "none": (None, 1),
    "ellipsis": (Ellipsis, 2),
    "ellipsis_none": (Ellipsis, None),
    "select_then_slice": (1, slice(1, 3)),
    "list_repeated": [0, 2, 0, 0],
    "array_negative": np.array([-1, 0, -1]),
    "array_2d": np.array([[0, 1], [2, 2]]),
    "two_arrays": (np.array([0, 2, 2]), np.array([3, -1, 3])),
    "arrays_broadcast": (np.array([[0], [2]]), np.array([1, 3, 1])),
    "slice_and_array": (slice(None), np.array([3, 3, 0])),
    "int_and_array": (1, np.array([0, 0, 2])),
    "array_none_array": (np.array([0, 1]), None, np.array([1, 1])),
    "mask": MASK,
    "row_mask": np.array([True, False, True]),
    "column_mask": (slice(None), np.array([False, True, True, False])),
    "zero_dim_int_tensor": np.array(2),
    "true": True,
    "false": False,
}


def as_engine(key: Any) -> Any:
    """NumPy arrays in ``key`` as engine tensors (lists stay lists)."""
    if isinstance(key, tuple):
        return tuple(as_engine(k) for k in key)
    return engine.tensor(key) if isinstance(key, np.ndarray) else key


def as_torch(torch: Any, key: Any) -> Any:
    if isinstance(key, tuple):
        return tuple(as_torch(torch, k) for k in key)
    return torch.tensor(key) if isinstance(key, np.ndarray) else key


# -- getitem --------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(KEYS))
def test_getitem_gradcheck(name: str) -> None:
    key = as_engine(KEYS[name])
    assert engine.gradcheck(lambda x: x[key], (leaf(3, 4),))


# NumPy orders the dimensions of these differently from PyTorch (see the oracle tests).
NUMPY_DIFFERS = {"int_and_array", "true", "false"}


@pytest.mark.parametrize("name", sorted(set(KEYS) - NUMPY_DIFFERS))
def test_getitem_values_match_numpy(name: str) -> None:
    key = KEYS[name]
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(engine.tensor(x)[as_engine(key)].numpy(), x[key])


def test_repeated_indices_accumulate() -> None:
    x = leaf(3, 2)
    x[[0, 2, 0, 0]].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[3.0, 3.0], [0.0, 0.0], [1.0, 1.0]])


def test_negative_and_positive_index_of_one_element_accumulate() -> None:
    x = leaf(3)
    x[engine.tensor([-1, 2, 0])].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 2.0])


def test_mask_gradient_is_the_mask() -> None:
    x = leaf(3, 4)
    x[engine.tensor(MASK)].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), MASK.astype(float))


@pytest.mark.parametrize(
    "key",
    [1, (slice(None), slice(1, 3)), [0, 0, 2], (np.array([2, 2]), np.array([1, 1])), MASK],
    ids=["select", "slice", "repeated", "two_arrays", "mask"],
)
def test_second_order(key: Any) -> None:
    key = as_engine(key)

    def first_grad(x: Tensor) -> Tensor:
        with engine.enable_grad():  # gradcheck's finite differences run under no_grad
            y = x[key]
            (g,) = engine.grad((y * y * y).sum(), x, create_graph=True)
        return g

    assert engine.gradcheck(first_grad, (leaf(3, 4),))


@pytest.mark.parametrize(
    ("key", "name"),
    [
        (0, "SelectBackward0"),
        ((1, 2), "SelectBackward0"),
        (slice(1, None), "SliceBackward0"),
        (slice(None), "SliceBackward0"),
        ((slice(None), slice(None)), "AliasBackward0"),
        (Ellipsis, "AliasBackward0"),
        (None, "UnsqueezeBackward0"),
        ((slice(1, 2), 0), "SelectBackward0"),
        ([0, 0], "IndexBackward0"),
        (MASK, "IndexBackward0"),
        (True, "IndexBackward0"),
        (np.array(1), "SelectBackward0"),
    ],
)
def test_node_names(key: Any, name: str) -> None:
    assert leaf(3, 4)[as_engine(key)].grad_fn.name() == name


@pytest.mark.parametrize(
    ("key", "name"),
    [
        (0, "SelectBackwardBackward0"),
        (slice(1, 3), "SliceBackwardBackward0"),
        ([0, 0], "IndexPutBackward0"),
    ],
)
def test_double_backward_node_names(key: Any, name: str) -> None:
    x = leaf(3, 4)
    y = x[key]
    (g,) = engine.grad((y * y).sum(), x, create_graph=True)
    assert g.grad_fn.name() == name


def test_basic_indexing_returns_views() -> None:
    base = engine.zeros(3, 4)
    for v in (base[1], base[:, 1:3], base[None, ..., 0], base[...]):
        assert v._base is base
        assert v._version_counter is base._version_counter
    base.add_(1.0)
    assert base[1:, ::2].numpy().tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_advanced_indexing_copies() -> None:
    base = engine.zeros(3, 4)
    out = base[[0, 1]]
    base.add_(1.0)
    assert out._base is None and out._version == 0
    assert out.numpy().sum() == 0.0


def test_inplace_on_base_invalidates_a_saved_slice() -> None:
    y = leaf(3, 4) * 1.0
    row = y[1:]
    z = (row * row).sum()
    y.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


def test_index_tensor_changed_after_forward_does_not_change_the_gradient() -> None:
    x = leaf(3)
    idx = engine.tensor([0, 0])
    y = x[idx].sum()
    idx.data[...] = 2
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 0.0, 0.0])


# -- setitem ----------------------------------------------------------------------
SET_KEYS: dict[str, tuple[Any, tuple[int, ...]]] = {
    "row": (1, (4,)),
    "row_broadcast": (1, (1,)),
    "row_leading_ones": (1, (1, 1, 4)),
    "block": ((slice(0, 2), slice(1, 3)), (2, 2)),
    "column_broadcast": ((slice(None), 2), ()),
    "ellipsis": ((Ellipsis, 0), (3,)),
    "rows": ([0, 2], (2, 4)),
    "rows_broadcast": ([2, 0], (4,)),
    "points_negative": ((np.array([0, -1]), np.array([-1, 0])), (2,)),
    "mask": (MASK, (5,)),
    "mask_scalar_value": (MASK, ()),
}


def _set(x: Tensor, v: Tensor, key: Any) -> Tensor:
    y = x * 1.0  # a non-leaf: a leaf that requires grad cannot be written in place
    y[key] = v
    return y


@pytest.mark.parametrize("name", sorted(SET_KEYS))
def test_setitem_gradcheck_target_and_value(name: str) -> None:
    key, value_shape = SET_KEYS[name]
    key = as_engine(key)
    assert engine.gradcheck(lambda x, v: _set(x, v, key), (leaf(3, 4), leaf(*value_shape)))


def test_setitem_gradients() -> None:
    x, v = leaf(3, 4), leaf(4)
    w = engine.tensor(RNG.standard_normal((3, 4)))
    y = _set(x, v, 1)
    (y * w).sum().backward()
    expected_x = w.numpy().copy()
    expected_x[1] = 0.0
    np.testing.assert_array_equal(x.grad.numpy(), expected_x)
    np.testing.assert_array_equal(v.grad.numpy(), w.numpy()[1])


def test_setitem_broadcast_value_gets_the_summed_gradient() -> None:
    x, v = leaf(3, 4), leaf(1)
    _set(x, v, engine.tensor(MASK)).sum().backward()
    np.testing.assert_array_equal(v.grad.numpy(), [MASK.sum()])


def test_setitem_second_order() -> None:
    def first_grads(x: Tensor, v: Tensor) -> tuple[Tensor, ...]:
        with engine.enable_grad():
            y = _set(x, v * v, [0, 2])
            return engine.grad((y * y * y).sum(), (x, v), create_graph=True)

    assert engine.gradcheck(first_grads, (leaf(3, 4), leaf(4)))


@pytest.mark.parametrize(
    ("key", "name"),
    [
        (0, "CopySlices"),
        ((slice(1, None), 2), "CopySlices"),
        ([0, 1], "IndexPutBackward0"),
        (MASK, "IndexPutBackward0"),
    ],
)
def test_setitem_node_names(key: Any, name: str) -> None:
    x, v = leaf(3, 4), leaf()
    y = _set(x, v, as_engine(key))
    assert y.grad_fn.name() == name
    assert [f.name() for f, _ in y.grad_fn.next_functions] == ["MulBackward0", "AccumulateGrad"]


def test_setitem_value_only_requires_grad() -> None:
    v = leaf(4)
    y = engine.zeros(3, 4, dtype=engine.float64)
    y[2] = v
    assert y.requires_grad and y.grad_fn.next_functions[0] == (None, 0)
    y.sum().backward()
    np.testing.assert_array_equal(v.grad.numpy(), np.ones(4))


def test_setitem_without_grad_writes_through_views_and_bumps_the_version() -> None:
    base = engine.zeros(3, 4)
    row = base[1]
    row[2:] = 5.0
    base[[2, 2], [1, 1]] = engine.tensor([7.0, 8.0])  # the last write wins
    base[engine.tensor(MASK[::-1].copy())] = 9.0
    assert base._version == row._version == 3
    assert base.grad_fn is None
    np.testing.assert_array_equal(
        base.numpy(), [[9.0, 9.0, 0.0, 0.0], [0.0, 0.0, 5.0, 9.0], [9.0, 8.0, 9.0, 0.0]]
    )


def test_setitem_invalidates_saved_tensors() -> None:
    y = leaf(3, 4) * 1.0
    z = (y * y).sum()
    y[0] = 0.0
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0"):
        z.backward()


def test_setitem_on_a_leaf_that_requires_grad() -> None:
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used"):
        leaf(3)[0] = 1.0


def test_setitem_shape_mismatch() -> None:
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            "shape mismatch: value tensor of shape [3] cannot be broadcast to indexing result of "
            "shape [4]"
        ),
    ):
        engine.zeros(3, 4)[0] = engine.zeros(3)


# -- select, narrow, index_put --------------------------------------------------------
def test_select_and_narrow() -> None:
    x = leaf(3, 4)
    assert engine.gradcheck(lambda x: x.select(1, -1), (x,))
    assert engine.gradcheck(lambda x: x.narrow(1, 1, 2), (x,))
    assert x.narrow(0, -1, 1).grad_fn.name() == "SliceBackward0"
    np.testing.assert_array_equal(x.narrow(1, 1, 2).detach().numpy(), x.detach().numpy()[:, 1:3])


@pytest.mark.parametrize(("rows", "accumulate"), [([0, 2, 1], False), ([0, 2, 0], True)])
def test_index_put_gradcheck(rows: list[int], accumulate: bool) -> None:
    idx = (engine.tensor(rows), engine.tensor([1, 1, 1]))
    assert engine.gradcheck(
        lambda x, v: engine.index_put(x, idx, v, accumulate=accumulate), (leaf(3, 4), leaf(3))
    )


def test_index_put_accumulates_repeats() -> None:
    out = engine.index_put(engine.zeros(3), [engine.tensor([0, 0, 2, -3])], engine.ones(4), True)
    np.testing.assert_array_equal(out.numpy(), [3.0, 0.0, 1.0])


# -- errors ----------------------------------------------------------------------
ERRORS: list[tuple[Callable[[Any, Any], Any], type[Exception], str]] = [
    (lambda m, x: x[5], IndexError, "index 5 is out of bounds for dimension 0 with size 3"),
    (lambda m, x: x[:, -5], IndexError, "index -5 is out of bounds for dimension 1 with size 4"),
    (lambda m, x: x[0, 0, 0], IndexError, "too many indices for tensor of dimension 2"),
    (
        lambda m, x: m.zeros(())[0],
        IndexError,
        "invalid index of a 0-dim tensor. Use `tensor.item()` in Python or `tensor.item<T>()` in "
        "C++ to convert a 0-dim tensor to a number",
    ),
    (lambda m, x: x[::-1], ValueError, "step must be greater than zero"),
    (
        lambda m, x: x[m.tensor([0, 3])],
        IndexError,
        "index 3 is out of bounds for dimension 0 with size 3",
    ),
    (
        lambda m, x: x[:, m.tensor([0, -5])],
        IndexError,
        "index -5 is out of bounds for dimension 0 with size 4",
    ),
    (
        lambda m, x: x[m.tensor([0]), m.tensor([0, 4])],
        IndexError,
        "index 4 is out of bounds for dimension 1 with size 4",
    ),
    (
        lambda m, x: x[m.tensor([0.0, 1.0])],
        IndexError,
        "tensors used as indices must be long, int, byte or bool tensors",
    ),
    (
        lambda m, x: x[m.tensor([True, False])],
        IndexError,
        "The shape of the mask [2] at index 0 does not match the shape of the indexed tensor "
        "[3, 4] at index 0",
    ),
    (
        lambda m, x: x[:, m.tensor([True, False])],
        IndexError,
        "The shape of the mask [2] at index 0 does not match the shape of the indexed tensor "
        "[3, 4] at index 1",
    ),
    (
        lambda m, x: x[m.tensor([0, 1]), m.tensor([0, 1, 2])],
        IndexError,
        "shape mismatch: indexing tensors could not be broadcast together with shapes [2], [3]",
    ),
    (
        lambda m, x: x[1.5],
        IndexError,
        "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid "
        "indices (got float)",
    ),
    (
        lambda m, x: x.select(0, 3),
        IndexError,
        "select(): index 3 out of range for tensor of size [3, 4] at dimension 0",
    ),
    (
        lambda m, x: x.narrow(1, 3, 2),
        RuntimeError,
        "start (3) + length (2) exceeds dimension size (4).",
    ),
]


@pytest.mark.parametrize(("call", "kind", "message"), ERRORS)
def test_errors(call: Callable[[Any, Any], Any], kind: type[Exception], message: str) -> None:
    with pytest.raises(kind, match=re.escape(message) + "$"):
        call(engine, engine.zeros(3, 4))


@pytest.mark.oracle
@pytest.mark.parametrize(("call", "kind", "message"), ERRORS)
def test_error_messages_are_pytorchs(
    torch: Any, call: Callable[[Any, Any], Any], kind: type[Exception], message: str
) -> None:
    with pytest.raises(kind) as caught:
        call(torch, torch.zeros(3, 4))
    assert str(caught.value).splitlines()[0] == message


def test_a_single_ellipsis() -> None:
    """NumPy's rule (PyTorch quietly accepts several)."""
    with pytest.raises(IndexError, match=re.escape("an index can only have a single ellipsis")):
        engine.zeros(3, 4)[..., 0, ...]


# -- oracle ----------------------------------------------------------------------
@pytest.mark.oracle
@pytest.mark.parametrize("name", sorted(KEYS))
def test_getitem_matches_pytorch(torch: Any, name: str) -> None:
    x0 = RNG.standard_normal((3, 4))
    x, tx = engine.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    out, tout = x[as_engine(KEYS[name])], tx[as_torch(torch, KEYS[name])]
    np.testing.assert_array_equal(out.detach().numpy(), tout.detach().numpy())
    assert out.grad_fn.name() == tout.grad_fn.name()
    w0 = RNG.standard_normal(tout.shape)
    (out * engine.tensor(w0)).sum().backward()
    (tout * torch.tensor(w0)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


@pytest.mark.oracle
@pytest.mark.parametrize("name", sorted(SET_KEYS))
def test_setitem_matches_pytorch(torch: Any, name: str) -> None:
    key, value_shape = SET_KEYS[name]
    x0, v0 = RNG.standard_normal((3, 4)), RNG.standard_normal(value_shape)
    w0 = RNG.standard_normal((3, 4))
    x, v = engine.tensor(x0, requires_grad=True), engine.tensor(v0, requires_grad=True)
    tx, tv = torch.tensor(x0, requires_grad=True), torch.tensor(v0, requires_grad=True)
    out = _set(x, v, as_engine(key))
    tout = tx * 1.0
    tout[as_torch(torch, key)] = tv
    np.testing.assert_array_equal(out.detach().numpy(), tout.detach().numpy())
    (out * engine.tensor(w0) * out).sum().backward()
    (tout * torch.tensor(w0) * tout).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-12)


@pytest.mark.oracle
def test_second_order_matches_pytorch(torch: Any) -> None:
    x0 = RNG.standard_normal((3, 4))

    def run(grad: Callable[..., Any], x: Any, key: Any) -> tuple[Any, Any]:
        y = x[key]
        (g,) = grad((y * y * y).sum(), x, create_graph=True)
        (gg,) = grad((g * g).sum(), x)
        return g, gg

    key = (np.array([0, 2, 0]), slice(1, 3))
    x, tx = engine.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    g, gg = run(engine.grad, x, as_engine(key))
    tg, tgg = run(torch.autograd.grad, tx, as_torch(torch, key))
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-12)
