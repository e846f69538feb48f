"""Sample calls of every op in the engine's op table, to run on two devices and compare.

``SAMPLES[name]`` holds calls of the op installed as ``name`` by ``engine.ops`` (a
``Tensor`` method or an ``engine`` function; ``F.`` names are ``engine.functional``).
A sample's inputs are NumPy arrays, turned into tensors on the device under test:
floating arrays require grad unless wrapped in :class:`Const`; integer and bool
arrays never do. Anything else (numbers, keys, NumPy arrays inside ``fn``) is passed
as written, so host data meeting device tensors is exercised too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import engine
import engine.functional as F
from engine import Tensor

RNG = np.random.default_rng(8)


@dataclass(frozen=True)
class Const:
    """A floating input that does not require grad (a target, a class weight)."""

    array: np.ndarray


@dataclass(frozen=True)
class Sample:
    """One call: ``fn(*tensors)`` where ``tensors`` are ``inputs`` made on a device."""

    fn: Callable[..., Any]
    inputs: tuple[Any, ...]
    moves_to: str | None = None
    """The device of the outputs when the op moves data (``cpu``, ``cuda``); else the input's."""


def S(fn: Callable[..., Any], *inputs: Any, moves_to: str | None = None) -> Sample:
    return Sample(fn, inputs, moves_to)


def r(*shape: int) -> np.ndarray:
    """Standard normal float64 values (distinct, so no ties)."""
    return RNG.standard_normal(shape)


def pos(*shape: int) -> np.ndarray:
    """Values in [0.5, 1.5): inside the domain of log, sqrt and division."""
    return 0.5 + RNG.random(shape)


def ints(high: int, *shape: int) -> np.ndarray:
    return RNG.integers(0, high, shape)


def bools(*shape: int) -> np.ndarray:
    return RNG.random(shape) < 0.5


def in_place(method: str, *args: Any, **kwargs: Any) -> Callable[..., Tensor]:
    """``x = a * 1; x.method(...)``: in place on a non-leaf (a leaf that requires grad refuses)."""

    def fn(a: Tensor, *tensors: Any) -> Tensor:
        x = a * 1.0
        getattr(x, method)(*tensors, *args, **kwargs)
        return x

    return fn


def augmented(op: str) -> Callable[[Tensor, Any], Tensor]:
    """``x = a * 1; x op= b`` for ``+ - * /``."""

    def fn(a: Tensor, b: Any) -> Tensor:
        x = a * 1.0
        if op == "+":
            x += b
        elif op == "-":
            x -= b
        elif op == "*":
            x *= b
        else:
            x /= b
        return x

    return fn


def setitem(key: Any) -> Callable[[Tensor, Any], Tensor]:
    """``x = a * 1; x[key] = value``."""

    def fn(a: Tensor, value: Any = 0.5) -> Tensor:
        x = a * 1.0
        x[key] = value
        return x

    return fn


def view_add_(a: Tensor, b: Tensor) -> Tensor:
    """In place through a view: the base's history is rewritten (Note [In-place on views])."""
    x = a * 1.0
    x[1].add_(b)
    return x


HOST = np.array([0.5, -1.0, 2.0])
"""A NumPy array meeting a device tensor in an op (copied to the tensor's device)."""

