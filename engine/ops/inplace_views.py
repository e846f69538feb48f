"""In-place changes through views: the base's ``CopySlices``, and views made anew.

A view shares its base's memory, so an in-place op on the view changes the base,
whose history becomes a ``CopySlices`` around the op's node; every view of the base
that has a history then takes a fresh one (``AsStridedBackward0``), as PyTorch's
views do (Note [In-place on views]).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from engine import _context, grad_mode
from engine.graph import Node, next_sequence_nr, shared_metadata
from engine.ops._core import _edge
from engine.ops.indexing import Index, _index_put, parse_index, read
from engine.saved import ERR_BACKWARD_TWICE
from engine.tensor import Tensor

__all__ = [
    "AsStridedBackward0",
    "CopySlices",
    "copy_slices",
    "positions_in",
    "rebase_view",
    "regenerate_view",
    "regenerate_views",
    "track_view",
]


# Note [In-place on views]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# Writing into a view writes into its base, so the base's history must
# change: as in PyTorch, the base's new history is a CopySlices that holds the
# in-place op's node and applies it to the view's part of the gradient. The
# view's elements are found from memory offsets (the view and its base share
# memory), which covers every view op at once. Whenever a base takes a new
# history (written directly or through a view), every view of it that has a
# history (the base keeps them weakly) takes a fresh one from the new base, an
# AsStridedBackward0, as PyTorch regenerates stale views: their gradients must
# flow through what the base became.


def rebase_view(view: Tensor, base: Tensor, result: Tensor, keep_view: bool) -> Tensor:
    """``rebase_history`` of a view: write ``result`` through it and rebase its ``base``.

    ``keep_view=False`` says nobody else holds the view (an assignment's temporary one),
    so it need not take a new history too.
    """
    from engine.ops.conversion import CopyBackwards

    if keep_view:
        track_view(view)
    positions = positions_in(view.data, base.data)
    view.data[...] = result.data
    view._bump_version()  # the base's counter: a view shares it
    fn = result.grad_fn
    if fn is None and grad_mode._state.enabled:
        # Nothing of the view needed a gradient, but the base's history does: the view's
        # elements were overwritten, which a copy of nothing says (no gradient to them).
        fn = CopyBackwards()
        fn.set_next_edges((None, None))
    if fn is not None:
        copy_slices(base, positions, fn)
        if keep_view and isinstance(view.grad_fn, AsStridedBackward0):
            view.grad_fn.number()  # PyTorch reads the written view's grad_fn at once
    return view


def track_view(view: Tensor) -> None:
    """Have ``view``'s base regenerate it when the base takes a new history."""
    if view.grad_fn is None:  # a view with a history is tracked from its birth (wrap_view)
        base = view._base
        assert base is not None
        if base._views is None:
            base._views = weakref.WeakSet()
        base._views.add(view)


def regenerate_views(base: Tensor) -> None:
    """Every tracked view of ``base`` takes a fresh history from ``base``'s current one."""
    with grad_mode.enable_grad():
        for view in list(base._views or ()):
            regenerate_view(view, base)


def _address(array: Any) -> int:
    interface = getattr(array, "__array_interface__", None)
    return int(interface["data"][0]) if interface is not None else int(array.data.ptr)


def positions_in(view: Any, base: Any) -> tuple[Any, ...]:
    """For each element of ``view``, its index in ``base`` (they share memory)."""
    base_offsets = sum(
        (i * s for i, s in zip(np.indices(base.shape), base.strides, strict=True)),
        np.zeros(base.shape, dtype=np.int64),
    ).ravel()
    start = _address(view) - _address(base)
    view_offsets = start + sum(
        (i * s for i, s in zip(np.indices(view.shape), view.strides, strict=True)),
        np.zeros(view.shape, dtype=np.int64),
    )
    order = np.argsort(base_offsets, kind="stable")
    found = np.searchsorted(base_offsets[order], view_offsets.ravel())
    flat = order[np.minimum(found, order.size - 1)]
    if not np.array_equal(base_offsets[flat], view_offsets.ravel()):
        raise RuntimeError("internal error: a view does not lie inside its base's memory")
    return tuple(np.unravel_index(flat.reshape(view.shape), base.shape))


class CopySlices(Node):
    """The history of a base after an in-place op on one of its views (PyTorch's node).

    ``fn`` is the in-place op's own node (``MulBackward0`` for ``view.mul_(w)``,
    ``CopyBackwards`` for an assignment): it is kept inside, not in the graph. The edges are
    the base's old history, then ``fn``'s edges after its first (PyTorch's
    ``[MulBackward0, AccumulateGrad]``). Backward passes the gradient through unchanged
    except at the view's elements, which go through ``fn``.

    Note [CopySlices runs fn]
    ~~~~~~~~~~~~~~~~~~~~~~~~~
    ``fn``'s first edge still points at the view's old history (a ``SelectBackward0``
    of the old base): a saved output of ``fn`` unpacks with ``fn`` as its history, and
    a second derivative must flow from there through the view. But that node is in no
    graph task's ``exec_info``, so before running ``fn`` this node puts it there when
    its own first output is needed (and takes it out when not), as PyTorch does; then
    ``fn.should_compute_output(0)`` answers for the base.
    """

    __slots__ = ("fn", "index")
    fn: Node | None
    index: Index

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        fn = self.fn
        if fn is None:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        task = _context.TLS.graph_task
        if task is not None and task.exec_info:
            _expose_view_history(task.exec_info, fn, self.should_compute_output(0))
        g = grads[0]
        res = fn.apply([read(g, self.index)])
        grad_base = None
        if self.should_compute_output(0):
            # None when the view had no history (an assignment's temporary view): the
            # overwritten elements then took nothing from the old base.
            grad_base = _index_put(g, self.index, 0.0 if res[0] is None else res[0], False)
        return (grad_base, *res[1:])

    def release_variables(self) -> None:
        fn, self.fn = self.fn, None  # a second backward raises, as in PyTorch
        if fn is not None:
            fn.release_variables()

    def name(self) -> str:
        return "CopySlices"


def _expose_view_history(exec_info: dict[Node, Any], fn: Node, needed: bool) -> None:
    """Note [CopySlices runs fn]: ``fn``'s first edge in ``exec_info`` iff it is ``needed``."""
    from engine.scheduler import ExecInfo

    edge = fn._next_edges[0] if fn._next_edges else None
    if edge is None:
        return
    if edge.function not in exec_info:
        if needed:
            info = exec_info[edge.function] = ExecInfo()
            info.needed = True
    elif not needed:
        del exec_info[edge.function]


def copy_slices(base: Tensor, positions: tuple[Any, ...], fn: Node) -> None:
    """Give ``base`` (a view's base, already written to) the history ``CopySlices(fn)``.

    ``positions`` index the view's elements in ``base``; every view of ``base`` with a
    history then takes a fresh one from it (Note [In-place on views] in ``_core``).
    """
    node = CopySlices()
    node.set_next_edges((_edge(base), *fn._next_edges[1:]))
    node.fn = fn
    node.index = parse_index(positions, base)
    node._input_metadata = shared_metadata(base.data.shape, base.data.dtype, base.device)
    base.grad_fn = node
    base._output_nr = 0
    base._requires_grad = True
    if base._views:
        regenerate_views(base)


_SEQUENCE_NR: Any = Node.__dict__["sequence_nr"]  # the slots' own descriptors
_TOPOLOGICAL_NR: Any = Node.__dict__["topological_nr"]


class AsStridedBackward0(Node):
    """A view regenerated from its base after the base changed in place.

    PyTorch regenerates such views as ``as_strided`` of the new base; here the
    view's elements are found by memory offset (Note [In-place on views]) and
    the gradient lands on them in a zero tensor of the base's shape.

    Note [Views numbered when read]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    PyTorch makes a stale view's new node the next time the view's ``grad_fn`` is
    read: mostly by the op that uses the view, once that op's own node has its
    sequence number, so the view's node numbers after it. We make the node when the
    base changes (the graph is right at once, and no op pays a check), but give it
    its number the first time one of its numbers is read, which for a view an op
    uses is when the op links to it (``make_node`` reads ``topological_nr``). The
    view an in-place op wrote through is numbered at once, as PyTorch reads its
    ``grad_fn`` at once. A view regenerated again before any use never takes one.
    """

    __slots__ = ("_unnumbered", "index", "self_sym_sizes")
    index: Index
    self_sym_sizes: tuple[int, ...]
    _unnumbered: bool

    @property
    def sequence_nr(self) -> int:
        if self._unnumbered:
            self.number()
        return int(_SEQUENCE_NR.__get__(self, AsStridedBackward0))

    @sequence_nr.setter
    def sequence_nr(self, value: int) -> None:
        _SEQUENCE_NR.__set__(self, value)
        self._unnumbered = False

    @property
    def topological_nr(self) -> int:
        if self._unnumbered:
            self.number()
        return int(_TOPOLOGICAL_NR.__get__(self, AsStridedBackward0))

    @topological_nr.setter
    def topological_nr(self, value: int) -> None:
        _TOPOLOGICAL_NR.__set__(self, value)

    def number(self) -> None:
        """Take this thread's next sequence number now (Note [Views numbered when read])."""
        if self._unnumbered:
            self._unnumbered = False
            _SEQUENCE_NR.__set__(self, next_sequence_nr())

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        zeros = Tensor._make(g.device.xp.zeros(self.self_sym_sizes, dtype=g.dtype), g.device)
        return (_index_put(zeros, self.index, g, True),)


def regenerate_view(view: Tensor, base: Tensor) -> None:
    """Give ``view`` a fresh history from ``base``'s current one (an ``AsStridedBackward0``).

    The node is numbered when first read (Note [Views numbered when read]).
    """
    if not (grad_mode._state.enabled and base._requires_grad):
        return
    node = AsStridedBackward0(sequence_nr=0)
    node._unnumbered = True
    node.set_next_edges((_edge(base),))
    node.index = parse_index(positions_in(view.data, base.data), base)
    node.self_sym_sizes = base.data.shape
    node._input_metadata = shared_metadata(view.data.shape, view.data.dtype, view.device)
    view.grad_fn = node
    view._output_nr = 0
    view._requires_grad = True
