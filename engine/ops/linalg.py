"""Matrix products: ``dot``, ``mv``, ``mm``, ``addmm``, ``bmm`` and ``matmul`` (the ``@`` operator).

``matmul`` dispatches on the operands' ranks the way PyTorch's does, so the graph it records
has PyTorch's nodes: ``DotBackward0`` (1-D @ 1-D), ``MvBackward0`` (2-D @ 1-D), ``MmBackward0``
(2-D @ 2-D), ``SqueezeBackward4`` over ``MmBackward0`` (1-D @ 2-D), ``UnsafeViewBackward0``
over a folded ``MmBackward0``/``MvBackward0`` (a batch against a matrix or vector) and over
``BmmBackward0`` (batch against batch, broadcasting the batch dimensions).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from engine.graph import Node
from engine.ops._core import (
    check_broadcast,
    check_same_device,
    dtype_name,
    make_node,
    operands,
    save,
    wrap,
)
from engine.ops.arithmetic import UNUSED
from engine.ops.conversion import clone
from engine.ops.shape import UnsafeViewBackward0, expand, reshape, t, transpose, unsqueeze
from engine.tensor import Tensor

__all__ = [
    "FUNCTIONS",
    "TENSOR_METHODS",
    "AddmmBackward0",
    "BmmBackward0",
    "DotBackward0",
    "MmBackward0",
    "MvBackward0",
    "SqueezeBackward4",
    "addmm",
    "bmm",
    "dot",
    "matmul",
    "mm",
    "mv",
]


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


_C_NAMES = {"float32": "float", "float64": "double", "int64": "long int", "int32": "int"}


def _c_name(dtype: Any) -> str:
    """The C++ name PyTorch's mm uses for a dtype in its messages."""
    return _C_NAMES.get(dtype.name, dtype.name)


def _check_ndim(x: Tensor, ndim: int, message: str) -> None:
    if x.ndim != ndim:
        raise RuntimeError(message)


def _save_pair(node: Node, a: Tensor, b: Tensor) -> None:
    """Save each operand only if the other one's gradient needs it."""
    node.save(
        save(a) if b._requires_grad else UNUSED,
        save(b) if a._requires_grad else UNUSED,
    )


# -- the primitives --------------------------------------------------------------
class DotBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        a, b = self.saved_tensors()
        return (
            g * b if self.should_compute_output(0) else None,
            g * a if self.should_compute_output(1) else None,
        )


def dot(input: Tensor, other: Tensor) -> Tensor:
    """Inner product of two 1-D tensors of the same length and dtype.

    Raises:
        RuntimeError: PyTorch's messages for wrong ranks, lengths or dtypes.
    """
    a, b, device = operands(input, other, promote=False)
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a.shape != b.shape:
        raise RuntimeError(
            f"inconsistent tensor size, expected tensor [{a.shape[0]}] and src [{b.shape[0]}] to "
            f"have the same number of elements, but got {a.shape[0]} and {b.shape[0]} elements "
            f"respectively"
        )
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"dot : expected both vectors to have same dtype, but found {dtype_name(a.dtype)} and "
            f"{dtype_name(b.dtype)}"
        )
    node = make_node(DotBackward0, a, b)
    if node is not None:
        _save_pair(node, a, b)
    return wrap(device.xp.asarray(device.xp.dot(a.data, b.data)), device, node)


class MvBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        mat, vec = self.saved_tensors()
        return (
            unsqueeze(g, 1) * vec if self.should_compute_output(0) else None,
            mv(t(mat), g) if self.should_compute_output(1) else None,
        )


def mv(input: Tensor, vec: Tensor) -> Tensor:
    """Matrix-vector product of an ``(n, k)`` matrix and a length-``k`` vector.

    Raises:
        RuntimeError: PyTorch's messages for wrong ranks, sizes or dtypes.
    """
    a, b, device = operands(input, vec, promote=False)
    if a.ndim != 2 or b.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {a.ndim}, {b.ndim}")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(
            f"size mismatch, got input ({a.shape[0]}), mat ({_dims(a.shape)}), vec ({b.shape[0]})"
        )
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"addmv input tensors must have the same dtype, but got {dtype_name(a.dtype)}, "
            f"{dtype_name(a.dtype)}, and {dtype_name(b.dtype)}"
        )
    node = make_node(MvBackward0, a, b)
    if node is not None:
        _save_pair(node, a, b)
    return wrap(a.data @ b.data, device, node)


class MmBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        a, b = self.saved_tensors()
        return (
            mm(g, t(b)) if self.should_compute_output(0) else None,
            mm(t(a), g) if self.should_compute_output(1) else None,
        )


