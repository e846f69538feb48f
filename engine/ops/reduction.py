"""Reductions: ``sum``, ``sum_to_size`` (more are added beside them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.graph import Node
from engine.ops._core import make_node, normalize_dim, wrap
from engine.tensor import Tensor


def _dims(dim: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """``dim`` as a sorted tuple of non-negative dims (all dims when ``None``)."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = (dim,)
    return tuple(sorted({normalize_dim(d, ndim) for d in dim}))


def _unsqueeze_reduced(grad: Tensor, dims: tuple[int, ...], keepdim: bool) -> Tensor:
    """Put back the reduced dims (size 1) so ``grad`` broadcasts against the input."""
    if keepdim or not dims:
        return grad
    shape = list(grad.shape)
    for d in dims:
        shape.insert(d, 1)
    return grad.reshape(tuple(shape))


class SumBackward0(Node):
    """Backward of a full sum (``dim=None``)."""

    __slots__ = ("self_sym_sizes",)

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (grads[0].expand(self.self_sym_sizes),)


class SumBackward1(Node):
    """Backward of a sum over ``dim``."""

    __slots__ = ("self_sym_sizes", "dim", "keepdim")

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = _unsqueeze_reduced(grads[0], self.dim, self.keepdim)
        return (g.expand(self.self_sym_sizes),)


def sum(  # noqa: A001 - torch's name
    input: Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False
) -> Tensor:
    """Sum of all elements, or over ``dim`` (keeping it with size 1 if ``keepdim``)."""
    if dim is None:
        node0 = make_node(SumBackward0, input)
        if node0 is not None:
            node0.self_sym_sizes = input.shape
        data = input.data.sum(keepdims=keepdim) if keepdim else input.data.sum()
        return wrap(input.device.xp.asarray(data), input.device, node0)
    dims = _dims(dim, input.ndim)
    node1 = make_node(SumBackward1, input)
    if node1 is not None:
        node1.self_sym_sizes = input.shape
        node1.dim = dims
        node1.keepdim = keepdim
    data = input.data.sum(axis=dims, keepdims=keepdim)
    return wrap(input.device.xp.asarray(data), input.device, node1)


def sum_to_size(input: Tensor, size: Sequence[int]) -> Tensor:
    """Sum ``input`` down to ``size``, which it must broadcast from (as in PyTorch).

    Raises:
        RuntimeError: if ``input`` is not expandable from ``size``.
    """
    size = tuple(size)
    shape = input.shape
    if shape == size:
        return input
    lead = len(shape) - len(size)
    if lead < 0 or any(s != 1 and s != shape[lead + i] for i, s in enumerate(size)):
        raise RuntimeError(f"size {{{', '.join(map(str, size))}}} is not expandable to size "
                           f"{{{', '.join(map(str, shape))}}}.")
    reduce = tuple(range(lead)) + tuple(
        lead + i for i, s in enumerate(size) if s == 1 and shape[lead + i] != 1
    )
    out = sum(input, reduce, keepdim=True) if reduce else input
    return out.reshape(size) if out.shape != size else out


TENSOR_METHODS = {"sum": sum, "sum_to_size": sum_to_size}
FUNCTIONS = {"sum": sum}
