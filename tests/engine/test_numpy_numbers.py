"""A NumPy number as an operand is a number, as PyTorch takes it (``_number`` in
engine.ops.arithmetic): ``float32 tensor * np.float64(2)`` is float32, where NumPy 2
alone would give float64 (its own scalars are not "weak", NEP 50)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine

NUMBERS: list[Any] = [
    np.float64(2.5),
    np.float32(-1.5),
    np.float16(0.75),
    np.int64(3),
    np.int32(2),
    np.uint8(4),
    2.5,
    3,
]
OPS: dict[str, Callable[[Any, Any], Any]] = {
    "mul": lambda t, n: t * n,
    "rmul": lambda t, n: n * t,
    "add": lambda t, n: t + n,
    "radd": lambda t, n: n + t,
    "sub": lambda t, n: t - n,
    "rsub": lambda t, n: n - t,
    "div": lambda t, n: t / n,
    "rdiv": lambda t, n: n / t,
    "pow": lambda t, n: t**n,
    "rpow": lambda t, n: n**t,
}
DTYPES = ["float32", "float64", "float16", "int64"]


def test_numpy_numbers_keep_the_tensor_dtype_without_pytorch() -> None:
    x = engine.tensor([1.0, 2.0])  # float32
    assert (x * np.float64(2.0)).dtype == engine.float32
    assert (np.float64(2.0) * x).dtype == engine.float32
    assert (x + np.float64(0.5)).dtype == engine.float32
    assert (x / np.float64(4.0)).dtype == engine.float32
    assert (x ** np.float64(2.0)).dtype == engine.float32
    i = engine.tensor([3, 6])
    assert (i / np.int64(3)).dtype == engine.float32  # true division: the default dtype
    assert (i * np.float64(0.5)).dtype == engine.float32
    assert (i * np.int64(2)).dtype == engine.int64
    assert (i**2.5).dtype == engine.float32 and (2.5**i).dtype == engine.float32
    assert (x * np.float64(2.0)).tolist() == [2.0, 4.0]
    # A number node, as for a Python number: two edges, the second None.
    w = engine.tensor([1.0, 2.0], requires_grad=True)
    node = (w * np.float64(3.0)).grad_fn
    assert node is not None and node.next_functions[1] == (None, 0)


@pytest.mark.filterwarnings("ignore:invalid value encountered in power:RuntimeWarning")
@pytest.mark.parametrize("number", NUMBERS, ids=lambda n: f"{type(n).__name__}({n})")
@pytest.mark.parametrize("op", list(OPS), ids=str)
def test_dtypes_values_and_gradients_match_pytorch(op: str, number: Any) -> None:
    torch = pytest.importorskip("torch")
    f = OPS[op]
    for dtype in DTYPES:
        values = np.array([1.5, 2.0, 3.0]) if dtype != "int64" else np.array([1, 2, 3])
        theirs = f(torch.tensor(values, dtype=getattr(torch, dtype)), number)
        ours = f(engine.tensor(values, dtype=getattr(engine, dtype)), number)
        where = f"{dtype} {op} {type(number).__name__}"
        assert ours.dtype.name == str(theirs.dtype).split(".")[1], where
        np.testing.assert_allclose(
            np.asarray(ours.tolist(), dtype=np.float64),
            theirs.double().numpy(),
            rtol=1e-3 if dtype == "float16" else 1e-6,
            err_msg=where,
        )
        if dtype == "float64":
            tx = torch.tensor(values, requires_grad=True)
            ex = engine.tensor(values, requires_grad=True)
            f(tx, number).sum().backward()
            f(ex, number).sum().backward()
            assert ex.grad is not None and tx.grad is not None
            np.testing.assert_allclose(ex.grad.data, tx.grad.numpy(), rtol=1e-12, err_msg=where)


@pytest.mark.parametrize("op", list(OPS), ids=str)
def test_gradients_by_finite_differences(op: str) -> None:
    f = OPS[op]
    for number in (np.float64(1.25), np.float32(0.5), np.int64(2)):  # bases of rpow: positive
        x = engine.tensor([0.5, 1.25, 2.0], dtype=engine.float64, requires_grad=True)
        assert engine.gradcheck(lambda t, n=number: f(t, n), (x,))