def mm(input: Tensor, mat2: Tensor) -> Tensor:
    """Product of an ``(n, k)`` and a ``(k, m)`` matrix.

    Raises:
        RuntimeError: PyTorch's messages for wrong ranks, sizes or dtypes.
    """
    a, b, device = operands(input, mat2, promote=False)
    _check_ndim(a, 2, "self must be a matrix")
    _check_ndim(b, 2, "mat2 must be a matrix")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({_dims(a.shape)} and {_dims(b.shape)})"
        )
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"expected m1 and m2 to have the same dtype, but got: {_c_name(a.dtype)} != "
            f"{_c_name(b.dtype)}"
        )
    node = make_node(MmBackward0, a, b)
    if node is not None:
        _save_pair(node, a, b)
    return wrap(a.data @ b.data, device, node)


class AddmmBackward0(Node):
    __slots__ = ("alpha", "beta")
    alpha: float
    beta: float

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        mat1, mat2 = self.saved_tensors()
        return (
            _scaled(g, self.beta) if self.should_compute_output(0) else None,
            _scaled(mm(g, t(mat2)), self.alpha) if self.should_compute_output(1) else None,
            _scaled(mm(t(mat1), g), self.alpha) if self.should_compute_output(2) else None,
        )


def _scaled(x: Tensor, factor: float) -> Tensor:
    return x if factor == 1 else x * factor


def addmm(
    input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: float = 1, alpha: float = 1
) -> Tensor:
    """``beta * input + alpha * (mat1 @ mat2)``, ``input`` broadcast to the product's shape.

    With ``beta == 0`` the values of ``input`` are ignored (NaN included), as in PyTorch.

    Raises:
        RuntimeError: PyTorch's messages for wrong ranks, sizes, dtypes or an ``input`` that
            does not broadcast to ``(n, m)``.
    """
    a, b, device = operands(mat1, mat2, promote=False)
    check_same_device(input, a, b)
    _check_ndim(a, 2, f"mat1 must be a matrix, got {a.ndim}-D tensor")
    _check_ndim(b, 2, f"mat2 must be a matrix, got {b.ndim}-D tensor")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({_dims(a.shape)} and {_dims(b.shape)})"
        )
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"mat1 and mat2 must have the same dtype, but got {dtype_name(a.dtype)} and "
            f"{dtype_name(b.dtype)}"
        )
    if input.dtype != b.dtype:
        raise RuntimeError(
            f"self and mat2 must have the same dtype, but got {dtype_name(input.dtype)} and "
            f"{dtype_name(b.dtype)}"
        )
    shape = (a.shape[0], b.shape[1])
    bias = expand(input.detach(), shape).data  # PyTorch's message when it does not broadcast
    product = a.data @ b.data
    if alpha != 1:
        product = product * alpha
    data = product if beta == 0 else product + (bias if beta == 1 else bias * beta)
    node = make_node(AddmmBackward0, input, a, b)
    if node is not None:
        node.alpha, node.beta = alpha, beta
        _save_pair(node, a, b)
    return wrap(data.astype(b.dtype, copy=False), device, node)


class BmmBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        a, b = self.saved_tensors()
        return (
            bmm(g, transpose(b, 1, 2)) if self.should_compute_output(0) else None,
            bmm(transpose(a, 1, 2), g) if self.should_compute_output(1) else None,
        )


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    """Batched product of ``(B, n, k)`` and ``(B, k, m)`` tensors.

    Raises:
        RuntimeError: PyTorch's messages for wrong ranks, sizes or dtypes.
    """
    a, b, device = operands(input, mat2, promote=False)
    _check_ndim(a, 3, "batch1 must be a 3D tensor")
    _check_ndim(b, 3, "batch2 must be a 3D tensor")
    expected = (a.shape[0], a.shape[2])
    if b.shape[:2] != expected:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: "
            f"[{expected[0]}, {expected[1]}] but got: [{b.shape[0]}, {b.shape[1]}]."
        )
    if a.dtype != b.dtype:
        raise RuntimeError(
            f"expected scalar type {dtype_name(a.dtype)} but found {dtype_name(b.dtype)}"
        )
    node = make_node(BmmBackward0, a, b)
    if node is not None:
        _save_pair(node, a, b)
    return wrap(device.xp.matmul(a.data, b.data), device, node)


