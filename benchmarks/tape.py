"""The floor: a minimal sequential reverse-mode tape on NumPy.

No threads, no events, no graph objects: each op appends its backward closure
to one list, and ``backward`` pops and runs them in reverse. Whatever an
engine spends per node beyond this is the price of its features.

Usage (as the ``tape`` peer of the suite):
    python -m benchmarks.run --peer tape,ours
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class Var:
    """A value on the tape and the gradient that reaches it."""

    __slots__ = ("grad", "requires_grad", "value")

    def __init__(self, value: Any, requires_grad: bool = True) -> None:
        self.value = value
        self.grad: Any = None
        self.requires_grad = requires_grad

    def accumulate(self, grad: Any) -> None:
        """Add ``grad`` into :attr:`grad`."""
        self.grad = grad if self.grad is None else self.grad + grad


def _reduce_to(grad: Any, x: Var) -> Any:
    """``grad`` summed over the axes along which ``x`` was broadcast."""
    shape = x.value.shape
    if grad.shape == shape:
        return grad
    return grad.sum(axis=tuple(range(grad.ndim - len(shape)))).reshape(shape)


class Tape:
    """The list of backward closures, in the order the forward pass ran."""

    def __init__(self) -> None:
        self.ops: list[Callable[[], None]] = []

    def record(self, value: Any, backward: Callable[[Var], None]) -> Var:
        out = Var(value)

        def run() -> None:
            if out.grad is not None:
                backward(out)

        self.ops.append(run)
        return out

    def mul(self, x: Var, c: float) -> Var:
        return self.record(x.value * c, lambda o: x.accumulate(o.grad * c))

    def add(self, x: Var, y: Var | float) -> Var:
        if not isinstance(y, Var):
            return self.record(x.value + y, lambda o: x.accumulate(o.grad))
        return self.record(
            x.value + y.value,
            lambda o: (x.accumulate(_reduce_to(o.grad, x)), y.accumulate(_reduce_to(o.grad, y))),
        )

    def matmul(self, x: Var, w: Var) -> Var:
        def backward(o: Var) -> None:
            if x.requires_grad:  # an input batch needs no gradient: skip the largest product
                x.accumulate(o.grad @ w.value.T)
            w.accumulate(x.value.T @ o.grad)

        return self.record(x.value @ w.value, backward)

    def tanh(self, x: Var) -> Var:
        y = np.tanh(x.value)
        return self.record(y, lambda o: x.accumulate(o.grad * (1 - y * y)))

    def sum(self, x: Var) -> Var:
        return self.record(
            x.value.sum(), lambda o: x.accumulate(np.broadcast_to(o.grad, x.value.shape))
        )

    def cat(self, xs: list[Var]) -> Var:
        ends = np.cumsum([len(x.value) for x in xs])
        return self.record(
            np.concatenate([x.value for x in xs]),
            lambda o: [
                x.accumulate(g) for x, g in zip(xs, np.split(o.grad, ends[:-1]), strict=True)
            ],
        )

    def log_softmax(self, x: Var) -> Var:
        shifted = x.value - x.value.max(axis=1, keepdims=True)
        y = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        return self.record(
            y, lambda o: x.accumulate(o.grad - np.exp(y) * o.grad.sum(axis=1, keepdims=True))
        )

    def nll(self, logp: Var, target: np.ndarray) -> Var:
        rows = np.arange(len(target))

        def backward(o: Var) -> None:
            grad = np.zeros_like(logp.value)
            grad[rows, target] = -o.grad / len(target)
            logp.accumulate(grad)

        return self.record(-logp.value[rows, target].mean(), backward)

    def backward(self, out: Var) -> None:
        """Seed ``out`` with ones and run the tape backwards, releasing it as it goes."""
        out.grad = np.ones_like(out.value)
        while self.ops:
            self.ops.pop()()
