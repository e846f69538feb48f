"""Node classes that say their gradients keep the received gradient's shape and dtype do.

Note [Gradients that keep their metadata] in engine.validation: the plain path
skips the shape and dtype check of a gradient from such a node when the edge
expects the node's own output metadata. Every class that sets
``keeps_metadata`` is run here over dtypes, broadcasts, numbers and alphas,
and every gradient its ``apply`` returns is held to the one it received.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest

import engine
from engine.graph import Node

FLOATS = ["float16", "float32", "float64", "complex64", "complex128"]
SHAPES = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((4,), (3, 4)),
    ((1, 4), (3, 1)),
    ((), (2,)),
    ((2,), ()),
]
NUMBERS: list[Any] = [2, 0.5, -1.25, True, 1j, np.float64(0.3), np.float32(1.5), np.int64(3)]


def _subclasses(cls: type[Any]) -> Iterator[type[Any]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _declared() -> set[str]:
    return {c.__name__ for c in _subclasses(Node) if c.__dict__.get("keeps_metadata")}


def _tensor(shape: tuple[int, ...], dtype: str, requires_grad: bool = True) -> Any:
    rng = np.random.default_rng(len(shape) * 7 + len(dtype))
    values = rng.uniform(0.5, 2.0, shape)
    if dtype.startswith("complex"):
        values = values + 1j * rng.uniform(0.5, 2.0, shape)
    return engine.tensor(values.astype(dtype), requires_grad=requires_grad)


BINARY: list[tuple[str, Callable[[Any, Any], Any]]] = [
    ("add", lambda a, b: a + b),
    ("add alpha", lambda a, b: a.add(b, alpha=3)),
    ("sub", lambda a, b: a - b),
    ("sub alpha", lambda a, b: a.sub(b, alpha=0.5)),
    ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b),
]
WITH_A_NUMBER: list[tuple[str, Callable[[Any, Any], Any]]] = [
    ("add number", lambda a, n: a + n),
    ("add number alpha", lambda a, n: a.add(n, alpha=2)),
    ("sub number", lambda a, n: a - n),
    ("mul number", lambda a, n: a * n),
    ("mul number again", lambda a, n: (a * n) * n * n),
    ("div number", lambda a, n: a / n),
    ("number minus", lambda a, n: n - a),
    ("neg", lambda a, n: -a),
]


def _binary(op: Callable[[Any, Any], Any], sa: Any, da: str, sb: Any, db: str) -> Any:
    return op(_tensor(sa, da), _tensor(sb, db))


def _with_number(op: Callable[[Any, Any], Any], shape: Any, dtype: str, number: Any) -> Any:
    return op(_tensor(shape, dtype), number)


def _wider_zero_dim(dtype: str) -> Any:
    return _tensor((3,), dtype) * _tensor((), "float64")


def _constant(dtype: str) -> Any:
    return _tensor((3,), dtype) + _tensor((3,), "float64", False)


def _programs() -> Iterator[tuple[str, Callable[[], Any]]]:
    """(label, forward) pairs whose outputs' grad_fns are the declared classes."""
    for (sa, sb), da, db in itertools.product(SHAPES, FLOATS, FLOATS):
        for name, op in BINARY:
            yield f"{name} {sa}:{da} {sb}:{db}", partial(_binary, op, sa, da, sb, db)
    for shape, dtype, number in itertools.product([(3,), ()], FLOATS, NUMBERS):
        for name, op in WITH_A_NUMBER:
            yield (
                f"{name} {shape}:{dtype} {number!r}",
                partial(_with_number, op, shape, dtype, number),
            )
    # A 0-dim operand of a wider dtype, and one that does not require grad.
    for dtype in FLOATS:
        yield f"mul 0-dim float64 {dtype}", partial(_wider_zero_dim, dtype)
        yield f"add constant {dtype}", partial(_constant, dtype)


def _run(forward: Callable[[], Any]) -> Any:
    """``forward()``, or ``None`` where the engine refuses the operands (a complex number...)."""
    try:
        return forward()
    except (TypeError, RuntimeError):
        return None


def _nodes(out: Any) -> Iterator[Node]:
    """The nodes of ``out``'s graph (without AccumulateGrad)."""
    seen: set[int] = set()
    stack = [None if out is None else out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen or not hasattr(node, "_input_metadata"):
            continue
        seen.add(id(node))
        if node.name() != "AccumulateGrad":
            yield node
        stack.extend(fn for fn, _ in node.next_functions if fn is not None)


def test_every_declared_class_is_exercised() -> None:
    """A class that sets the flag without a program here fails: the flag is a promise."""
    made: set[str] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _, forward in _programs():
            made.update(node.name() for node in _nodes(_run(forward)))
    assert _declared() <= made, _declared() - made
    assert {"AddBackward0", "MulBackward0"} <= _declared()


@pytest.mark.filterwarnings("ignore")
def test_declared_classes_return_gradients_like_the_one_they_got() -> None:
    checked = 0
    declared = _declared()
    for label, forward in _programs():
        for node in _nodes(_run(forward)):
            if node.name() not in declared:
                continue
            meta = node._input_metadata[0]
            g = engine.tensor(np.ones(meta.shape, dtype=meta.dtype) * 0.75)
            with engine.no_grad():
                outputs = node.apply([g])
            for i, grad in enumerate(outputs):
                if grad is None:
                    continue
                where = f"{label}: {node.name()} output {i}"
                assert type(grad) is engine.Tensor, where
                assert grad.device is g.device, where
                assert grad.data.shape == g.data.shape, where
                assert grad.data.dtype == g.data.dtype, where
                checked += 1
    assert checked > 1000


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(
    ("sa", "sb"), [((3, 4), (4,)), ((4,), (3, 4)), ((1, 4), (3, 1)), ((), (2,))], ids=str
)
@pytest.mark.parametrize(("da", "db"), [("float32", "float64"), ("float64", "float16")])
def test_a_broadcast_or_cast_gradient_is_still_conformed(
    sa: tuple[int, ...], sb: tuple[int, ...], da: str, db: str
) -> None:
    """Where the edge expects other metadata, the full check sums down and casts, as before."""
    a, b = _tensor(sa, da), _tensor(sb, db)
    y = (a * 2.0 + b) * b - a
    y.sum().backward()
    for t in (a, b):
        assert t.grad.data.shape == t.data.shape
        assert t.grad.data.dtype == t.data.dtype
    av, bv = a.data.astype(np.float64), b.data.astype(np.float64)
    ga = np.broadcast_to(2.0 * bv - 1.0, np.broadcast_shapes(av.shape, bv.shape))
    gb = np.broadcast_to(2.0 * av + 2.0 * bv, np.broadcast_shapes(av.shape, bv.shape))

    def down(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        while g.ndim > len(shape):
            g = g.sum(0)
        return g.sum(tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)

    np.testing.assert_allclose(a.grad.data, down(ga, a.data.shape), rtol=2e-3)
    np.testing.assert_allclose(b.grad.data, down(gb, b.data.shape), rtol=2e-3)