# -- the views matmul puts around them ---------------------------------------------
def _unsafe_view(input: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Reshape a fresh product that nothing else sees (PyTorch's ``_unsafe_view``)."""
    node = make_node(UnsafeViewBackward0, input)
    if node is not None:
        node.self_sym_sizes = input.shape
    return wrap(input.data.reshape(shape), input.device, node)


class SqueezeBackward4(Node):
    """Backward of the in-place ``squeeze_(dim)`` PyTorch's matmul applies to its own result."""

    __slots__ = ("dim",)
    dim: int

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (unsqueeze(grads[0], self.dim),)


def _squeeze_fresh(input: Tensor, dim: int) -> Tensor:
    """Drop size-1 ``dim`` of a fresh product (recorded as PyTorch's ``squeeze_``)."""
    node = make_node(SqueezeBackward4, input)
    if node is not None:
        node.dim = dim
    return wrap(input.device.xp.squeeze(input.data, dim), input.device, node)


# -- matmul ----------------------------------------------------------------------
def _batch_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """Broadcast two batch shapes, with PyTorch's message when they do not match."""
    check_broadcast(a, b)
    n = len(a) if len(a) > len(b) else len(b)
    a = (1,) * (n - len(a)) + a
    b = (1,) * (n - len(b)) + b
    return tuple(y if x == 1 else x for x, y in zip(a, b, strict=True))


def _check_inner(a: Tensor, b: Tensor, batch: tuple[int, ...]) -> None:
    """The contraction sizes must agree (PyTorch checks this as the bmm it folds to)."""
    k1 = a.shape[-1]
    k2 = b.shape[-2] if b.ndim > 1 else b.shape[0]
    if k1 != k2:
        count = math.prod(batch)
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: [{count}, {k1}] "
            f"but got: [{count}, {k2}]."
        )


def matmul(input: Any, other: Any) -> Tensor:
    """Matrix product with NumPy's rules for 1-D operands and broadcast batch dimensions.

    * 1-D @ 1-D: the dot product (a 0-dim tensor).
    * 2-D @ 2-D: the matrix product.
    * 1-D operands act as a row (left) or column (right) vector that is then removed.
    * More than 2-D: batches of matrices; the batch dimensions broadcast.

    Raises:
        TypeError: for a Python number (as PyTorch; use ``*`` to scale).
        RuntimeError: for 0-dim operands or shapes that cannot be multiplied.
    """
    for name, value in (("input", input), ("other", other)):
        if isinstance(value, bool | int | float | np.number):
            raise TypeError(
                f"matmul(): argument '{name}' must be Tensor, not {type(value).__name__}"
            )
    a, b, _ = operands(input, other, promote=False)
    d1, d2 = a.ndim, b.ndim
    if d1 == 0 or d2 == 0:
        raise RuntimeError(
            f"both arguments to matmul need to be at least 1D, but they are {d1}D and {d2}D"
        )
    if d1 == 1 and d2 == 1:
        return dot(a, b)
    if d1 == 2 and d2 == 1:
        return mv(a, b)
    if d1 == 1 and d2 == 2:
        return _squeeze_fresh(mm(unsqueeze(a, 0), b), 0)
    if d1 == 2 and d2 == 2:
        return mm(a, b)
    if d2 <= 2:
        # A batch against one matrix or vector: fold the batch into the rows, one mm/mv.
        folded = reshape(a, (-1, a.shape[-1]))
        if d2 == 1:
            return _unsafe_view(mv(folded, b), a.shape[:-1])
        return _unsafe_view(mm(folded, b), (*a.shape[:-1], b.shape[-1]))
    if d1 <= 2:
        # One matrix or vector against a batch: fold the batch of b^T and multiply from the left.
        _check_inner(a, b, b.shape[:-2])
        folded = reshape(transpose(b, -1, -2), (-1, b.shape[-2]))
        if d1 == 1:
            return _unsafe_view(mv(folded, a), b.shape[:-2] + b.shape[-1:])
        out = _unsafe_view(mm(folded, t(a)), (*b.shape[:-2], b.shape[-1], a.shape[0]))
        out = transpose(out, -1, -2)
        # PyTorch returns it contiguous: a copy unless the transposed view already is.
        return out if out.data.flags.c_contiguous else clone(out)
    batch = _batch_shape(a.shape[:-2], b.shape[:-2])
    _check_inner(a, b, batch)
    n, k = a.shape[-2:]
    m = b.shape[-1]
    a3 = reshape(expand(a, (*batch, n, k)), (-1, n, k))
    b3 = reshape(expand(b, (*batch, k, m)), (-1, k, m))
    return _unsafe_view(bmm(a3, b3), (*batch, n, m))


def _rmatmul(self: Tensor, other: Any) -> Tensor:
    return matmul(other, self)


TENSOR_METHODS = {
    "matmul": matmul,
    "mm": mm,
    "mv": mv,
    "dot": dot,
    "bmm": bmm,
    "addmm": addmm,
    "__matmul__": matmul,
    "__rmatmul__": _rmatmul,
}
"""Installed on :class:`engine.Tensor` by ``engine.ops``."""

FUNCTIONS = {"matmul": matmul, "mm": mm, "mv": mv, "dot": dot, "bmm": bmm, "addmm": addmm}
"""Exported as ``engine.<name>`` by ``engine.ops``."""