SAMPLES: dict[str, list[Sample]] = {
    # -- arithmetic
    "add": [
        S(engine.add, r(2, 3), r(3)),
        S(lambda a, b: engine.add(a, b, alpha=0.5), r(2, 3), r(2, 3)),
        S(lambda a: engine.add(a, 2), r(3)),
        S(lambda a: a.add(0.5), ints(5, 4)),
    ],
    "__add__": [S(lambda a, b: a + b, r(2, 3), r(1, 3)), S(lambda a: a + HOST, r(2, 3))],
    "__radd__": [S(lambda a: 2.0 + a, r(3)), S(lambda a: HOST + a, r(3))],
    "__iadd__": [S(augmented("+"), r(2, 3), r(3)), S(augmented("+"), r(3), 1.5)],
    "add_": [S(in_place("add_"), r(2, 3), r(3)), S(view_add_, r(3, 2), r(2))],
    "sub": [S(engine.sub, r(2, 3), r(3)), S(lambda a, b: engine.sub(a, b, alpha=3), r(2), r(2))],
    "__sub__": [S(lambda a, b: a - b, r(3), r(3)), S(lambda a: a - 1, r(3))],
    "__rsub__": [S(lambda a: 1.0 - a, r(3)), S(lambda a: HOST - a, r(3))],
    "__isub__": [S(augmented("-"), r(2, 3), r(2, 3))],
    "sub_": [S(in_place("sub_"), r(2, 3), r(2, 1))],
    "mul": [S(engine.mul, r(2, 3), r(3)), S(lambda a: a.mul(3), r(4)), S(engine.mul, r(2), r())],
    "__mul__": [S(lambda a, b: a * b, r(4, 1), r(3)), S(lambda a: a * 0.5, ints(5, 3))],
    "__rmul__": [S(lambda a: 3.0 * a, r(3)), S(lambda a: HOST * a, r(3))],
    "__imul__": [S(augmented("*"), r(2, 3), r(3))],
    "mul_": [S(in_place("mul_"), r(2, 3), r(2, 3))],
    "div": [S(engine.div, r(2, 3), pos(3)), S(lambda a: a.div(4), r(3))],
    "__truediv__": [S(lambda a, b: a / b, r(3), pos(3)), S(lambda a: a / 2, ints(5, 3))],
    "__rtruediv__": [S(lambda a: 2.0 / a, pos(3)), S(lambda a: HOST / a, pos(3))],
    "__itruediv__": [S(augmented("/"), r(2, 3), pos(3))],
    "div_": [S(in_place("div_"), r(2, 3), pos(2, 3))],
    "neg": [S(engine.neg, r(2, 3))],
    "__neg__": [S(lambda a: -a, r(3))],
    "neg_": [S(in_place("neg_"), r(2, 3))],
    "pow": [S(engine.pow, pos(3), r(3)), S(lambda a: engine.pow(a, 3), r(2, 2))],
    "__pow__": [S(lambda a: a**2, r(2, 3)), S(lambda a: a**0.5, pos(3))],
    "__rpow__": [S(lambda a: 2.0**a, r(3))],
    # -- pointwise
    "exp": [S(engine.exp, r(2, 3)), S(engine.exp, ints(3, 4))],
    "log": [S(engine.log, pos(2, 3))],
    "sqrt": [S(engine.sqrt, pos(4))],
    "abs": [S(engine.abs, r(2, 3))],
    "__abs__": [S(abs, r(3))],
    "sin": [S(engine.sin, r(3))],
    "cos": [S(engine.cos, r(3))],
    "tanh": [S(engine.tanh, r(2, 3)), S(engine.tanh, r(3).astype(np.float32))],
    "sigmoid": [S(engine.sigmoid, 10 * r(2, 3))],
    "relu": [S(engine.relu, r(2, 3))],
    "reciprocal": [S(engine.reciprocal, pos(2, 3)), S(engine.reciprocal, ints(5, 3) + 1)],
    **{
        f"{name}_": [S(in_place(f"{name}_"), pos(2, 3))]
        for name in ("exp", "log", "sqrt", "abs", "sin", "cos", "tanh", "sigmoid", "relu")
    },
    "reciprocal_": [S(in_place("reciprocal_"), pos(3))],
    "masked_fill": [
        S(lambda a, m: a.masked_fill(m, -1.0), r(2, 3), bools(2, 3)),
        S(lambda a, m: engine.masked_fill(a, m, 0.5), r(2, 3), bools(3)),
    ],
    "masked_fill_": [S(lambda a, m: (a * 1.0).masked_fill_(m, 2.0), r(2, 3), bools(2, 3))],
    "clamp": [
        S(lambda a: a.clamp(-0.5, 0.5), r(2, 3)),
        S(lambda a: engine.clamp(a, min=0.1), r(4)),
        S(lambda a: a.clamp(max=2.5), ints(5, 4)),
    ],
    "clamp_": [S(in_place("clamp_", min=-0.2), r(2, 3))],
    "maximum": [
        S(engine.maximum, r(2, 3), r(3)),
        S(engine.maximum, np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])),
    ],
    "minimum": [
        S(engine.minimum, r(2, 3), r(2, 1)),
        S(lambda a: a.minimum(a.detach() * 0 + 0.25), r(3)),
    ],
    "where": [
        S(lambda a, b: engine.where(a > b, a, b), r(2, 3), r(2, 3)),
        S(lambda c, a: engine.where(c, a, 0.0), bools(2, 3), r(3)),
        S(lambda c: engine.where(c, 1.0, -1), bools(4)),
        S(lambda a, b: a.where(b > 0, 2.0), r(3), r(3)),
        S(lambda a: engine.where(np.array([True, False, True]), a, -a), r(3)),
    ],
    "zero_": [S(lambda a: in_place("zero_")(a) + a, r(2, 3))],
    "fill_": [S(in_place("fill_", 1.5), r(3)), S(in_place("fill_"), r(2, 2), r())],
    # -- reductions
    "sum": [
        S(engine.sum, r(2, 3)),
        S(lambda a: a.sum(1), r(2, 3)),
        S(lambda a: a.sum((0, 2), keepdim=True), r(2, 3, 4)),
        S(engine.sum, ints(5, 4)),
        S(lambda a: a.sum(0), bools(3, 2)),
    ],
    "sum_to_size": [S(lambda a: a.sum_to_size((1, 3)), r(2, 3))],
    "mean": [S(engine.mean, r(2, 3)), S(lambda a: a.mean(-1, keepdim=True), r(2, 3))],
    "norm": [
        S(engine.norm, r(2, 3)),
        S(lambda a: a.norm(1, dim=1), r(2, 3)),
        S(lambda a: a.norm(float("inf"), dim=0, keepdim=True), r(3, 2)),
        S(lambda a: a.norm(3), r(4)),
    ],
    "amax": [
        S(engine.amax, r(2, 3)),
        S(lambda a: a.amax(1), np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]])),
    ],
    "amin": [S(lambda a: engine.amin(a, 0, keepdim=True), r(3, 2))],
    "max": [
        S(engine.max, np.array([[1.0, 4.0], [4.0, 2.0]])),
        S(lambda a: a.max(1), r(3, 4)),
        S(lambda a: engine.max(a, 0, keepdim=True), r(3, 4)),
        S(lambda a: a.max(0), r()),
        S(engine.max, r(3), r(3)),
    ],
    "min": [S(engine.min, r(2, 3)), S(lambda a: a.min(-1), r(2, 3))],
    "argmax": [S(engine.argmax, r(3, 4)), S(lambda a: a.argmax(1, keepdim=True), r(3, 4))],
    "argmin": [S(lambda a: a.argmin(0), r(3, 4)), S(engine.argmin, ints(9, 5))],
    # -- shape
    "contiguous": [
        S(lambda a: a.t().contiguous(), r(2, 3)),
        S(lambda a: a.contiguous() * 2.0, r(3)),
    ],
    "reshape": [S(lambda a: a.reshape(3, 2), r(2, 3)), S(lambda a: a.t().reshape(-1), r(2, 3))],
    "view": [S(lambda a: a.view(6), r(2, 3))],
    "view_as": [S(lambda a, b: a.view_as(b), r(2, 3), Const(r(3, 2)))],
    "expand": [S(lambda a: a.expand(4, 3), r(1, 3)), S(lambda a: a.expand(2, -1), r(3))],
    "expand_as": [S(lambda a, b: a.expand_as(b), r(3, 1), Const(r(3, 2)))],
    "flatten": [S(engine.flatten, r(2, 3, 2)), S(lambda a: a.flatten(1), r(2, 3, 2))],
    "transpose": [S(lambda a: a.transpose(0, 2), r(2, 3, 4))],
    "t": [S(engine.t, r(2, 3))],
    "T": [S(lambda a: a.T, r(2, 3))],
    "permute": [S(lambda a: a.permute(2, 0, 1), r(2, 3, 4))],
    "unsqueeze": [S(lambda a: a.unsqueeze(1), r(2, 3))],
    "squeeze": [S(engine.squeeze, r(2, 1, 3)), S(lambda a: a.squeeze(0), r(1, 3))],
    "cat": [S(lambda a, b: engine.cat([a, b], 1), r(2, 3), r(2, 2))],
    "stack": [S(lambda a, b: engine.stack([a, b], -1), r(2, 3), r(2, 3))],
    # -- indexing
    "__getitem__": [
        S(lambda a: a[1], r(3, 4)),
        S(lambda a: a[-1, 1:3], r(3, 4)),
        S(lambda a: a[:, ::2], r(3, 4)),
        S(lambda a: a[None, ..., 2], r(3, 4)),
        S(lambda a: a[[0, 2, 0]], r(3, 4)),
        S(lambda a: a[np.array([-1, 0, -1])], r(3, 4)),
        S(lambda a: a[np.array([[0, 1], [2, 2]]), np.array([3, 3])], r(3, 4)),
        S(lambda a, i: a[i], r(3, 4), np.array([2, 0, 2])),
        S(lambda a: a[engine.tensor([1, 1])], r(3, 4)),
        S(lambda a, m: a[m], r(3, 4), bools(3, 4)),
        S(lambda a: a[:, np.array([True, False, True, True])], r(3, 4)),
        S(lambda a: a[True], r(3)),
        S(lambda a: a[1, np.array([0, 0, 2])], r(3, 4)),
    ],
    "__setitem__": [
        S(setitem(1), r(3, 2)),
        S(setitem((slice(None), 0)), r(3, 2), r(3)),
        S(setitem(np.array([0, 2])), r(3, 2), r(2)),
        S(setitem(np.array([[True, False], [False, True], [True, True]])), r(3, 2)),
        S(setitem(0), r(3, 2), r()),
    ],
    "index_put": [
        S(lambda a, v: a.index_put((np.array([0, 2, 0]),), v, accumulate=True), r(3, 2), r(3, 2)),
        S(lambda a, i, v: engine.index_put(a, (i,), v), r(4), np.array([3, 1]), r(2)),
    ],
    "select": [S(lambda a: a.select(1, -1), r(2, 3))],
    "narrow": [S(lambda a: engine.narrow(a, 0, 1, 2), r(4, 2))],
    "index_select": [S(lambda a, i: a.index_select(1, i), r(2, 3), np.array([2, 0, 2]))],
    "repeat": [S(lambda a: a.repeat(2, 1, 2), r(2, 3))],
    # -- scans and sorting
    "cumsum": [S(lambda a: a.cumsum(1), r(2, 3)), S(lambda a: engine.cumsum(a, 0), ints(5, 4))],
    "cumprod": [
        S(lambda a: a.cumprod(1), r(2, 4)),
        S(lambda a: engine.cumprod(a, 0), np.array([2.0, 0.0, 3.0, 0.5])),
    ],
    "sort": [S(lambda a: a.sort(1, descending=True), r(3, 4)), S(engine.sort, r(5))],
    "topk": [S(lambda a: a.topk(2), r(3, 4)), S(lambda a: engine.topk(a, 1, 0, False), r(3, 4))],
    # -- linalg
    "matmul": [
        S(engine.matmul, r(3), r(3)),
        S(engine.matmul, r(2, 3), r(3)),
        S(engine.matmul, r(3), r(3, 2)),
        S(engine.matmul, r(2, 3), r(3, 4)),
        S(engine.matmul, r(2, 2, 3), r(3, 4)),
        S(engine.matmul, r(2, 2, 3), r(3)),
        S(engine.matmul, r(2, 3), r(2, 3, 4)),
        S(engine.matmul, r(3), r(2, 3, 4)),
        S(engine.matmul, r(2, 1, 2, 3), r(3, 3, 2)),
        S(engine.matmul, r(2, 3).astype(np.float32), r(3, 2).astype(np.float32)),
    ],
    "__matmul__": [S(lambda a, b: a @ b, r(2, 3), r(3, 2))],
    "__rmatmul__": [S(lambda a: np.ones((2, 3)) @ a, r(3, 2))],
    "mm": [S(engine.mm, r(2, 3), r(3, 4))],
    "addmm": [
        S(engine.addmm, r(4), r(2, 3), r(3, 4)),
        S(lambda c, a, b: engine.addmm(c, a, b, beta=0.5, alpha=2.0), r(2, 4), r(2, 3), r(3, 4)),
    ],
    "mv": [S(engine.mv, r(2, 3), r(3))],
    "dot": [S(engine.dot, r(4), r(4))],
    "bmm": [S(engine.bmm, r(2, 3, 4), r(2, 4, 2))],
    # -- softmax
    "softmax": [S(lambda a: engine.softmax(a, -1), 30 * r(2, 5)), S(engine.softmax, r(), 0)],
    "log_softmax": [S(lambda a: a.log_softmax(0), 30 * r(4, 3))],
    # -- comparison
    "eq": [S(engine.eq, ints(3, 6), ints(3, 6))],
    "ne": [S(lambda a: a.ne(1), ints(3, 6))],
    "lt": [S(engine.lt, r(2, 3), r(3))],
    "le": [S(lambda a: engine.le(a, 0.0), r(5))],
    "gt": [S(engine.gt, r(2, 3), r(2, 3))],
    "ge": [S(lambda a: a.ge(HOST), r(3))],
    "__eq__": [S(lambda a, b: a == b, ints(2, 5), ints(2, 5)), S(lambda a: a == 0, ints(2, 5))],
    "__ne__": [S(lambda a, b: a != b, bools(4), bools(4))],
    "__lt__": [S(lambda a: a < 0.0, r(2, 3))],
    "__le__": [S(lambda a, b: a <= b, r(3), r(3))],
    "__gt__": [S(lambda a: a > HOST, r(3))],
    "__ge__": [S(lambda a: a >= 0, r(2, 3))],
    "logical_and": [S(engine.logical_and, r(4), bools(4))],
    "logical_or": [S(lambda a, b: a.logical_or(b), bools(4), ints(2, 4))],
    "logical_not": [S(engine.logical_not, r(4))],
    "bitwise_and": [S(engine.bitwise_and, ints(8, 5), ints(8, 5))],
    "bitwise_or": [S(lambda a, b: a.bitwise_or(b), bools(5), bools(5))],
    "bitwise_not": [S(engine.bitwise_not, ints(8, 5))],
    "__and__": [S(lambda a, b: a & b, bools(5), bools(5))],
    "__rand__": [S(lambda a: True & a, bools(5))],
    "__or__": [S(lambda a, b: a | b, ints(8, 5), ints(8, 5))],
    "__ror__": [S(lambda a: 2 | a, ints(8, 5))],
    "__invert__": [S(lambda a: ~a, bools(5)), S(lambda a: ~a, ints(8, 5))],
    # -- conversion
    "to": [
        S(lambda a: a.to(engine.float32), r(3)),
        S(lambda a: a.to(dtype=engine.int64), 9 * r(3)),
        S(lambda a: a.to("cpu") * 2.0, r(3), moves_to="cpu"),
        S(lambda a: a.to(a, copy=True), r(3)),
    ],
    "cpu": [S(lambda a: a.cpu(), r(2, 3), moves_to="cpu")],
    "cuda": [S(lambda a: a.cuda() * 3.0, r(2, 3), moves_to="cuda")],
    "clone": [S(engine.clone, r(2, 3))],
    "float": [S(lambda a: a.float(), r(3))],
    "double": [S(lambda a: a.double(), r(3).astype(np.float32))],
    "half": [S(lambda a: a.half() * 2.0, np.array([0.5, -1.25, 3.0]))],
    "long": [S(lambda a: a.long(), 9 * r(3))],
    "int": [S(lambda a: a.int(), 9 * r(3))],
    "bool": [S(lambda a: a.bool(), np.array([0.0, 1.0, -2.0]))],
    # -- engine.functional
    "F.linear": [S(F.linear, r(4, 3), r(5, 3), r(5)), S(F.linear, r(2, 4, 3), r(5, 3))],
    "F.relu": [S(F.relu, r(3, 2))],
    "F.tanh": [S(F.tanh, r(3, 2))],
    "F.log_softmax": [S(lambda a: F.log_softmax(a, 1), r(3, 4))],
    "F.mse_loss": [
        S(F.mse_loss, r(3, 4), r(3, 4)),
        S(lambda a, b: F.mse_loss(a, b, reduction="none"), r(3), Const(r(3))),
        S(lambda a, b: F.mse_loss(a, b, reduction="sum"), r(2, 2), r(2, 2)),
    ],
    "F.nll_loss": [
        S(F.nll_loss, r(4, 3), np.array([0, 2, 1, 2])),
        S(
            lambda a, t, w: F.nll_loss(a, t, w, reduction="sum"),
            r(4, 3),
            np.array([0, 2, -100, 2]),
            Const(pos(3)),
        ),
        S(lambda a, t: F.nll_loss(a, t, reduction="none"), r(2, 3, 2), np.array([[0, 1], [2, 2]])),
    ],
    "F.cross_entropy": [
        S(F.cross_entropy, r(4, 5), np.array([4, 0, 1, 1])),
        S(F.cross_entropy, r(3, 4), Const(pos(3, 4) / 4)),
        S(lambda a, t: F.cross_entropy(a, t, ignore_index=1), r(3, 4), np.array([1, 2, 3])),
    ],
}


def op_table() -> set[str]:
    """Every op name ``engine.ops`` installs, and the public functions of ``engine.functional``."""
    names: set[str] = set()
    for family in engine.ops.FAMILIES:
        module = importlib.import_module(f"engine.ops.{family}")
        names |= set(getattr(module, "TENSOR_METHODS", {}))
        names |= set(getattr(module, "FUNCTIONS", {}))
    for name in ("linear", "relu", "tanh", "log_softmax", "mse_loss", "nll_loss", "cross_entropy"):
        names.add(f"F.{name}")
    return names


CASES = [(name, i) for name in sorted(SAMPLES) for i in range(len(SAMPLES[name]))]
"""Every sample as ``(op name, index)``, for parametrizing."""
