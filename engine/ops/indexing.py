"""Indexing: ``x[key]``, ``x[key] = value`` and the ops they are made of.

A key is parsed once into an :class:`Index`: a NumPy *basic* index (ints,
slices, ``None``) that gives a view, then an optional *advanced* index
(integer arrays, with masks turned into their ``nonzero()``) applied to that
view. That is PyTorch's order (ints select before arrays index), which differs
from NumPy's when ints and arrays meet in one key.

Reading records PyTorch's chain of nodes: ``SelectBackward0``,
``SliceBackward0``, ``UnsqueezeBackward0`` for the basic part, then
``IndexBackward0``. Every backward scatters into zeros with an op of its own
(``SelectBackwardBackward0``, ``SliceBackwardBackward0``, ``IndexPutBackward0``)
whose backward reads the same index again, so gradients of any order exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.devices import CPU, Device, move_array
from engine.graph import Node
from engine.ops._core import (
    as_tensor_like,
    check_inplace,
    check_same_device,
    make_node,
    needs_grad,
    normalize_dim,
    rebase_history,
    wrap,
    wrap_view,
)
from engine.ops.conversion import CopyBackwards
from engine.ops.shape import unsqueeze
from engine.tensor import Tensor

__all__ = [
    "FUNCTIONS",
    "TENSOR_METHODS",
    "AliasBackward0",
    "Index",
    "IndexBackward0",
    "IndexPutBackward0",
    "SelectBackward0",
    "SelectBackwardBackward0",
    "SliceBackward0",
    "SliceBackwardBackward0",
    "getitem",
    "index_put",
    "narrow",
    "parse_index",
    "read",
    "select",
    "setitem",
]

_FULL = slice(None)

_BAD_INDEX = (
    "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid "
    "indices (got {})"
)


@dataclass(frozen=True, eq=False)
class Index:
    """A parsed key: ``array[basic][advanced]`` selects the indexed region."""

    basic: tuple[Any, ...]
    """NumPy basic index of non-negative ints, normalized slices and ``None``."""
    advanced: tuple[Any, ...] | None = None
    """Full slices and integer arrays, applied to the basic view; ``None`` if absent."""
    keep_full_slices: bool = False
    """Record a node even for ``x[:]`` (PyTorch records one for a lone slice)."""

    def region(self, array: Any) -> Any:
        """The basic view of ``array`` (a view even when every dimension is indexed by an int)."""
        return array[(*self.basic, Ellipsis)]

    def write(self, xp: Any, array: Any, values: Any, accumulate: bool) -> None:
        """Store (or, with ``accumulate``, add, repeated indices adding up) into ``array``.

        Args:
            xp: the array module of ``array`` (NumPy or CuPy).
            array: the array written to.
            values: what is written; broadcast to the indexed region.
            accumulate: add instead of store.

        Raises:
            RuntimeError: when ``values`` does not broadcast to the region.
        """
        values = values.astype(array.dtype, copy=False)
        view = self.region(array)
        try:
            if self.advanced is None:
                if accumulate:
                    view += values
                else:
                    view[...] = values
            elif accumulate:
                xp.add.at(view, self.advanced, values)
            else:
                view[self.advanced] = values
        except ValueError:
            target = view if self.advanced is None else view[self.advanced]
            raise RuntimeError(
                f"shape mismatch: value tensor of shape [{_join(values.shape)}] cannot be "
                f"broadcast to indexing result of shape [{_join(target.shape)}]"
            ) from None


def _join(sizes: Any) -> str:
    return ", ".join(map(str, sizes))


def _check_bounds(positions: Any, size: int, dim: int) -> None:
    bad = positions[(positions >= size) | (positions < -size)]
    if bad.size:
        raise IndexError(
            f"index {int(bad.reshape(-1)[0])} is out of bounds for dimension {dim} with size {size}"
        )


def _as_index_item(item: Any, device: Device) -> Any:
    """An item of a key as ``None``, ``Ellipsis``, an int, a slice, or an array on ``device``.

    Raises:
        RuntimeError: PyTorch's message for an index tensor on another device than ``device``,
            unless the index is on the CPU (it is copied over, as in PyTorch).
    """
    xp = device.xp
    if item is None or item is Ellipsis or isinstance(item, slice):
        return item
    if isinstance(item, bool):
        # PyTorch reads a Python bool as a 0-dim mask: a new dimension of size 1 or 0.
        return xp.asarray(item)
    if isinstance(item, Tensor):
        if item.device is not device and item.device is not CPU:
            raise RuntimeError(
                f"indices should be either on cpu or on the same device as the indexed tensor "
                f"({device})"
            )
        array = item.data if item.device is device else move_array(item.data, CPU, device)
    elif isinstance(item, int | np.integer):
        return int(item)
    elif isinstance(item, list | tuple | np.ndarray) or hasattr(item, "__array__"):
        array = xp.asarray(item)
    else:
        raise IndexError(_BAD_INDEX.format(type(item).__name__))
    if array.dtype == np.uint8:
        array = array.astype(bool)
    if array.dtype != np.bool_ and not np.issubdtype(array.dtype, np.integer):
        if array.size == 0:
            return array.astype(np.int64)
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    if array.ndim == 0 and array.dtype != np.bool_:
        return int(array)
    return array


def parse_index(key: Any, input: Tensor) -> Index:
    """Check ``key`` against ``input``'s shape and parse it (PyTorch's rules and messages).

    Raises:
        IndexError: out-of-range indices, too many indices, bad index types, mask shapes.
        ValueError: a slice step that is not positive.
    """
    xp = input.device.xp
    raw = key if isinstance(key, tuple) else (key,)
    items = [_as_index_item(item, input.device) for item in raw]
    if sum(item is Ellipsis for item in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(
        (item.ndim if item.dtype == np.bool_ else 1) if hasattr(item, "dtype") else 1
        for item in items
        if item is not None and item is not Ellipsis
    )
    shape = input.shape
    if consumed > len(shape):
        if not shape:
            raise IndexError(
                "invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number"
            )
        raise IndexError(f"too many indices for tensor of dimension {len(shape)}")
    basic: list[Any] = []
    arrays: dict[int, Any] = {}
    in_dim = 0  # the input dimension the next item indexes
    for item in items:
        if item is None:
            basic.append(None)
        elif item is Ellipsis:
            basic.extend([_FULL] * (len(shape) - consumed))
            in_dim += len(shape) - consumed
        elif isinstance(item, int):
            _check_bounds(np.asarray(item), shape[in_dim], in_dim)
            basic.append(item % shape[in_dim])
            in_dim += 1
        elif isinstance(item, slice):
            if item.step is not None and item.step <= 0:
                raise ValueError("step must be greater than zero")
            basic.append(slice(*item.indices(shape[in_dim])))
            in_dim += 1
        elif item.dtype == np.bool_:
            covered = shape[in_dim : in_dim + item.ndim]
            if item.shape != covered:
                k = next(i for i in range(item.ndim) if item.shape[i] != covered[i])
                raise IndexError(
                    f"The shape of the mask [{_join(item.shape)}] at index {k} does not match the "
                    f"shape of the indexed tensor [{_join(shape)}] at index {in_dim + k}"
                )
            if item.ndim == 0:
                # A 0-dim mask adds a dimension, kept (size 1) or dropped (size 0).
                basic.append(None)
                arrays[_view_dim(basic)] = xp.zeros(int(item), dtype=np.int64)
            else:
                for positions in xp.nonzero(item):
                    basic.append(_FULL)
                    arrays[_view_dim(basic)] = positions
            in_dim += item.ndim
        else:
            # PyTorch numbers the dimension among the index arrays in its message.
            _check_bounds(item, shape[in_dim], len(arrays))
            basic.append(_FULL)
            arrays[_view_dim(basic)] = item.copy()
            in_dim += 1
    if not arrays:
        return Index(tuple(basic), None, isinstance(key, slice))
    shapes = [a.shape for a in arrays.values()]
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        raise IndexError(
            "shape mismatch: indexing tensors could not be broadcast together with shapes "
            + ", ".join(f"[{_join(s)}]" for s in shapes)
        ) from None
    advanced = tuple(arrays.get(d, _FULL) for d in range(max(arrays) + 1))
    return Index(tuple(basic), advanced)


def _view_dim(basic: list[Any]) -> int:
    """The dimension of the basic view that the last item of ``basic`` produced."""
    return sum(not isinstance(item, int) for item in basic) - 1


def read(input: Tensor, index: Index) -> Tensor:
    """The indexed region, as PyTorch's chain of view ops then ``index``."""
    result = input
    dim = 0
    for item in index.basic:
        if item is None:
            result = unsqueeze(result, dim)
            dim += 1
        elif isinstance(item, int):
            result = select(result, dim, item)
        else:
            size = result.shape[dim]
            if index.keep_full_slices or item.indices(size) != (0, size, 1):
                result = _slice(result, dim, item)
            dim += 1
    if index.advanced is not None:
        result = _index(result, index.advanced)
    return result


