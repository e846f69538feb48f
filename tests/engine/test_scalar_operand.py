"""A product by a number, with the number kept as a 0-d array: the same bits as NumPy's own.

Note [A number NumPy multiplies fast] in engine.ops.arithmetic: ``x * 1.0001``
multiplies by a read-only 0-d float64 array once the same float object comes
twice in a row with float64 data. These tests hold it to the product by the
Python number, dtype and bits, forward and backward, and to PyTorch's.
"""

from __future__ import annotations

import math
import struct
import sys
import threading
from typing import Any

import numpy as np
import pytest

import engine
from engine.ops import arithmetic

NUMBERS = [1.0001, -0.0, 0.0, math.nan, math.inf, -math.inf, 5e-324, 1e308, 0.1, 3, 2**60 + 1]
DTYPES = ["float64", "float32", "float16", "int64", "complex128", "bool"]
SHAPES = [(), (1,), (3, 4)]


def _same(got: Any, want: Any) -> None:
    """Equal type, dtype, shape and bytes (so -0.0 against 0.0 and nan payloads count)."""
    assert type(got) is type(want)
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def _data(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    values = np.linspace(-1.5, 2.5, math.prod(shape) or 1).reshape(shape)
    return values.astype(dtype) if dtype != "bool" else values > 0


def _fresh(number: float) -> float:
    """An equal number that is another object, so that it is never the one met before."""
    if isinstance(number, float):
        return struct.unpack("d", struct.pack("d", number))[0]
    return int(str(number))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("number", NUMBERS, ids=repr)
def test_a_chain_of_one_number_gives_the_numbers_bits(
    number: float, dtype: str, shape: tuple[int, ...]
) -> None:
    """Three products by one object (the third by the 0-d array) against fresh objects."""
    data = _data(shape, dtype)
    same = fresh = engine.tensor(data)
    for _ in range(3):
        same = same * number
    for _ in range(3):  # after, not between: the same number must come twice in a row
        fresh = fresh * _fresh(number)
    _same(same.data, fresh.data)
    if dtype in ("float64", "float32", "float16", "complex128"):
        _same(same.data, data * number * number * number)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("number", NUMBERS, ids=repr)
def test_the_gradient_by_one_number_gives_numpys_bits(
    number: float, shape: tuple[int, ...]
) -> None:
    data = _data(shape, "float64")
    x: Any = engine.tensor(data, requires_grad=True)
    y = x
    for _ in range(4):
        y = y * number
    seed = np.full(shape, 0.75)
    y.backward(engine.tensor(seed))
    want = seed
    for _ in range(4):
        want = want * number
    _same(x.grad.data, want)
    _same(y.data, data * number * number * number * number)


def test_only_a_float_met_twice_with_float64_data_becomes_an_array() -> None:
    x64: Any = engine.tensor([1.0, 2.0], dtype=engine.float64, requires_grad=True)
    x32: Any = engine.tensor([1.0, 2.0], dtype=engine.float32, requires_grad=True)
    step = 1.25
    first: Any = (x64 * step).grad_fn
    second: Any = (x64 * step).grad_fn
    third: Any = (x64 * step).grad_fn
    assert first._operand is step  # met once: the number itself
    assert type(second._operand) is np.ndarray and second._operand.shape == ()
    assert third._operand is second._operand  # shared, so...
    assert not third._operand.flags.writeable  # ...never written
    assert third._scalar is step  # what every reader sees
    for _ in range(3):
        assert (x32 * step).grad_fn._operand is step  # float32 data keeps the number
        assert (x64 * 2).grad_fn._operand == 2 and type((x64 * 2).grad_fn._operand) is int
    # A number that is equal but another object does not take the array.
    other = float("1.25")
    assert other is not step and (x64 * other).grad_fn._operand is other


def test_a_numpy_subclass_or_foreign_array_keeps_the_number() -> None:
    class Sub(np.ndarray):
        pass

    x: Any = engine.tensor([1.0, 2.0], dtype=engine.float64, requires_grad=True)
    x.data = np.asarray([1.0, 2.0]).view(Sub)
    step = 1.5
    for _ in range(3):
        y = x * step
    assert y.grad_fn._operand is step


def test_in_place_on_the_output_leaves_the_shared_number_alone() -> None:
    x: Any = engine.tensor([1.0, 2.0], dtype=engine.float64, requires_grad=True)
    step = 0.5
    outs: list[Any] = [x * step for _ in range(3)]
    operand = outs[2].grad_fn._operand
    with engine.no_grad():
        outs[2].mul_(4.0)
        outs[2].add_(1.0)
    assert float(operand) == 0.5
    (x * step).sum().backward()
    assert x.grad.data.tolist() == [0.5, 0.5]


def test_create_graph_differentiates_through_the_number() -> None:
    """The create_graph path multiplies Tensor by ``_scalar``: a node, not the array."""
    x: Any = engine.tensor([1.5], dtype=engine.float64, requires_grad=True)
    step = 3.0
    y = x
    for _ in range(3):
        y = y * step * x
    g: Any
    (g,) = engine.autograd.grad(y.sum(), x, create_graph=True)
    assert g.requires_grad and g.grad_fn is not None
    gg: Any
    (gg,) = engine.autograd.grad(g.sum(), x)
    # y = 27 x^4: y' = 108 x^3, y'' = 324 x^2.
    assert g.item() == pytest.approx(108 * 1.5**3)
    assert gg.item() == pytest.approx(324 * 1.5**2)


def test_threads_never_pair_a_number_with_anothers_array() -> None:
    """Two threads alternate their own numbers as fast as the interpreter switches."""
    errors: list[str] = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def work(number: float) -> None:
        x = engine.tensor([1.0], dtype=engine.float64)
        for _ in range(3_000):
            got = (x * number).data[0]
            if got != number:
                errors.append(f"{got} != {number}")
                return

    try:
        threads = [threading.Thread(target=work, args=(n,)) for n in (2.0, 3.0, 5.0)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def test_a_number_met_again_after_another_takes_the_array_again() -> None:
    x = engine.tensor([1.0], dtype=engine.float64)
    a, b = 1.5, 2.5
    for _ in range(2):
        x * a
    assert arithmetic._last_operand[0] is a
    x * b
    assert (x * b).grad_fn is None  # no grad: the product is still made the same way
    assert arithmetic._last_operand[0] is b
    assert (x * a).data.tolist() == [1.5]


@pytest.mark.oracle
@pytest.mark.parametrize("number", [1.0001, -0.0, 0.3, 1e-310], ids=repr)
def test_a_chain_matches_pytorch_bit_for_bit(torch: Any, number: float) -> None:
    results = []
    for lib in (engine, torch):
        x = lib.tensor([0.7, -1.3, 2.0], dtype=lib.float64, requires_grad=True)
        y = x
        for _ in range(50):
            y = y * number + 0.0
        y.backward(lib.ones_like(y))
        results.append((y.detach().numpy().tobytes(), x.grad.numpy().tobytes()))
    assert results[0] == results[1]
