"""Comparisons ``== != < <= > >=`` and the logical ``& | ~``: bool results, outside the graph.

None of these is differentiable: the results never require grad and record no node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from engine.ops._core import dtype_name, operands, wrap
from engine.tensor import Tensor

__all__ = [
    "FUNCTIONS",
    "TENSOR_METHODS",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "eq",
    "ge",
    "gt",
    "le",
    "logical_and",
    "logical_not",
    "logical_or",
    "lt",
    "ne",
]

_OPERAND_TYPES = (Tensor, bool, int, float, np.number, np.ndarray, list, tuple)


def _compare(input: Any, other: Any, ufunc: str) -> Tensor:
    a, b, device = operands(input, other)
    return wrap(getattr(device.xp, ufunc)(a.data, b.data), device)


def eq(input: Any, other: Any) -> Tensor:
    """Elementwise ``input == other`` as a bool tensor (numbers and arrays broadcast)."""
    return _compare(input, other, "equal")


def ne(input: Any, other: Any) -> Tensor:
    """Elementwise ``input != other`` as a bool tensor (numbers and arrays broadcast)."""
    return _compare(input, other, "not_equal")


def lt(input: Any, other: Any) -> Tensor:
    """Elementwise ``input < other`` as a bool tensor (numbers and arrays broadcast)."""
    return _compare(input, other, "less")


def le(input: Any, other: Any) -> Tensor:
    """Elementwise ``input <= other`` as a bool tensor (numbers and arrays broadcast)."""
    return _compare(input, other, "less_equal")


def gt(input: Any, other: Any) -> Tensor:
    """Elementwise ``input > other`` as a bool tensor (numbers and arrays broadcast)."""
    return _compare(input, other, "greater")


def ge(input: Any, other: Any) -> Tensor:
    """Elementwise ``input >= other`` as a bool tensor (numbers and arrays broadcast)."""
    return _compare(input, other, "greater_equal")


def _bitwise(input: Any, other: Any, op: str) -> Tensor:
    """``&`` and ``|``: logical on bool tensors, bitwise on integers (PyTorch refuses floats)."""
    a, b, device = operands(input, other)
    for t in (a, b):
        if not (t.dtype == np.bool_ or np.issubdtype(t.dtype, np.integer)):
            raise RuntimeError(f"\"{op}_cpu\" not implemented for '{dtype_name(t.dtype)}'")
    return wrap(getattr(device.xp, op)(a.data, b.data), device)


def bitwise_and(input: Any, other: Any) -> Tensor:
    """``input & other``: logical and of bool tensors, bitwise and of integer tensors.

    Raises:
        RuntimeError: for floating-point operands, as in PyTorch.
    """
    return _bitwise(input, other, "bitwise_and")


def bitwise_or(input: Any, other: Any) -> Tensor:
    """``input | other``: logical or of bool tensors, bitwise or of integer tensors.

    Raises:
        RuntimeError: for floating-point operands, as in PyTorch.
    """
    return _bitwise(input, other, "bitwise_or")


def bitwise_not(input: Tensor) -> Tensor:
    """``~input``: logical not of a bool tensor, bitwise not of an integer tensor.

    Raises:
        TypeError: for floating-point tensors, with PyTorch's message.
    """
    if not (input.dtype == np.bool_ or np.issubdtype(input.dtype, np.integer)):
        raise TypeError(
            "~ (operator.invert) is only implemented on integer and Boolean-type tensors"
        )
    return wrap(input.device.xp.invert(input.data), input.device)


def logical_and(input: Any, other: Any) -> Tensor:
    """Elementwise ``bool(input) and bool(other)`` for any dtype."""
    a, b, device = operands(input, other)
    return wrap(device.xp.logical_and(a.data, b.data), device)


def logical_or(input: Any, other: Any) -> Tensor:
    """Elementwise ``bool(input) or bool(other)`` for any dtype."""
    a, b, device = operands(input, other)
    return wrap(device.xp.logical_or(a.data, b.data), device)


def logical_not(input: Tensor) -> Tensor:
    """Elementwise ``not bool(input)`` for any dtype."""
    return wrap(input.device.xp.logical_not(input.data), input.device)


def _operator(fn: Callable[[Any, Any], Tensor], reflected: bool = False) -> Callable[..., Any]:
    """A binary dunder: ``NotImplemented`` for foreign operands so Python can try the other side.

    (That is what makes ``t == None`` False and ``t < None`` a TypeError, as in PyTorch.)
    """

    def method(self: Tensor, other: Any) -> Any:
        if not isinstance(other, _OPERAND_TYPES):
            return NotImplemented
        return fn(other, self) if reflected else fn(self, other)

    method.__name__ = method.__qualname__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


TENSOR_METHODS = {
    "eq": eq,
    "ne": ne,
    "lt": lt,
    "le": le,
    "gt": gt,
    "ge": ge,
    "logical_and": logical_and,
    "logical_or": logical_or,
    "logical_not": logical_not,
    "bitwise_and": bitwise_and,
    "bitwise_or": bitwise_or,
    "bitwise_not": bitwise_not,
    "__eq__": _operator(eq),
    "__ne__": _operator(ne),
    "__lt__": _operator(lt),
    "__le__": _operator(le),
    "__gt__": _operator(gt),
    "__ge__": _operator(ge),
    "__and__": _operator(bitwise_and),
    "__rand__": _operator(bitwise_and, reflected=True),
    "__or__": _operator(bitwise_or),
    "__ror__": _operator(bitwise_or, reflected=True),
    "__invert__": bitwise_not,
}
"""Installed on :class:`engine.Tensor` by ``engine.ops``."""

FUNCTIONS = {
    "eq": eq,
    "ne": ne,
    "lt": lt,
    "le": le,
    "gt": gt,
    "ge": ge,
    "logical_and": logical_and,
    "logical_or": logical_or,
    "logical_not": logical_not,
    "bitwise_and": bitwise_and,
    "bitwise_or": bitwise_or,
    "bitwise_not": bitwise_not,
}
"""Exported as ``engine.<name>`` by ``engine.ops``."""