# -- the views: select, slice, alias -----------------------------------------------
class _ScatterBackward(Node):
    """Backward of a scatter into zeros at a basic index: read the region back."""

    __slots__ = ("index",)
    index: Index

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (read(grads[0], self.index),)


class SelectBackwardBackward0(_ScatterBackward):
    __slots__ = ()


class SliceBackwardBackward0(_ScatterBackward):
    __slots__ = ()


def _scatter_into_zeros(
    grad: Tensor, sizes: tuple[int, ...], index: Index, node_cls: type[_ScatterBackward]
) -> Tensor:
    """Zeros of ``sizes`` with ``grad`` written at ``index`` (a basic index: no repeats)."""
    out = grad.device.xp.zeros(sizes, dtype=grad.dtype)
    index.write(grad.device.xp, out, grad.data, accumulate=False)
    node = make_node(node_cls, grad)
    if node is not None:
        node.index = index
    return wrap(out, grad.device, node)


class SelectBackward0(Node):
    __slots__ = ("dim", "index", "self_sym_sizes")
    dim: int
    index: int
    self_sym_sizes: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        index = Index((_FULL,) * self.dim + (self.index,))
        return (_scatter_into_zeros(grads[0], self.self_sym_sizes, index, SelectBackwardBackward0),)


def select(input: Tensor, dim: int, index: int) -> Tensor:
    """The view at position ``index`` of dimension ``dim``, which it drops.

    Raises:
        IndexError: when ``index`` is out of range.
    """
    d = normalize_dim(dim, input.ndim)
    if input.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    size = input.shape[d]
    if not -size <= index < size:
        raise IndexError(
            f"select(): index {index} out of range for tensor of size [{_join(input.shape)}] at "
            f"dimension {d}"
        )
    i = index % size
    node = make_node(SelectBackward0, input)
    if node is not None:
        node.self_sym_sizes, node.dim, node.index = input.shape, d, i
    # The trailing Ellipsis makes NumPy return a 0-dim view rather than a scalar copy.
    return wrap_view(input.data[(_FULL,) * d + (i, Ellipsis)], input, node)


