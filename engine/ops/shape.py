"""Shape operations: views and copies that move elements around without arithmetic."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine import _context, grad_mode
from engine.graph import Node
from engine.ops._core import check_same_device, make_node, normalize_dim, wrap, wrap_view
from engine.tensor import Tensor

__all__ = [
    "FUNCTIONS",
    "TENSOR_METHODS",
    "CatBackward0",
    "ExpandBackward0",
    "PermuteBackward0",
    "SqueezeBackward0",
    "SqueezeBackward1",
    "SqueezeBackward2",
    "StackBackward0",
    "TBackward0",
    "TransposeBackward0",
    "UnsafeViewBackward0",
    "UnsqueezeBackward0",
    "ViewBackward0",
    "cat",
    "contiguous",
    "expand",
    "expand_as",
    "flatten",
    "permute",
    "reshape",
    "squeeze",
    "stack",
    "t",
    "transpose",
    "unsqueeze",
    "view",
    "view_as",
]

_FULL = slice(None)


def _shape_arg(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """Accept ``reshape(2, 3)`` and ``reshape((2, 3))`` alike."""
    if len(shape) == 1 and isinstance(shape[0], Sequence | tuple | list):
        return tuple(int(s) for s in shape[0])
    return tuple(int(s) for s in shape)


class ViewBackward0(Node):
    __slots__ = ("self_sym_sizes",)
    self_sym_sizes: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (grads[0].reshape(self.self_sym_sizes),)


class UnsafeViewBackward0(ViewBackward0):
    """Backward of a reshape that had to copy (PyTorch's ``_unsafe_view`` of a clone)."""

    __slots__ = ()


def _reshaped(input: Tensor, shape: tuple[int, ...]) -> Any:
    try:
        return input.data.reshape(shape)
    except ValueError:
        raise RuntimeError(
            f"shape '[{', '.join(map(str, shape))}]' is invalid for input of size {input.numel()}"
        ) from None


def reshape(input: Tensor, *shape: Any) -> Tensor:
    """The same elements in a new shape (``-1`` infers one dimension).

    A view where one is possible (``ViewBackward0``); otherwise, as in PyTorch, a contiguous
    copy reshaped (``UnsafeViewBackward0`` over ``CloneBackward0``).
    """
    target = _shape_arg(shape)
    data = _reshaped(input, target)
    if _shares(data, input.data, input.device.xp):
        node = make_node(ViewBackward0, input)
        if node is not None:
            node.self_sym_sizes = input.shape
        return wrap_view(data, input, node)
    copy = contiguous(input)
    node = make_node(UnsafeViewBackward0, copy)
    if node is not None:
        node.self_sym_sizes = input.shape
    return wrap(copy.data.reshape(target), input.device, node)


def contiguous(input: Tensor) -> Tensor:
    """``input`` itself if its elements lie in row-major order, else a copy that does."""
    if input.data.flags.c_contiguous:
        return input
    from engine.ops.conversion import clone

    return clone(input)


def view(input: Tensor, *shape: Any) -> Tensor:
    """A view with a new shape; the data must be contiguous enough, as in PyTorch.

    Raises:
        RuntimeError: when the shape does not fit, or no view is possible.
    """
    target = _shape_arg(shape)
    data = _reshaped(input, target)
    if not _shares(data, input.data, input.device.xp):
        raise RuntimeError(
            "view size is not compatible with input tensor's size and stride (at least one "
            "dimension spans across two contiguous subspaces). Use .reshape(...) instead."
        )
    node = make_node(ViewBackward0, input)
    if node is not None:
        node.self_sym_sizes = input.shape
    return wrap_view(data, input, node)


def _shares(a: Any, b: Any, xp: Any) -> bool:
    """Whether the reshaped array still reads the input's memory (a true view)."""
    return bool(a.size == 0 or xp.may_share_memory(a, b))


class ExpandBackward0(Node):
    __slots__ = ("self_sym_sizes",)
    self_sym_sizes: tuple[int, ...]

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
            f"expand(torch.FloatTensor{{[{_join(shape)}]}}, size=[{_join(target)}]): "
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


def _join(sizes: Sequence[int]) -> str:
    return ", ".join(map(str, sizes))


def view_as(input: Tensor, other: Tensor) -> Tensor:
    """``input.view(other.shape)``."""
    return view(input, other.shape)


def expand_as(input: Tensor, other: Tensor) -> Tensor:
    """``input.expand(other.shape)``."""
    return expand(input, other.shape)


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dimensions ``start_dim`` to ``end_dim`` into one (a view when possible).

    Raises:
        RuntimeError: when ``start_dim`` comes after ``end_dim``.
    """
    if input.ndim == 0:
        return reshape(input, (1,))
    start = normalize_dim(start_dim, input.ndim)
    end = normalize_dim(end_dim, input.ndim)
    if start > end:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if start == end:
        return input
    shape = input.shape
    return reshape(input, (*shape[:start], -1, *shape[end + 1 :]))


# -- transposition -----------------------------------------------------------
class TransposeBackward0(Node):
    __slots__ = ("dim0", "dim1")
    dim0: int
    dim1: int

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (transpose(grads[0], self.dim0, self.dim1),)


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    """A view with dimensions ``dim0`` and ``dim1`` swapped."""
    d0 = normalize_dim(dim0, input.ndim)
    d1 = normalize_dim(dim1, input.ndim)
    node = make_node(TransposeBackward0, input)
    if node is not None:
        node.dim0, node.dim1 = d0, d1
    data = input.data if input.ndim == 0 else input.device.xp.swapaxes(input.data, d0, d1)
    return wrap_view(data, input, node)


class TBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (t(grads[0]),)


def t(input: Tensor) -> Tensor:
    """The transpose of a matrix (tensors of fewer dimensions are returned as views).

    Raises:
        RuntimeError: for tensors with more than two dimensions.
    """
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    node = make_node(TBackward0, input)
    return wrap_view(input.data.T, input, node)


class PermuteBackward0(Node):
    __slots__ = ("dims",)
    dims: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (permute(grads[0], tuple(np.argsort(self.dims).tolist())),)


def permute(input: Tensor, *dims: Any) -> Tensor:
    """A view with the dimensions reordered: output dim ``i`` is input dim ``dims[i]``.

    Raises:
        RuntimeError: when ``dims`` does not name every dimension exactly once.
    """
    order = _shape_arg(dims)
    if len(order) != input.ndim:
        raise RuntimeError(
            "permute(sparse_coo): number of dimensions in the tensor input does not match the "
            "length of the desired ordering of dimensions i.e. input.dim() = "
            f"{input.ndim} is not equal to len(dims) = {len(order)}"
        )
    order = tuple(normalize_dim(d, input.ndim) for d in order)
    if len(set(order)) != len(order):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    node = make_node(PermuteBackward0, input)
    if node is not None:
        node.dims = order
    return wrap_view(input.data.transpose(order), input, node)


def _reversed_dims(input: Tensor) -> Tensor:
    """``Tensor.T``: the dimensions reversed (PyTorch deprecates it beyond 2-D)."""
    if input.ndim > 2:
        warnings.warn(
            "The use of `x.T` on tensors of dimension other than 2 to reverse their shape is "
            "deprecated and it will throw an error in a future release. Consider `x.mT` to "
            "transpose batches of matrices or `x.permute(*torch.arange(x.ndim - 1, -1, -1))` to "
            "reverse the dimensions of a tensor.",
            UserWarning,
            stacklevel=2,
        )
    return permute(input, tuple(range(input.ndim - 1, -1, -1)))


# -- adding and removing size-1 dimensions -------------------------------------
class UnsqueezeBackward0(Node):
    __slots__ = ("dim",)
    dim: int

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (squeeze(grads[0], self.dim),)


def unsqueeze(input: Tensor, dim: int | None = None, *, axis: int | None = None) -> Tensor:
    """A view with a new dimension of size 1 inserted at ``dim``."""
    if axis is not None:
        dim = axis
    if dim is None:
        raise TypeError("unsqueeze() missing 1 required positional argument: 'dim'")
    d = normalize_dim(dim, input.ndim + 1)
    node = make_node(UnsqueezeBackward0, input)
    if node is not None:
        node.dim = d
    return wrap_view(input.device.xp.expand_dims(input.data, d), input, node)


class SqueezeBackward0(Node):
    """Backward of ``squeeze()`` (every size-1 dimension)."""

    __slots__ = ("self_sym_sizes",)
    self_sym_sizes: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (reshape(grads[0], self.self_sym_sizes),)


class SqueezeBackward1(SqueezeBackward0):
    """Backward of ``squeeze(dim)``."""

    __slots__ = ("dim",)
    dim: tuple[int, ...]  # the one squeezed dim, or () when its size was not 1


class SqueezeBackward2(SqueezeBackward0):
    """Backward of ``squeeze(dims)``."""

    __slots__ = ("dim",)
    dim: tuple[int, ...]


def squeeze(
    input: Tensor,
    dim: int | Sequence[int] | None = None,
    *,
    axis: int | Sequence[int] | None = None,
) -> Tensor:
    """A view without the size-1 dimensions (all of them, or those among ``dim``).

    Dimensions in ``dim`` whose size is not 1 are kept, as in PyTorch.
    """
    if axis is not None:
        dim = axis
    shape = input.shape
    node: SqueezeBackward0 | None
    if dim is None:
        dims = tuple(i for i, s in enumerate(shape) if s == 1)
        node = make_node(SqueezeBackward0, input)
    elif isinstance(dim, int):
        dims = (normalize_dim(dim, input.ndim),)
        node = make_node(SqueezeBackward1, input)
    else:
        dims = tuple(normalize_dim(d, input.ndim) for d in dim)
        node = make_node(SqueezeBackward2, input)
    dims = tuple(d for d in dims if input.ndim and shape[d] == 1)
    if node is not None:
        node.self_sym_sizes = shape
        if isinstance(node, SqueezeBackward1 | SqueezeBackward2):  # exactly when dim is not None
            node.dim = dims
    data = input.data.reshape(tuple(s for i, s in enumerate(shape) if i not in dims))
    return wrap_view(data, input, node)


# -- joining -------------------------------------------------------------------
class CatBackward0(Node):
    __slots__ = ("dim", "sizes")
    dim: int
    sizes: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        out: list[Any] = []
        start = 0
        if grad_mode._state.enabled:  # create_graph: differentiable views
            for i, size in enumerate(self.sizes):
                needed = self.should_compute_output(i)
                out.append(g.narrow(self.dim, start, size) if needed else None)
                start += size
            return tuple(out)
        # What narrow() makes without grad mode, without its checks (the sizes are g's own).
        data = g.data
        lead = (_FULL,) * self.dim
        task = _context.TLS.graph_task
        pruned = task is not None and bool(task.exec_info)
        edges = self._next_edges
        for i, size in enumerate(self.sizes):
            end = start + size
            if edges[i] is None or (pruned and not self.should_compute_output(i)):
                out.append(None)
            else:
                out.append(wrap_view(data[(*lead, slice(start, end))], g))
            start = end
        return tuple(out)


def cat(tensors: Sequence[Tensor], dim: int = 0, *, axis: int | None = None) -> Tensor:
    """Concatenate ``tensors`` along an existing dimension ``dim``.

    Raises:
        ValueError: for an empty sequence.
        RuntimeError: PyTorch's messages for 0-dim tensors and mismatched shapes.
    """
    if axis is not None:
        dim = axis
    tensors = list(tensors)
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, x in enumerate(tensors):
        if x.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    first = tensors[0].shape
    d = normalize_dim(dim, len(first))
    for i, x in enumerate(tensors[1:], start=1):
        if x.ndim != len(first):
            raise RuntimeError(
                f"Tensors must have same number of dimensions: got {len(first)} and {x.ndim}"
            )
        for k, (a, b) in enumerate(zip(first, x.shape, strict=True)):
            if k != d and a != b:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {d}. Expected size {a} but "
                    f"got size {b} for tensor number {i} in the list."
                )
    device = check_same_device(*tensors)
    node = make_node(CatBackward0, *tensors)
    if node is not None:
        node.dim = d
        node.sizes = tuple(x.shape[d] for x in tensors)
    return wrap(device.xp.concatenate([x.data for x in tensors], axis=d), device, node)


class StackBackward0(Node):
    __slots__ = ("dim",)
    dim: int

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return tuple(
            grads[0].select(self.dim, i) if self.should_compute_output(i) else None
            for i in range(self.num_outputs)
        )


def stack(tensors: Sequence[Tensor], dim: int = 0, *, axis: int | None = None) -> Tensor:
    """Join equally shaped ``tensors`` along a new dimension ``dim``.

    Raises:
        RuntimeError: for an empty sequence or tensors of different shapes.
    """
    if axis is not None:
        dim = axis
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    first = tensors[0].shape
    for i, x in enumerate(tensors[1:], start=1):
        if x.shape != first:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got [{_join(first)}] at entry 0 "
                f"and [{_join(x.shape)}] at entry {i}"
            )
    d = normalize_dim(dim, len(first) + 1)
    device = check_same_device(*tensors)
    node = make_node(StackBackward0, *tensors)
    if node is not None:
        node.dim = d
    return wrap(device.xp.stack([x.data for x in tensors], axis=d), device, node)


TENSOR_METHODS = {
    "reshape": reshape,
    "contiguous": contiguous,
    "view": view,
    "view_as": view_as,
    "expand": expand,
    "expand_as": expand_as,
    "flatten": flatten,
    "transpose": transpose,
    "t": t,
    "permute": permute,
    "T": property(_reversed_dims),
    "unsqueeze": unsqueeze,
    "squeeze": squeeze,
}
"""Installed on :class:`engine.Tensor` by ``engine.ops``."""

FUNCTIONS = {
    "reshape": reshape,
    "flatten": flatten,
    "transpose": transpose,
    "t": t,
    "permute": permute,
    "unsqueeze": unsqueeze,
    "squeeze": squeeze,
    "cat": cat,
    "stack": stack,
}
"""Exported as ``engine.<name>`` by ``engine.ops``."""
