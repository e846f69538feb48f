"""Copies made of chosen elements: ``index_select`` and ``repeat``."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from engine.graph import Node
from engine.ops._core import make_node, normalize_dim, save, wrap
from engine.tensor import Tensor

__all__ = [
    "FUNCTIONS",
    "TENSOR_METHODS",
    "IndexSelectBackward0",
    "RepeatBackward0",
    "index_select",
    "repeat",
    "scatter_into_zeros",
]


def scatter_into_zeros(grad: Tensor, shape: tuple[int, ...], axis: int, positions: Any) -> Tensor:
    """Zeros of ``shape`` with ``grad`` added at ``positions`` along ``axis`` (differentiable).

    ``positions`` is an integer array: a vector (``index_select``) or of ``grad``'s shape,
    one position per element (``sort``, ``topk``). Repeated positions add up.
    """
    from engine.ops.indexing import Index, _index_put

    xp = grad.device.xp
    if positions.ndim == 1 and grad.ndim != 1:
        where: tuple[Any, ...] = (*(slice(None),) * axis, positions)
    else:  # one broadcastable range per other dimension (CuPy has no sparse indices)
        ndim = positions.ndim
        where = tuple(
            positions
            if d == axis
            else xp.arange(n).reshape([n if e == d else 1 for e in range(ndim)])
            for d, n in enumerate(positions.shape)
        )
    zeros = wrap(xp.zeros(shape, dtype=grad.data.dtype), grad.device)
    return _index_put(zeros, Index((), where), grad, True)


class IndexSelectBackward0(Node):
    __slots__ = ("dim", "self_sym_sizes")
    dim: int
    self_sym_sizes: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (index,) = self.saved_tensors()
        g = grads[0]
        return (scatter_into_zeros(g, self.self_sym_sizes, self.dim, index.data.reshape(-1)),)


def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:
    """The slices of ``input`` at positions ``index`` (a vector of ints) along ``dim``.

    Raises:
        TypeError: ``index`` is not a tensor.
        RuntimeError: ``index`` is not of an integer dtype, or points outside ``input``.
        IndexError: ``index`` has more than one dimension, or ``dim`` is out of range.
    """
    if not isinstance(index, Tensor):
        raise TypeError(
            f"index_select(): argument 'index' (position 2) must be Tensor, not "
            f"{type(index).__name__}"
        )
    if index.data.dtype not in (np.int32, np.int64):
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    axis = normalize_dim(dim, input.ndim)
    xp = input.device.xp
    positions = index.data.reshape(-1)
    size = input.data.shape[axis] if input.ndim else 1
    bad = (positions < 0) | (positions >= size)
    if bool(xp.any(bad)):
        first = int(positions[int(xp.argmax(bad))])
        raise RuntimeError(f"INDICES element is out of DATA bounds, id={first} axis_dim={size}")
    data = input.data if input.ndim else input.data.reshape(1)
    node = make_node(IndexSelectBackward0, input)
    out = xp.take(data, positions, axis=axis)
    if input.ndim == 0:
        out = out.reshape(index.data.shape)
    if node is not None:
        node.dim, node.self_sym_sizes = axis, input.data.shape
        node.save(save(index))
    return wrap(out, input.device, node)


class RepeatBackward0(Node):
    __slots__ = ("repeats", "self_sym_sizes")
    repeats: tuple[int, ...]
    self_sym_sizes: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        shape = self.self_sym_sizes
        sizes = (1,) * (len(self.repeats) - len(shape)) + tuple(shape)
        # Each output dimension is (repeat, size): split it, then sum the repeats away.
        split = [n for pair in zip(self.repeats, sizes, strict=True) for n in pair]
        summed = g.reshape(split).sum(tuple(range(0, len(split), 2)))
        return (summed.reshape(shape),)


def repeat(input: Tensor, *repeats: Any) -> Tensor:
    """``input`` tiled ``repeats[i]`` times along each dimension (new leading ones first).

    ``repeats`` may be ints (``x.repeat(2, 1)``) or one sequence (``x.repeat((2, 1))``).

    Raises:
        RuntimeError: PyTorch's messages for fewer repeats than dimensions, or negative ones.
        TypeError: no repeats at all.
    """
    if not repeats:
        raise TypeError('repeat() missing 1 required positional arguments: "repeats"')
    if len(repeats) == 1 and hasattr(repeats[0], "__iter__"):
        repeats = tuple(repeats[0])
    counts = tuple(operator.index(r) for r in repeats)
    shape = input.data.shape
    if len(counts) < len(shape):
        raise RuntimeError(
            "Number of dimensions of repeat dims can not be smaller than number of dimensions "
            "of tensor"
        )
    padded = (1,) * (len(counts) - len(shape)) + tuple(shape)
    target = [r * s for r, s in zip(counts, padded, strict=True)]
    negative = next((n for n in target if n < 0), None)
    if negative is not None:
        raise RuntimeError(
            f"Trying to create tensor with negative dimension {negative}: "
            f"[{', '.join(map(str, target))}]"
        )
    node = make_node(RepeatBackward0, input)
    if node is not None:
        node.repeats, node.self_sym_sizes = counts, shape
    return wrap(input.device.xp.tile(input.data, counts), input.device, node)


TENSOR_METHODS = {"index_select": index_select, "repeat": repeat}
"""Installed on :class:`engine.Tensor` by ``engine.ops``."""

FUNCTIONS = {"index_select": index_select}
"""Exported as ``engine.<name>`` by ``engine.ops`` (``repeat`` is a method only, as in PyTorch)."""
