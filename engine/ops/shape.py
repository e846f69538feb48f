"""Shape operations: views and copies that move elements around without arithmetic."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.graph import Node
from engine.ops._core import make_node, wrap, wrap_view
from engine.tensor import Tensor


def _shape_arg(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """Accept ``reshape(2, 3)`` and ``reshape((2, 3))`` alike."""
    if len(shape) == 1 and isinstance(shape[0], Sequence | tuple | list):
        return tuple(int(s) for s in shape[0])
    return tuple(int(s) for s in shape)


class ViewBackward0(Node):
    __slots__ = ("self_sym_sizes",)

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (grads[0].reshape(self.self_sym_sizes),)


class ReshapeAliasBackward0(ViewBackward0):
    __slots__ = ()


def _reshaped(input: Tensor, shape: tuple[int, ...]) -> Any:
    try:
        return input.data.reshape(shape)
    except ValueError:
        raise RuntimeError(
            f"shape '[{', '.join(map(str, shape))}]' is invalid for input of size {input.numel()}"
        ) from None


def reshape(input: Tensor, *shape: Any) -> Tensor:
    """The same elements in a new shape (``-1`` infers one dimension)."""
    target = _shape_arg(shape)
    data = _reshaped(input, target)
    node = make_node(ViewBackward0, input)
    if node is not None:
        node.self_sym_sizes = input.shape
    if _shares(data, input.data):
        return wrap_view(data, input, node)
    return wrap(data, input.device, node)


def view(input: Tensor, *shape: Any) -> Tensor:
    """A view with a new shape; the data must be contiguous enough, as in PyTorch.

    Raises:
        RuntimeError: when the shape does not fit, or no view is possible.
    """
    target = _shape_arg(shape)
    data = _reshaped(input, target)
    if not _shares(data, input.data):
        raise RuntimeError(
            "view size is not compatible with input tensor's size and stride (at least one "
            "dimension spans across two contiguous subspaces). Use .reshape(...) instead."
        )
    node = make_node(ViewBackward0, input)
    if node is not None:
        node.self_sym_sizes = input.shape
    return wrap_view(data, input, node)


def _shares(a: Any, b: Any) -> bool:
    """Whether the reshaped array still reads the input's memory (a true view)."""
    return bool(a.size == 0 or np.may_share_memory(a, b))


class ExpandBackward0(Node):
    __slots__ = ("self_sym_sizes",)

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (grads[0].sum_to_size(self.self_sym_sizes),)


def expand(input: Tensor, *sizes: Any) -> Tensor:
    """A broadcast view of ``input`` with ``sizes`` (``-1`` keeps a dimension).

    Raises:
        RuntimeError: PyTorch's message when a dimension cannot be expanded.
    """
    target = list(_shape_arg(sizes))
    shape = input.shape
    if len(target) < len(shape):
        raise RuntimeError(
            f"expand(torch.FloatTensor{{[{', '.join(map(str, shape))}]}}, size=[{', '.join(map(str, target))}]): "
            f"the number of sizes provided ({len(target)}) must be greater or equal to the number "
            f"of dimensions in the tensor ({len(shape)})"
        )
    lead = len(target) - len(shape)
    for i, s in enumerate(shape):
        if target[lead + i] == -1:
            target[lead + i] = s
        elif s != 1 and s != target[lead + i]:
            raise RuntimeError(
                f"The expanded size of the tensor ({target[lead + i]}) must match the existing "
                f"size ({s}) at non-singleton dimension {lead + i}.  Target sizes: "
                f"[{', '.join(map(str, target))}].  Tensor sizes: [{', '.join(map(str, shape))}]"
            )
    target_t = tuple(target)
    if target_t == shape:
        node0 = make_node(ExpandBackward0, input)
        if node0 is not None:
            node0.self_sym_sizes = shape
        return wrap_view(input.data, input, node0)
    node = make_node(ExpandBackward0, input)
    if node is not None:
        node.self_sym_sizes = shape
    data = input.device.xp.broadcast_to(input.data, target_t)
    return wrap_view(data, input, node)


TENSOR_METHODS = {"reshape": reshape, "view": view, "expand": expand}
FUNCTIONS = {"reshape": reshape}