class SliceBackward0(Node):
    __slots__ = ("dim", "end", "self_sym_sizes", "start", "step")
    dim: int
    end: int
    self_sym_sizes: tuple[int, ...]
    start: int
    step: int

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        index = Index((_FULL,) * self.dim + (slice(self.start, self.end, self.step),))
        return (_scatter_into_zeros(grads[0], self.self_sym_sizes, index, SliceBackwardBackward0),)


def _slice(input: Tensor, dim: int, where: slice) -> Tensor:
    """The view ``input[..., where]`` at dimension ``dim`` (``where`` has a positive step)."""
    shape = input.data.shape
    start, end, step = where.indices(shape[dim])
    node = make_node(SliceBackward0, input)
    if node is not None:
        node.self_sym_sizes, node.dim = tuple(shape), dim
        node.start, node.end, node.step = start, end, step
    return wrap_view(input.data[(_FULL,) * dim + (slice(start, end, step),)], input, node)


def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    """The view of ``length`` positions of dimension ``dim`` from ``start``.

    Raises:
        IndexError: when ``start`` is out of range.
        RuntimeError: when the range runs past the end of the dimension.
    """
    shape = input.data.shape
    d = normalize_dim(dim, len(shape))
    size = shape[d]
    if not -size <= start <= size:
        raise IndexError(
            f"start out of range (expected to be in range of [{-size}, {size}], but got {start})"
        )
    if start < 0:
        start += size
    if start + length > size or length < 0:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return _slice(input, d, slice(start, start + length, 1))


class AliasBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (grads[0],)


def _alias(input: Tensor) -> Tensor:
    return wrap_view(input.data, input, make_node(AliasBackward0, input))


# -- gather and scatter-add: index and index_put --------------------------------------
class IndexBackward0(Node):
    __slots__ = ("indices", "self_sym_sizes")
    indices: tuple[Any, ...]
    self_sym_sizes: tuple[int, ...]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        zeros = Tensor._make(g.device.xp.zeros(self.self_sym_sizes, dtype=g.dtype), g.device)
        return (_index_put(zeros, Index((), self.indices), g, accumulate=True),)


def _index(input: Tensor, indices: tuple[Any, ...]) -> Tensor:
    """``input[indices]`` for an advanced index (a copy)."""
    node = make_node(IndexBackward0, input)
    if node is not None:
        node.self_sym_sizes, node.indices = input.shape, indices
    return wrap(input.data[indices], input.device, node)


class IndexPutBackward0(Node):
    __slots__ = ("accumulate", "index")
    accumulate: bool
    index: Index

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        grad_input = grad_values = None
        if self.should_compute_output(0):
            # Overwritten positions did not reach the output; added-to ones did.
            grad_input = g if self.accumulate else _index_put(g, self.index, 0, False)
        if self.should_compute_output(1):
            # The engine sums this down to the values' shape when they were broadcast.
            grad_values = read(g, self.index)
        return (grad_input, grad_values)


def _index_put(
    input: Tensor,
    index: Index,
    values: Any,
    accumulate: bool,
    node_cls: type[IndexPutBackward0] = IndexPutBackward0,
) -> Tensor:
    values_t = _values_on(input, values)
    out = input.data.copy()
    index.write(input.device.xp, out, values_t.data, accumulate)
    node = make_node(node_cls, input, values_t)
    if node is not None:
        node.index, node.accumulate = index, accumulate
    return wrap(out, input.device, node)


