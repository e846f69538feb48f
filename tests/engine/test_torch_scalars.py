"""Powers at zero and numbers on the left: PyTorch's values, gradients and nodes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import engine

BASES = [0.0, 2.0, -2.0, 1.0]
EXPONENTS = [0.0, 1.0, 2.0, 3.0, -2.0, -1.0, 0.5, -0.5, math.nan]


def _pow_everywhere(lib: Any, base: float, exponent: float, dtype: str) -> list[Any]:
    """Value, both gradients and node names of tensor**tensor, tensor**number, number**tensor."""
    kind = getattr(lib, dtype)
    b = lib.tensor(base, dtype=kind, requires_grad=True)
    p = lib.tensor(exponent, dtype=kind, requires_grad=True)
    both = b**p
    both.backward()
    b_only = lib.tensor(base, dtype=kind, requires_grad=True)
    left = b_only**exponent
    left.backward()
    p_only = lib.tensor(exponent, dtype=kind, requires_grad=True)
    right = base**p_only
    right.backward()
    return [
        both.item(),
        b.grad.item(),
        p.grad.item(),
        b_only.grad.item(),
        p_only.grad.item(),
        both.grad_fn.name(),
        left.grad_fn.name(),
        right.grad_fn.name(),
    ]


def _same(ours: list[Any], theirs: list[Any]) -> None:
    for a, b in zip(ours, theirs, strict=True):
        if isinstance(b, float) and math.isfinite(b):
            assert a == pytest.approx(b, rel=1e-6)
        else:  # inf, -inf, nan and names exactly
            assert str(a) == str(b)


@pytest.mark.oracle
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("exponent", EXPONENTS)
def test_pow_values_and_gradients_are_pytorchs(
    torch: Any, base: float, exponent: float, dtype: str
) -> None:
    _same(
        _pow_everywhere(engine, base, exponent, dtype),
        _pow_everywhere(torch, base, exponent, dtype),
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_pow_at_zero_without_pytorch() -> None:
    """The oracle's answers at a zero base, for machines without PyTorch."""
    # 0 ** 0: no nan for the base; 0 ** -2: -inf for the exponent.
    assert _pow_everywhere(engine, 0.0, 0.0, "float64")[:5] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert _pow_everywhere(engine, 0.0, -2.0, "float64")[:5] == [
        math.inf,
        -math.inf,
        -math.inf,
        -math.inf,
        -math.inf,
    ]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_pow_gradcheck_away_from_zero() -> None:
    rng = np.random.default_rng(3)
    b = engine.tensor(rng.uniform(0.5, 2.0, 5), dtype=engine.float64, requires_grad=True)
    p = engine.tensor(rng.uniform(-2.0, 2.0, 5), dtype=engine.float64, requires_grad=True)
    assert engine.gradcheck(lambda x, y: x**y, (b, p))
    assert engine.gradcheck(lambda y: 3.0**y, (p,))
    assert engine.gradgradcheck(lambda x, y: x**y, (b, p))


def _rsub_program(lib: Any) -> tuple[Any, Any]:
    x = lib.tensor([1.0, 2.0], requires_grad=True)
    return x, 1 - x * x


@pytest.mark.oracle
def test_number_minus_tensor_records_rsub_like_pytorch(torch: Any) -> None:
    results = []
    for lib in (engine, torch):
        x, y = _rsub_program(lib)
        node = y.grad_fn
        y.sum().backward()
        results.append(
            (
                node.name(),
                [(f.name() if f is not None else None, n) for f, n in node.next_functions],
                y.tolist(),
                x.grad.tolist(),
                (2.5 - lib.tensor([1, 2])).tolist(),
                (1 - lib.tensor([1, 2])).dtype == lib.int64,
            )
        )
    assert results[0] == results[1]
    assert results[0][:2] == ("RsubBackward1", [("MulBackward0", 0)])


def test_rsub_gradcheck_and_create_graph() -> None:
    x = engine.tensor([0.3, -1.2], dtype=engine.float64, requires_grad=True)
    assert engine.gradcheck(lambda t: 1.5 - t * t, (x,))
    assert engine.gradgradcheck(lambda t: 1.5 - t * t * t, (x,))
