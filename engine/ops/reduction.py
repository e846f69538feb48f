"""Reductions: ``sum sum_to_size mean norm amax amin max min argmax argmin``."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from engine import grad_mode
from engine.graph import Node
from engine.ops._core import dtype_name, make_node, normalize_dim, save, save_output, wrap
from engine.ops.pointwise import maximum, minimum, where
from engine.tensor import Tensor, make_tensor

__all__ = [
    "FUNCTIONS",
    "TENSOR_METHODS",
    "AmaxBackward0",
    "AminBackward0",
    "LinalgVectorNormBackward0",
    "MaxBackward0",
    "MaxBackward1",
    "MeanBackward0",
    "MeanBackward1",
    "MinBackward0",
    "MinBackward1",
    "SumBackward0",
    "SumBackward1",
    "ValuesIndices",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "max",
    "mean",
    "min",
    "norm",
    "sum",
    "sum_to_size",
]


def _numpy_names(dim: Any, keepdim: bool, axis: Any, keepdims: bool | None) -> tuple[Any, bool]:
    """``dim`` and ``keepdim``, or NumPy's ``axis`` and ``keepdims`` in their place (as PyTorch)."""
    return (dim if axis is None else axis), (keepdim if keepdims is None else keepdims)


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
    self_sym_sizes: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (grads[0].expand(self.self_sym_sizes),)


class SumBackward1(Node):
    """Backward of a sum over ``dim``."""

    __slots__ = ("dim", "keepdim", "self_sym_sizes")
    dim: tuple[int, ...]
    keepdim: bool
    self_sym_sizes: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = _unsqueeze_reduced(grads[0], self.dim, self.keepdim)
        return (g.expand(self.self_sym_sizes),)


def sum(
    input: Tensor,
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    *,
    axis: int | Sequence[int] | None = None,
    keepdims: bool | None = None,
) -> Tensor:
    """Sum of all elements, or over ``dim`` (keeping it with size 1 if ``keepdim``).

    ``axis`` and ``keepdims`` are NumPy's names for ``dim`` and ``keepdim``, which PyTorch
    accepts too (as do the other reductions here).
    """
    dim, keepdim = _numpy_names(dim, keepdim, axis, keepdims)
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


def _size_arg(name: str, args: tuple[Any, ...], size: Any) -> tuple[int, ...]:
    """A size given as ints (``f(1, 3)``), one sequence (``f((1, 3))``) or ``size=``.

    Raises:
        TypeError: PyTorch's message for no size, or a size given twice.
    """
    if size is not None:
        if args:
            raise TypeError(f"{name}() got multiple values for argument 'size'")
        return tuple(size)
    if not args:
        raise TypeError(f'{name}() missing 1 required positional arguments: "size"')
    if len(args) == 1 and hasattr(args[0], "__iter__"):
        return tuple(operator.index(s) for s in args[0])
    if any(hasattr(a, "__iter__") for a in args):
        raise TypeError(f"{name}() takes 1 positional argument but {len(args)} were given")
    return tuple(operator.index(a) for a in args)


def sum_to_size(input: Tensor, *sizes: Any, size: Sequence[int] | None = None) -> Tensor:
    """Sum ``input`` down to ``size``, which it must broadcast from (as in PyTorch).

    ``size`` may be given as ints (``x.sum_to_size(1, 3)``) or one sequence.

    Raises:
        RuntimeError: if ``input`` is not expandable from ``size``.
    """
    # One tuple (a Size too) is how the engine calls it: no conversion on that path.
    if size is None and len(sizes) == 1 and isinstance(sizes[0], tuple):
        size = sizes[0]
    else:
        size = _size_arg("sum_to_size", sizes, size)
    shape = input.data.shape
    if shape == size:
        return input
    lead = len(shape) - len(size)
    if lead < 0 or any(s != 1 and s != shape[lead + i] for i, s in enumerate(size)):
        raise RuntimeError(
            f"size {{[{', '.join(map(str, size))}]}} is not expandable to size "
            f"{{[{', '.join(map(str, shape))}]}}."
        )
    kept = tuple(lead + i for i, s in enumerate(size) if s == 1 and shape[lead + i] != 1)
    if input.data.dtype.kind in "fc" and not (input._requires_grad and grad_mode._state.enabled):
        # Nothing to record (a backward pass, mostly): the same sums, dropping the leading
        # dims instead of reshaping, so that the result owns its memory and AccumulateGrad
        # keeps it as is (Note [Stealing the first gradient]).
        data = input.data
        if kept:
            data = data.sum(axis=kept, keepdims=True)
        if lead:
            data = data.sum(axis=tuple(range(lead)))
        return make_tensor(data, input.device)
    reduce = tuple(range(lead)) + kept
    out = sum(input, reduce, keepdim=True) if reduce else input
    return out.reshape(size) if out.shape != size else out  # PyTorch's SumBackward1, View