def _values_on(input: Tensor, values: Any) -> Tensor:
    """``values`` as a tensor on ``input``'s device; a 0-dim CPU tensor is moved (recorded).

    Raises:
        RuntimeError: PyTorch's message for values with dimensions on another device.
    """
    values_t = as_tensor_like(values, input)
    if values_t.device is not input.device:
        check_same_device(input, values_t)
        values_t = values_t.to(input.device)
    return values_t


def index_put(input: Tensor, indices: Any, values: Any, accumulate: bool = False) -> Tensor:
    """A copy of ``input`` with ``values`` stored (or added) at ``input[indices]``.

    With ``accumulate``, repeated indices add up (``numpy.add.at`` semantics).
    """
    return _index_put(input, parse_index(indices, input), values, accumulate)


# -- the Python protocol ----------------------------------------------------------------
def getitem(input: Tensor, key: Any) -> Tensor:
    """``input[key]``: ints, slices, ``None``, ``...``, integer arrays and boolean masks.

    Without arrays or masks the result is a view sharing ``input``'s version counter.
    """
    result = read(input, parse_index(key, input))
    return _alias(input) if result is input else result


def setitem(input: Tensor, key: Any, value: Any) -> None:
    """``input[key] = value``, in place; recorded when ``input`` or ``value`` requires grad.

    Raises:
        RuntimeError: for in-place changes autograd cannot follow (see ``check_inplace``),
            or a value that does not broadcast to the indexed region.
    """
    index = parse_index(key, input)
    value_t = value if isinstance(value, Tensor) else None
    check_inplace(input, value_t)
    if not needs_grad(input, value_t):
        values = _values_on(input, value).data
        if values.ndim and values.shape[0] == 1:
            # PyTorch drops leading size-1 dimensions of the value before broadcasting it.
            values = values.reshape(_without_leading_ones(values.shape))
        index.write(input.device.xp, input.data, values, accumulate=False)
        input._bump_version()
        return
    if index.advanced is not None:
        if value_t is not None and value_t.ndim and value_t.shape[0] == 1:
            value = value_t.reshape(_without_leading_ones(value_t.shape))
        rebase_history(input, _index_put(input, index, value, False))
        return
    region = index.region(input.data)
    if region.shape == input.data.shape and region.strides == input.data.strides:
        target = input  # every element: PyTorch copies into input itself, not into a view
    else:
        target = wrap_view(region, input)
        if input._base is not None:
            from engine.ops.inplace_views import track_view

            track_view(input)  # it sees the write too
    number = not isinstance(value, Tensor)
    rebase_history(target, _copy_to(target, _values_on(input, value), number), target is input)


def _without_leading_ones(shape: tuple[int, ...]) -> tuple[int, ...]:
    lead = next((i for i, s in enumerate(shape) if s != 1), len(shape))
    return shape[lead:]


def _copy_to(dst: Tensor, src: Tensor, number: bool) -> Tensor:
    """``dst.copy_(src)`` out of place, recorded as PyTorch's ``copy_to`` records it.

    A 0-dim CPU value or a ``number`` fills (``FillBackward3``); any other is viewed
    without its leading 1s and expanded to ``dst``'s shape (``ViewBackward0``,
    ``ExpandBackward0``) unless the shapes already agree, then copied (``CopyBackwards``).
    """
    from engine.ops.pointwise import FillBackward3

    node: Node | None
    if src.data.shape == dst.data.shape:
        node = make_node(CopyBackwards, dst, src)
    elif src.ndim == 0 and (number or src.device is CPU):
        node = make_node(FillBackward3, dst, src)
    else:
        src = src.view(_without_leading_ones(src.data.shape))
        if src.data.shape != dst.data.shape:
            try:
                src = src.expand(dst.data.shape)
            except RuntimeError:
                raise RuntimeError(
                    f"shape mismatch: value tensor of shape [{_join(src.data.shape)}] cannot be "
                    f"broadcast to indexing result of shape [{_join(dst.data.shape)}]"
                ) from None
        node = make_node(CopyBackwards, dst, src)
    xp = dst.device.xp
    data = xp.empty_like(dst.data)
    data[...] = src.data.astype(dst.data.dtype, copy=False)
    return wrap(data, dst.device, node)


TENSOR_METHODS = {
    "__getitem__": getitem,
    "__setitem__": setitem,
    "select": select,
    "narrow": narrow,
    "index_put": index_put,
}
"""Installed on :class:`engine.Tensor` by ``engine.ops``."""

FUNCTIONS = {"select": select, "narrow": narrow, "index_put": index_put}
"""Exported as ``engine.<name>`` by ``engine.ops``."""
