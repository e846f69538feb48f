"""Ordering along a dimension: ``sort`` and ``topk``.

Both return ``(values, indices)``; the gradient of ``values`` goes back to the
positions ``indices`` name. Equal elements keep their order (a stable sort), which
is PyTorch's order for ``sort(stable=True)``; see docs/engine-api.md for ties otherwise.
"""

from __future__ import annotations

from typing import Any

from engine.graph import Node
from engine.ops._core import make_node, normalize_dim, save, wrap
from engine.ops.reduction import ValuesIndices
from engine.ops.selection import scatter_into_zeros
from engine.tensor import Tensor

__all__ = [
    "FUNCTIONS",
    "TENSOR_METHODS",
    "SortBackward0",
    "SortBackward1",
    "TopkBackward0",
    "sort",
    "topk",
]


class SortBackward0(Node):
    __slots__ = ("dim", "self_sym_sizes")
    dim: int
    self_sym_sizes: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (indices,) = self.saved_tensors()
        if not self.self_sym_sizes:  # a 0-dim input: its one value went to the one output
            return (grads[0],)
        return (scatter_into_zeros(grads[0], self.self_sym_sizes, self.dim, indices.data),)


class SortBackward1(SortBackward0):
    """``sort`` called with ``stable=`` (PyTorch's ``sort.stable`` overload)."""

    __slots__ = ()


class TopkBackward0(SortBackward0):
    __slots__ = ()


def _order(xp: Any, data: Any, axis: int, descending: bool) -> Any:
    """Stable argsort along ``axis``; descending keeps equal elements in order, nan first."""
    if not descending:
        return xp.argsort(data, axis=axis, kind="stable")
    size = data.shape[axis]
    backwards = xp.flip(data, axis)  # nan sorts last: reversed, it comes first
    return size - 1 - xp.flip(xp.argsort(backwards, axis=axis, kind="stable"), axis)


def _values_indices(
    input: Tensor, axis: int, order: Any, node_cls: type[SortBackward0]
) -> ValuesIndices:
    xp = input.device.xp
    data = input.data if input.ndim else input.data.reshape(1)
    values = xp.take_along_axis(data, order, axis=axis)
    if input.ndim == 0:
        values, order = values.reshape(()), order.reshape(())
    node = make_node(node_cls, input)
    indices = wrap(xp.array(order, dtype=xp.int64, order="C"), input.device)
    if node is not None:
        node.dim, node.self_sym_sizes = axis, input.data.shape
        node.save(save(indices))
    return ValuesIndices(wrap(values, input.device, node), indices)


def sort(
    input: Tensor, dim: int = -1, descending: bool = False, *, stable: bool | None = None
) -> ValuesIndices:
    """``(values, indices)``: ``input`` sorted along ``dim`` and where each value came from.

    The sort is always stable; passing ``stable`` records ``SortBackward1``, PyTorch's
    node for that overload.

    Raises:
        IndexError: PyTorch's message when ``dim`` is out of range.
    """
    axis = normalize_dim(dim, input.ndim)
    xp = input.device.xp
    data = input.data if input.ndim else input.data.reshape(1)
    node_cls = SortBackward0 if stable is None else SortBackward1
    return _values_indices(input, axis, _order(xp, data, axis, descending), node_cls)


def topk(
    input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> ValuesIndices:
    """The ``k`` largest (or, with ``largest=False``, smallest) elements along ``dim``.

    They always come sorted, the first of equal elements first (``sorted=False`` leaves
    PyTorch's order unspecified).

    Raises:
        RuntimeError: PyTorch's message when ``k`` is negative or larger than the dimension.
        IndexError: PyTorch's message when ``dim`` is out of range.
    """
    axis = normalize_dim(dim, input.ndim)
    xp = input.device.xp
    data = input.data if input.ndim else input.data.reshape(1)
    if not 0 <= k <= data.shape[axis]:
        raise RuntimeError("selected index k out of range")
    order = _order(xp, data, axis, descending=largest)
    first = tuple(slice(0, k) if d == axis else slice(None) for d in range(data.ndim))
    return _values_indices(input, axis, order[first], TopkBackward0)


TENSOR_METHODS = {"sort": sort, "topk": topk}
"""Installed on :class:`engine.Tensor` by ``engine.ops``."""

FUNCTIONS = {"sort": sort, "topk": topk}
"""Exported as ``engine.<name>`` by ``engine.ops``."""
