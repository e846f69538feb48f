"""Comparisons and logical operators: bool results that never take part in autograd."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine
from engine import Tensor

RNG = np.random.default_rng(2)

A0 = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
B0 = np.array([2.0, 2.0, 2.0])

OPERATORS: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]] = {
    "eq": (operator.eq, np.equal),
    "ne": (operator.ne, np.not_equal),
    "lt": (operator.lt, np.less),
    "le": (operator.le, np.less_equal),
    "gt": (operator.gt, np.greater),
    "ge": (operator.ge, np.greater_equal),
}


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_operator_function_and_method_agree_with_numpy(name: str) -> None:
    op, reference = OPERATORS[name]
    a = engine.tensor(A0, requires_grad=True)
    b = engine.tensor(B0)
    expected = reference(A0, B0)
    for out in (op(a, b), getattr(engine, name)(a, b), getattr(a, name)(b)):
        assert out.dtype == engine.bool_
        assert out.shape == (2, 3)
        np.testing.assert_array_equal(out.numpy(), expected)
        assert out.grad_fn is None
        assert not out.requires_grad


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_numbers_and_arrays_on_either_side(name: str) -> None:
    op, reference = OPERATORS[name]
    a = engine.tensor(A0)
    np.testing.assert_array_equal(op(a, 2).numpy(), reference(A0, 2))
    np.testing.assert_array_equal(op(a, 2.5).numpy(), reference(A0, 2.5))
    np.testing.assert_array_equal(op(2, a).numpy(), reference(2, A0))
    np.testing.assert_array_equal(op(a, B0).numpy(), reference(A0, B0))
    # An ndarray on the left defers to the tensor (Tensor sets __array_ufunc__ = None).
    out = op(B0, a)
    assert isinstance(out, Tensor)
    np.testing.assert_array_equal(out.numpy(), reference(B0, A0))


def test_integer_tensor_against_a_float_number() -> None:
    ints = engine.tensor([1, 2, 3])
    np.testing.assert_array_equal((ints < 2.5).numpy(), [True, True, False])
    np.testing.assert_array_equal((ints == 2.0).numpy(), [False, True, False])


def test_comparisons_with_nan() -> None:
    x = engine.tensor([np.nan, 1.0])
    np.testing.assert_array_equal((x == x).numpy(), [False, True])
    np.testing.assert_array_equal((x != x).numpy(), [True, False])


def test_equality_with_a_foreign_object_falls_back_to_identity() -> None:
    x = engine.tensor([1.0, 2.0])
    assert (x == None) is False  # noqa: E711 - the operator itself is under test
    assert (x != "a") is True
    with pytest.raises(TypeError, match="'<' not supported"):
        _ = x < None


def test_tensors_stay_hashable_and_usable_as_dict_keys() -> None:
    a, b = engine.tensor([1.0]), engine.tensor([1.0])
    table = {a: "a", b: "b"}
    assert table[a] == "a"
    assert table[b] == "b"
    assert a in {a}


def test_comparison_of_a_tensor_in_a_graph_does_not_extend_it() -> None:
    x = engine.tensor([1.0, -1.0], requires_grad=True)
    mask = (x * 2) > 0
    assert mask.grad_fn is None
    y = engine.where(mask, x, 0.0)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0])


def test_logical_operators_on_bool_tensors() -> None:
    p = engine.tensor([True, True, False, False])
    q = engine.tensor([True, False, True, False])
    np.testing.assert_array_equal((p & q).numpy(), [True, False, False, False])
    np.testing.assert_array_equal((p | q).numpy(), [True, True, True, False])
    np.testing.assert_array_equal((~p).numpy(), [False, False, True, True])
    np.testing.assert_array_equal((True & q).numpy(), q.numpy())
    np.testing.assert_array_equal((False | q).numpy(), q.numpy())
    for out in (p & q, p | q, ~p):
        assert out.dtype == engine.bool_


def test_bitwise_operators_on_integers() -> None:
    a, b = engine.tensor([12, 10]), engine.tensor([10, 6])
    np.testing.assert_array_equal((a & b).numpy(), [8, 2])
    np.testing.assert_array_equal((a | b).numpy(), [14, 14])
    np.testing.assert_array_equal((~a).numpy(), [-13, -11])


def test_logical_functions_accept_any_dtype() -> None:
    x, y = engine.tensor([0.0, 2.0, 0.0]), engine.tensor([1, 0, 0])
    np.testing.assert_array_equal(engine.logical_and(x, y).numpy(), [False, False, False])
    np.testing.assert_array_equal(engine.logical_or(x, y).numpy(), [True, True, False])
    np.testing.assert_array_equal(engine.logical_not(x).numpy(), [True, False, True])
    np.testing.assert_array_equal(x.logical_or(y).numpy(), [True, True, False])


def test_combined_masks_drive_where() -> None:
    x = engine.tensor(RNG.standard_normal(8), requires_grad=True)
    mask = (x > -0.5) & (x < 0.5) | (x == x.detach().amax())
    engine.where(mask, x * x, 0.0).sum().backward()
    expected = np.where(
        ((x.data > -0.5) & (x.data < 0.5)) | (x.data == x.data.max()), 2 * x.data, 0
    )
    np.testing.assert_allclose(x.grad.numpy(), expected)


def test_results_live_on_the_operands_device() -> None:
    a = engine.tensor([1.0, 2.0], device="sim:1")
    out = a > 1.5
    assert out.device == engine.device("sim:1")
    np.testing.assert_array_equal(out.numpy(), [False, True])
    # A 0-dim CPU tensor may meet a tensor on any device, as in PyTorch.
    np.testing.assert_array_equal((a == engine.tensor(2.0)).numpy(), [False, True])


ERRORS: list[tuple[Callable[[], Any], type[Exception], str]] = [
    (
        lambda: engine.ones(2) == engine.ones(2, device="sim:0"),
        RuntimeError,
        "Expected all tensors to be on the same device",
    ),
    (
        lambda: engine.ones(2) & engine.ones(2),
        RuntimeError,
        "\"bitwise_and_cpu\" not implemented for 'Float'",
    ),
    (
        lambda: engine.tensor([True]) | engine.ones(1),
        RuntimeError,
        "\"bitwise_or_cpu\" not implemented for 'Float'",
    ),
    (lambda: ~engine.ones(2), TypeError, "only implemented on integer and Boolean-type tensors"),
    (
        lambda: engine.ones(2) < engine.ones(3),
        RuntimeError,
        "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0",
    ),
]


@pytest.mark.parametrize(("call", "kind", "message"), ERRORS)
def test_errors(call: Callable[[], Any], kind: type[Exception], message: str) -> None:
    with pytest.raises(kind, match=re.escape(message)):
        call()


# -- oracle ----------------------------------------------------------------------
@pytest.mark.oracle
@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_comparisons_match_pytorch(name: str) -> None:
    torch = pytest.importorskip("torch")
    op, _ = OPERATORS[name]
    a0 = np.array([[1.0, np.nan, 3.0], [-np.inf, 2.0, 1.0]])
    for other in (B0, 2, 2.5):
        t_other = torch.tensor(other) if isinstance(other, np.ndarray) else other
        e_other = engine.tensor(other) if isinstance(other, np.ndarray) else other
        out = op(engine.tensor(a0, requires_grad=True), e_other)
        tout = op(torch.tensor(a0, requires_grad=True), t_other)
        np.testing.assert_array_equal(out.numpy(), tout.numpy())
        assert out.requires_grad == tout.requires_grad


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", ["bool", "int64"])
def test_logical_operators_match_pytorch(dtype: str) -> None:
    torch = pytest.importorskip("torch")
    p0 = RNG.integers(0, 4, 10).astype(dtype)
    q0 = RNG.integers(0, 4, 10).astype(dtype)
    p, q, tp, tq = engine.tensor(p0), engine.tensor(q0), torch.tensor(p0), torch.tensor(q0)
    np.testing.assert_array_equal((p & q).numpy(), (tp & tq).numpy())
    np.testing.assert_array_equal((p | q).numpy(), (tp | tq).numpy())
    np.testing.assert_array_equal((~p).numpy(), (~tp).numpy())
