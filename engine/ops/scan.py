"""Running totals along a dimension: ``cumsum`` and ``cumprod``."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine import grad_mode
from engine.graph import Node
from engine.ops._core import make_node, normalize_dim, save, save_output, wrap
from engine.tensor import Tensor, make_tensor

__all__ = [
    "FUNCTIONS",
    "TENSOR_METHODS",
    "CumprodBackward0",
    "CumsumBackward0",
    "cumprod",
    "cumsum",
]


def _scan_input(input: Tensor, dim: int, dtype: Any) -> tuple[Any, int]:
    """``input``'s array in the result's dtype, and ``dim`` normalized.

    PyTorch accumulates integers and bools as ``int64`` unless ``dtype`` says otherwise.
    """
    axis = normalize_dim(dim, input.ndim)
    data = input.data
    if dtype is not None:
        data = data.astype(np.dtype(dtype), copy=False)
    elif data.dtype.kind in "biu":
        data = data.astype(np.int64)
    return data, axis


def _reversed_cumsum(t: Tensor, axis: int) -> Tensor:
    """``t.flip(axis).cumsum(axis).flip(axis)``: the sum of each element and those after it."""
    if t.ndim == 0:
        return t
    if not (grad_mode._state.enabled and t._requires_grad):
        xp = t.device.xp
        flipped = xp.flip(t.data, axis)
        return make_tensor(xp.ascontiguousarray(xp.flip(xp.cumsum(flipped, axis), axis)), t.device)
    from engine.factories import arange
    from engine.ops.selection import index_select

    backwards = arange(t.shape[axis] - 1, -1, -1, device=t.device)
    return index_select(cumsum(index_select(t, axis, backwards), axis), axis, backwards)


class CumsumBackward0(Node):
    __slots__ = ("dim",)
    dim: int

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (_reversed_cumsum(grads[0], self.dim),)


def cumsum(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """Running sums along ``dim``: element ``i`` is the sum of elements ``0..i``.

    Integer and bool inputs give ``int64`` (or ``dtype`` when given).

    Raises:
        IndexError: PyTorch's message when ``dim`` is out of range.
    """
    data, axis = _scan_input(input, dim, dtype)
    node = make_node(CumsumBackward0, input)
    if node is not None:
        node.dim = axis
    out = data.cumsum(axis) if data.ndim else data.copy()
    return wrap(out, input.device, node)


class CumprodBackward0(Node):
    """Backward of ``cumprod``: ``reversed_cumsum(grad * result) / input`` away from zeros.

    Where the input has zeros that formula divides by zero; the gradient is then built
    from products that leave each element out, as PyTorch's ``cumprod_backward`` does.
    """

    __slots__ = ("dim",)
    dim: int

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        input, result = self.saved_tensors()
        axis = self.dim
        if input.data.size <= 1 or input.ndim == 0 or input.shape[axis] == 1:
            return (g,)
        xp = input.device.xp
        if not bool(xp.any(input.data == 0)):
            return (_reversed_cumsum(g * result, axis) / input,)
        if grad_mode._state.enabled:  # create_graph: differentiable, O(n**2)
            return (_cumprod_grad_by_omission(g, input, axis),)
        return (make_tensor(_cumprod_grad_with_zeros(xp, g.data, input.data, axis), g.device),)


def _cumprod_grad_with_zeros(xp: Any, grad: Any, input: Any, axis: int) -> Any:
    """The gradient of ``cumprod`` in one pass, for inputs with zeros (no graph).

    With ``z`` the first zero along the axis: before it, ``reversed_cumsum(g * y) / x``;
    at it, ``y[z - 1] * sum_{k >= z} g[k] * prod_{z < j <= k} x[j]``; after it, 0.
    """
    grad = xp.moveaxis(grad, axis, -1)
    x = xp.moveaxis(input, axis, -1)
    zeros_so_far = xp.cumsum(x == 0, axis=-1)
    before = zeros_so_far == 0
    first_zero = (zeros_so_far == 1) & (x == 0)
    ones = xp.ones_like(x)
    before_x = xp.where(before, x, ones)
    y = xp.cumprod(before_x, axis=-1)  # the output before the first zero, 1 at and after
    w = xp.where(before, grad * y, 0)
    rc = xp.flip(xp.cumsum(xp.flip(w, -1), -1), -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = xp.where(before, rc / before_x, 0)
    after = xp.cumprod(xp.where(before | first_zero, ones, x), axis=-1)  # prod_{z<j<=k} x[j]
    at_zero = (grad * after * (zeros_so_far >= 1)).sum(axis=-1, keepdims=True)
    out = xp.where(first_zero, y[..., -1:] * at_zero, out)
    return xp.ascontiguousarray(xp.moveaxis(out, -1, axis)).astype(grad.dtype, copy=False)


def _cumprod_grad_by_omission(g: Tensor, input: Tensor, axis: int) -> Tensor:
    """``grad[k] = sum_{j >= k} g[j] * prod_{i <= j, i != k} x[i]``, with differentiable ops."""
    from engine.factories import ones
    from engine.ops.reduction import sum as sum_
    from engine.ops.shape import cat

    n = input.shape[axis]
    one_shape = tuple(1 if d == axis else s for d, s in enumerate(input.shape))
    unit = ones(one_shape, dtype=input.dtype, device=input.device)
    pieces = []
    for k in range(n):
        # Products of the elements before k (1 for k = 0), then of those after it.
        before = unit if k == 0 else cumprod(input.narrow(axis, 0, k), axis).narrow(axis, k - 1, 1)
        omitted = before
        if k < n - 1:
            after = cumprod(input.narrow(axis, k + 1, n - k - 1), axis) * before
            omitted = cat([before, after], axis)
        pieces.append(sum_(g.narrow(axis, k, n - k) * omitted, axis, keepdim=True))
    return cat(pieces, axis)


def cumprod(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """Running products along ``dim``: element ``i`` is the product of elements ``0..i``.

    Integer and bool inputs give ``int64`` (or ``dtype`` when given).

    Raises:
        IndexError: PyTorch's message when ``dim`` is out of range.
    """
    data, axis = _scan_input(input, dim, dtype)
    node = make_node(CumprodBackward0, input)
    xp = input.device.xp
    out = wrap(xp.cumprod(data, axis=axis) if data.ndim else data.copy(), input.device, node)
    if node is not None:
        node.dim = axis
        node.save(save(input), save_output(out))
    return out


TENSOR_METHODS = {"cumsum": cumsum, "cumprod": cumprod}
"""Installed on :class:`engine.Tensor` by ``engine.ops``."""

FUNCTIONS = {"cumsum": cumsum, "cumprod": cumprod}
"""Exported as ``engine.<name>`` by ``engine.ops``."""
