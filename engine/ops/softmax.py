"""``softmax`` and ``log_softmax`` along a dimension, computed without overflow."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.graph import Node
from engine.ops._core import make_node, normalize_dim, save_output, wrap
from engine.ops.pointwise import dtype_name, exp
from engine.tensor import Tensor

__all__ = [
    "FUNCTIONS",
    "TENSOR_METHODS",
    "LogSoftmaxBackward0",
    "SoftmaxBackward0",
    "log_softmax",
    "softmax",
]


def _axis(input: Tensor, dim: int | None, name: str) -> int | None:
    """The NumPy axis for ``dim`` (``None`` for a 0-dim tensor, which has one element).

    Raises:
        TypeError: when ``dim`` is missing (PyTorch has no implicit dim here).
        NotImplementedError: for integer or bool tensors, as in PyTorch.
    """
    if dim is None:
        raise TypeError(
            f"{name}() missing required argument 'dim': pass the dimension to normalize over, "
            f"e.g. {name}(x, dim=-1)"
        )
    if not np.issubdtype(input.dtype, np.floating):
        raise NotImplementedError(
            f"\"{name}_lastdim_kernel_impl\" not implemented for '{dtype_name(input.dtype)}'"
        )
    d = normalize_dim(dim, input.ndim)
    return d if input.ndim else None


def _shifted(input: Tensor, axis: int | None) -> Any:
    """``input - max(input)`` along ``axis``: the largest exponent is 0, so nothing overflows.

    A slice holding an infinity gives NaN (``inf - inf``), as in PyTorch.
    """
    with np.errstate(invalid="ignore"):
        return input.data - input.data.max(axis=axis, keepdims=True)


class SoftmaxBackward0(Node):
    __slots__ = ("dim",)
    dim: int | None

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        (y,) = self.saved_tensors()
        return (y * (g - (g * y).sum(self.dim, keepdim=True)),)


def softmax(input: Tensor, dim: int | None = None, *, axis: int | None = None) -> Tensor:
    """``exp(input) / exp(input).sum(dim)``: each slice along ``dim`` becomes a distribution.

    Raises:
        TypeError: when ``dim`` is not given.
        IndexError: when ``dim`` is out of range.
    """
    if axis is not None:
        dim = axis
    axis = _axis(input, dim, "softmax")
    xp = input.device.xp
    e = xp.exp(_shifted(input, axis))
    node = make_node(SoftmaxBackward0, input)
    with np.errstate(invalid="ignore"):
        data = e / e.sum(axis=axis, keepdims=True)
    out = wrap(data, input.device, node)
    if node is not None:
        node.dim = axis
        node.save(save_output(out))
    return out


class LogSoftmaxBackward0(Node):
    __slots__ = ("dim",)
    dim: int | None

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        (y,) = self.saved_tensors()
        return (g - exp(y) * g.sum(self.dim, keepdim=True),)


def log_softmax(input: Tensor, dim: int | None = None, *, axis: int | None = None) -> Tensor:
    """``log(softmax(input, dim))``, computed directly so it stays finite for large inputs.

    Raises:
        TypeError: when ``dim`` is not given.
        IndexError: when ``dim`` is out of range.
    """
    if axis is not None:
        dim = axis
    axis = _axis(input, dim, "log_softmax")
    xp = input.device.xp
    shifted = _shifted(input, axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        data = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
    node = make_node(LogSoftmaxBackward0, input)
    out = wrap(data, input.device, node)
    if node is not None:
        node.dim = axis
        node.save(save_output(out))
    return out


TENSOR_METHODS = {"softmax": softmax, "log_softmax": log_softmax}
"""Installed on :class:`engine.Tensor` by ``engine.ops``."""

FUNCTIONS = {"softmax": softmax, "log_softmax": log_softmax}
"""Exported as ``engine.<name>`` by ``engine.ops``."""