# -- mean ------------------------------------------------------------------------
def _reduced_dims(dim: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """Like :func:`_dims`, but ``()`` also means every dim (``mean``/``amax`` in PyTorch)."""
    if dim is None or (not isinstance(dim, int) and len(dim) == 0):
        return tuple(range(ndim))
    dims = _dims(dim, ndim)
    # A 0-dim tensor accepts dim 0 or -1 and has nothing to reduce.
    return dims if ndim else ()


class MeanBackward0(Node):
    """Backward of a full mean."""

    __slots__ = ("self_numel", "self_sym_sizes")
    self_numel: int
    self_sym_sizes: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (grads[0].expand(self.self_sym_sizes) / self.self_numel,)


class MeanBackward1(Node):
    """Backward of a mean over ``dim``."""

    __slots__ = ("count", "dim", "keepdim", "self_sym_sizes")
    count: int
    dim: tuple[int, ...]
    keepdim: bool
    self_sym_sizes: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = _unsqueeze_reduced(grads[0], self.dim, self.keepdim)
        return (g.expand(self.self_sym_sizes) / self.count,)


def mean(
    input: Tensor,
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    *,
    axis: int | Sequence[int] | None = None,
    keepdims: bool | None = None,
) -> Tensor:
    """Mean of all elements, or over ``dim`` (keeping it with size 1 if ``keepdim``).

    Raises:
        RuntimeError: for integer or bool tensors, as in PyTorch.
    """
    dim, keepdim = _numpy_names(dim, keepdim, axis, keepdims)
    if not np.issubdtype(input.dtype, np.inexact):
        raise RuntimeError(
            "mean(): could not infer output dtype. Input dtype must be either a floating point "
            f"or complex dtype. Got: {dtype_name(input.dtype)}"
        )
    xp = input.device.xp
    dims = _reduced_dims(dim, input.ndim)
    count = 1
    for d in dims:
        count *= input.shape[d]
    with np.errstate(invalid="ignore"):
        # sum / count rather than ndarray.mean: an empty mean is NaN, without NumPy's warning.
        data = xp.asarray(input.data.sum(axis=dims, keepdims=keepdim) / count, input.dtype)
    if dim is None:
        node0 = make_node(MeanBackward0, input)
        if node0 is not None:
            node0.self_sym_sizes = input.shape
            node0.self_numel = count
        return wrap(data, input.device, node0)
    node1 = make_node(MeanBackward1, input)
    if node1 is not None:
        node1.self_sym_sizes = input.shape
        node1.dim = dims
        node1.keepdim = keepdim
        node1.count = count
    return wrap(data, input.device, node1)


# -- norm ------------------------------------------------------------------------
class LinalgVectorNormBackward0(Node):
    """Backward of a vector ``p``-norm (PyTorch's ``linalg_vector_norm_backward``)."""

    __slots__ = ("dim", "keepdim", "ord")
    dim: tuple[int, ...]
    keepdim: bool
    ord: float

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        x, norm = self.saved_tensors()
        g = _unsqueeze_reduced(grads[0], self.dim, self.keepdim)
        norm = _unsqueeze_reduced(norm, self.dim, self.keepdim)
        p = self.ord
        xp = x.device.xp
        sign = make_tensor(xp.sign(x.data), x.device)  # piecewise constant: a constant
        if p == 0:
            return (None,)  # PyTorch gives no gradient: x.grad stays None
        if p == 1:
            return (sign * g,)
        if p in (math.inf, -math.inf):
            # Shared evenly among the elements that reach the norm (or are NaN).
            reached = xp.logical_or(xp.abs(x.data) == norm.data, xp.isnan(x.data))
            count = reached.sum(axis=self.dim, keepdims=True)
            return (sign * (g * make_tensor((reached / count).astype(x.data.dtype), x.device)),)
        zero = make_tensor(xp.broadcast_to(norm.data == 0, x.shape), x.device)
        with np.errstate(divide="ignore", invalid="ignore"):  # a zero norm: masked below
            scale = g / norm if p == 2 else x.abs() ** (p - 2) * (g / norm ** (p - 1))
            return (where(zero, 0.0, x * scale),)


def norm(
    input: Tensor,
    p: float | str | None = "fro",
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
) -> Tensor:
    """The vector ``p``-norm of all elements, or over ``dim``: ``sum(|x| ** p) ** (1 / p)``.

    ``p`` may be any number, ``inf`` or ``-inf`` (the largest or smallest ``|x|``), ``0``
    (the number of non-zero elements) or ``"fro"`` (2). Recorded as PyTorch records it,
    ``LinalgVectorNormBackward0``; the gradient at a zero norm is 0, as in PyTorch.

    Raises:
        RuntimeError: for integer tensors, or a matrix norm (``"nuc"``) that is not supported.
    """
    if p is None or p == "fro":
        p = 2.0
    if isinstance(p, str):
        raise RuntimeError(f"linalg.matrix_norm: Order {p} not supported.")
    if not np.issubdtype(input.data.dtype, np.inexact):
        raise RuntimeError(
            "linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
            f"{dtype_name(input.data.dtype)}"
        )
    xp = input.device.xp
    dims = _dims(dim, input.ndim)
    magnitude = xp.abs(input.data)
    if p == math.inf:
        data = magnitude.max(axis=dims, keepdims=keepdim)
    elif p == -math.inf:
        data = magnitude.min(axis=dims, keepdims=keepdim)
    elif p == 0:
        data = (magnitude != 0).sum(axis=dims, keepdims=keepdim).astype(input.data.dtype)
    else:
        data = (magnitude**p).sum(axis=dims, keepdims=keepdim) ** (1 / p)
    node = make_node(LinalgVectorNormBackward0, input)
    out = wrap(xp.asarray(data, dtype=input.data.dtype), input.device, node)
    if node is not None:
        node.ord, node.dim, node.keepdim = float(p), dims, keepdim
        node.save(save(input), save_output(out))
    return out


# -- max and min -----------------------------------------------------------------
class ValuesIndices(NamedTuple):
    """What ``max(dim)``, ``min(dim)``, ``sort`` and ``topk`` return (``torch.return_types``)."""

    values: Tensor
    """The extreme values (differentiable)."""
    indices: Tensor
    """Where they were found (or came from) along ``dim`` (``int64``, never requires grad)."""


def _share_evenly(
    g: Tensor, x: Tensor, result: Tensor, dims: tuple[int, ...], keepdim: bool, *, nan_ties: bool
) -> Tensor:
    """Gradient of an extremum over ``dims``: split evenly among the elements that attain it.

    The split weights are piecewise constant, so they enter the graph as a constant and only
    ``g`` is differentiated again under ``create_graph``. With ``nan_ties`` a NaN result is
    attained by the NaN elements (PyTorch's full ``max()``); without it the gradient is NaN
    (PyTorch's ``amax``).
    """
    xp = x.device.xp
    r = _unsqueeze_reduced(result.detach(), dims, keepdim).data
    hit = x.data == r
    if nan_ties:
        hit |= xp.isnan(x.data) & xp.isnan(r)
    with np.errstate(invalid="ignore", divide="ignore"):
        weights = hit / hit.sum(axis=dims, keepdims=True)
    return _unsqueeze_reduced(g, dims, keepdim) * wrap(weights.astype(g.dtype), g.device)


def _check_nonempty(name: str, input: Tensor, dims: tuple[int, ...]) -> None:
    """PyTorch's error for an extremum over an empty dim (it has no identity element)."""
    for d in dims:
        if input.shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


class AmaxBackward0(Node):
    __slots__ = ("dim", "keepdim")
    dim: tuple[int, ...]
    keepdim: bool

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        x, result = self.saved_tensors()
        return (_share_evenly(grads[0], x, result, self.dim, self.keepdim, nan_ties=False),)


class AminBackward0(AmaxBackward0):
    __slots__ = ()


def _amax_amin(
    input: Tensor,
    dim: int | Sequence[int] | None,
    keepdim: bool,
    name: str,
    node_cls: type[AmaxBackward0],
) -> Tensor:
    dims = _reduced_dims(dim, input.ndim)
    _check_nonempty(name, input, dims)
    reduce = input.data.max if name == "amax" else input.data.min
    data = input.device.xp.asarray(reduce(axis=dims, keepdims=keepdim))
    node = make_node(node_cls, input)
    out = wrap(data, input.device, node)
    if node is not None:
        node.dim = dims
        node.keepdim = keepdim
        node.save(save(input), save_output(out))
    return out


def amax(
    input: Tensor,
    dim: int | Sequence[int] | None = (),
    keepdim: bool = False,
    *,
    axis: int | Sequence[int] | None = None,
    keepdims: bool | None = None,
) -> Tensor:
    """Largest element over ``dim`` (every dim when ``()`` or ``None``).

    Ties share the gradient evenly, as in PyTorch.

    Raises:
        IndexError: when a reduced dim is empty or out of range.
    """
    dim, keepdim = _numpy_names(dim, keepdim, axis, keepdims)
    return _amax_amin(input, dim, keepdim, "amax", AmaxBackward0)


def amin(
    input: Tensor,
    dim: int | Sequence[int] | None = (),
    keepdim: bool = False,
    *,
    axis: int | Sequence[int] | None = None,
    keepdims: bool | None = None,
) -> Tensor:
    """Smallest element over ``dim`` (every dim when ``()`` or ``None``).

    Ties share the gradient evenly, as in PyTorch.

    Raises:
        IndexError: when a reduced dim is empty or out of range.
    """
    dim, keepdim = _numpy_names(dim, keepdim, axis, keepdims)
    return _amax_amin(input, dim, keepdim, "amin", AminBackward0)


class MaxBackward1(Node):
    """Backward of a full ``max()``: ties (NaNs included) share the gradient evenly."""

    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        x, result = self.saved_tensors()
        dims = tuple(range(x.ndim))
        return (_share_evenly(grads[0], x, result, dims, keepdim=False, nan_ties=True),)


class MinBackward1(MaxBackward1):
    """Backward of a full ``min()``: ties (NaNs included) share the gradient evenly."""

    __slots__ = ()


class MaxBackward0(Node):
    """Backward of ``max(dim)``: the gradient goes to the element whose index was returned."""

    __slots__ = ("dim", "keepdim", "self_sym_sizes")
    dim: int
    keepdim: bool
    self_sym_sizes: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (indices,) = self.saved_tensors()
        size = self.self_sym_sizes
        if not size:
            return (grads[0],)
        g = _unsqueeze_reduced(grads[0], (self.dim,), self.keepdim)
        idx = _unsqueeze_reduced(indices, (self.dim,), self.keepdim).data
        positions = [1] * len(size)
        positions[self.dim] = size[self.dim]
        # One-hot along dim: a constant mask, so only g is differentiated again.
        chosen = indices.device.xp.arange(size[self.dim]).reshape(positions) == idx
        return (where(wrap(chosen, g.device), g, 0.0),)


class MinBackward0(MaxBackward0):
    """Backward of ``min(dim)``: the gradient goes to the element whose index was returned."""

    __slots__ = ()


def _extremum(input: Tensor, dim: Any, keepdim: bool, name: str) -> Tensor | ValuesIndices:
    xp = input.device.xp
    largest = name == "max"
    if isinstance(dim, Tensor):
        return maximum(input, dim) if largest else minimum(input, dim)
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError(
                f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                "Specify the reduction dim with the 'dim' argument."
            )
        data = xp.asarray(input.data.max() if largest else input.data.min())
        node1 = make_node(MaxBackward1 if largest else MinBackward1, input)
        out = wrap(data, input.device, node1)
        if node1 is not None:
            node1.save(save(input), save_output(out))
        return out
    d = normalize_dim(dim, input.ndim)
    # A 0-dim tensor reduces over its single element, as if it had shape (1,).
    array = input.data if input.ndim else input.data.reshape(1)
    if array.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    arg = xp.argmax if largest else xp.argmin
    indices = xp.asarray(arg(array, axis=d), dtype=xp.int64)
    values = xp.take_along_axis(array, xp.expand_dims(indices, d), d)
    if input.ndim == 0:
        values = values.reshape(())
    elif keepdim:
        indices = xp.expand_dims(indices, d)
    else:
        values = xp.squeeze(values, d)
    node0 = make_node(MaxBackward0 if largest else MinBackward0, input)
    indices_t = wrap(indices, input.device)
    if node0 is not None:
        node0.dim = d
        node0.keepdim = keepdim
        node0.self_sym_sizes = input.shape
        node0.save(save(indices_t))
    return ValuesIndices(wrap(xp.asarray(values), input.device, node0), indices_t)


def max(
    input: Tensor,
    dim: int | Tensor | None = None,
    keepdim: bool = False,
    *,
    axis: int | None = None,
    keepdims: bool | None = None,
) -> Tensor | ValuesIndices:
    """The largest element, or ``(values, indices)`` of the largest along ``dim``.

    ``max(input)`` shares the gradient evenly among ties; ``max(input, dim)`` sends it to the
    returned index (the first maximum). ``max(input, other_tensor)`` is :func:`maximum`.

    Raises:
        RuntimeError: full ``max()`` of an empty tensor.
        IndexError: ``dim`` out of range, or empty along ``dim``.
    """
    dim, keepdim = _numpy_names(dim, keepdim, axis, keepdims)
    return _extremum(input, dim, keepdim, "max")


def min(
    input: Tensor,
    dim: int | Tensor | None = None,
    keepdim: bool = False,
    *,
    axis: int | None = None,
    keepdims: bool | None = None,
) -> Tensor | ValuesIndices:
    """The smallest element, or ``(values, indices)`` of the smallest along ``dim``.

    ``min(input)`` shares the gradient evenly among ties; ``min(input, dim)`` sends it to the
    returned index (the first minimum). ``min(input, other_tensor)`` is :func:`minimum`.

    Raises:
        RuntimeError: full ``min()`` of an empty tensor.
        IndexError: ``dim`` out of range, or empty along ``dim``.
    """
    dim, keepdim = _numpy_names(dim, keepdim, axis, keepdims)
    return _extremum(input, dim, keepdim, "min")


def _arg_extremum(input: Tensor, dim: int | None, keepdim: bool, which: str) -> Tensor:
    xp = input.device.xp
    pick = xp.argmax if which == "max" else xp.argmin
    if dim is None:
        return wrap(xp.asarray(pick(input.data.reshape(-1)), dtype=xp.int64), input.device)
    axis = normalize_dim(dim, input.ndim)
    index = pick(input.data, axis=axis)
    if keepdim:
        index = xp.expand_dims(index, axis)
    return wrap(xp.asarray(index, dtype=xp.int64), input.device)


def argmax(
    input: Tensor,
    dim: int | None = None,
    keepdim: bool = False,
    *,
    axis: int | None = None,
    keepdims: bool | None = None,
) -> Tensor:
    """Index of the largest element, flattened or along ``dim`` (not differentiable)."""
    dim, keepdim = _numpy_names(dim, keepdim, axis, keepdims)
    return _arg_extremum(input, dim, keepdim, "max")


def argmin(
    input: Tensor,
    dim: int | None = None,
    keepdim: bool = False,
    *,
    axis: int | None = None,
    keepdims: bool | None = None,
) -> Tensor:
    """Index of the smallest element, flattened or along ``dim`` (not differentiable)."""
    dim, keepdim = _numpy_names(dim, keepdim, axis, keepdims)
    return _arg_extremum(input, dim, keepdim, "min")


TENSOR_METHODS = {
    "argmax": argmax,
    "argmin": argmin,
    "sum": sum,
    "sum_to_size": sum_to_size,
    "mean": mean,
    "norm": norm,
    "amax": amax,
    "amin": amin,
    "max": max,
    "min": min,
}
"""Installed on :class:`engine.Tensor` by ``engine.ops``."""

FUNCTIONS = {
    "argmax": argmax,
    "argmin": argmin,
    "sum": sum,
    "mean": mean,
    "norm": norm,
    "amax": amax,
    "amin": amin,
    "max": max,
    "min": min,
}
"""Exported as ``engine.<name>`` by ``engine.ops``."""
