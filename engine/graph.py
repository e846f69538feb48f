"""The backward graph: Node, Edge, GraphRoot, AccumulateGrad, numbering and hooks.

A node is the backward of one forward operation. Its ``next_edges[i]`` points
at the node that receives the gradient of the operation's i-th input (``None``
where that input does not require grad). ``apply(grads)`` takes one gradient
per forward output and returns one per forward input.

Numbering, as in PyTorch:

* ``sequence_nr`` comes from a per-thread counter at creation, so on one
  thread later nodes have larger numbers and the ready queue runs them first.
  ``AccumulateGrad`` has the largest possible number (2**64 - 1) so that leaf
  gradients are written as soon as they are ready.
* ``topological_nr`` is the length of the longest path from the node to a
  leaf; ``AccumulateGrad`` is 0. If ``topo(x) < topo(y)`` there is no path
  from ``x`` to ``y``, which lets the engine prune whole branches.
"""

from __future__ import annotations

import itertools
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeAlias

import numpy as np

from engine import _context, anomaly, grad_mode
from engine.events import HUB, LazySummary
from engine.scheduler import ONE_AND_A_NUMBER, UINT64_MAX, Edge, EdgesInSlots, store_edges

if TYPE_CHECKING:
    from engine.devices import Device
    from engine.saved import SavedTensor
    from engine.tensor import Tensor

__all__ = [
    "UINT64_MAX",
    "AccumulateGrad",
    "Edge",
    "EdgeLike",
    "GraphRoot",
    "InputMetadata",
    "Node",
    "NodeHooks",
    "RemovableHandle",
    "add_hook",
    "edge_to",
    "new_hook_dict",
    "new_node_id",
    "next_sequence_nr",
    "restart_sequence_nr",
    "shared_metadata",
    "store_edges",
]


_node_ids = itertools.count(1)


def new_node_id() -> int:
    """An id no other node of this process has, ours or a watched engine's.

    Events name nodes by id; a source that watches another engine (the
    PyTorch bridge) numbers its nodes from here so that they never share one
    with ours.
    """
    return next(_node_ids)


_sequence = threading.local()
"""``_sequence.next()`` numbers this thread's next node; set by :func:`next_sequence_nr` on a
thread's first node. A plain ``threading.local``: a subclass's attributes cost twice as much
to read, and every op reads this one."""


def next_sequence_nr() -> int:
    """This thread's next sequence number (the hot paths read ``_sequence.next`` first)."""
    try:
        return _sequence.next()
    except AttributeError:
        _sequence.next = itertools.count().__next__
        return _sequence.next()


def restart_sequence_nr(start: int) -> int:
    """Number this thread's next node ``start``; returns the number it would have had."""
    nr = next_sequence_nr()
    _sequence.next = itertools.count(start).__next__
    return nr


EdgeLike: TypeAlias = "Edge | Node"
"""An edge as nodes keep it: an Edge, or a node for its own input 0
(Note [A node is its own first edge])."""


def edge_to(function: Node, input_nr: int) -> EdgeLike:
    """The edge to input ``input_nr`` of ``function``, as nodes keep it."""
    return function if input_nr == 0 else Edge(function, input_nr)


def _as_edge(edge: EdgeLike | None) -> Edge | None:
    if edge is None or type(edge) is Edge:
        return edge
    return Edge(edge.function, 0)


class InputMetadata(NamedTuple):
    """What a node expects for one of its inputs (one forward output)."""

    shape: tuple[int, ...]
    """Expected gradient shape."""
    dtype: Any
    """Expected gradient dtype."""
    device: Any
    """Expected gradient device."""


_SHARED_METADATA: dict[tuple[Any, Any, str], tuple[InputMetadata]] = {}


def shared_metadata(shape: tuple[int, ...], dtype: Any, device: Device) -> tuple[InputMetadata]:
    """``(InputMetadata(shape, dtype, device),)``, one object for all nodes that expect it.

    Note [Shared input metadata]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    Most nodes take one gradient, and a graph has few distinct
    ``(shape, dtype, device)`` triples. A node's ``_input_metadata`` is an
    immutable tuple, so the one-slot tuples can be shared: a node costs two
    objects fewer (its own list and named tuple), which is ~150 bytes, and
    two objects fewer for the cyclic collector to scan while a graph is
    built. The table is cleared when it grows past 4096 entries.
    """
    key = (shape, dtype, device._str)  # Device's __hash__ is Python's; its name's is not
    single = _SHARED_METADATA.get(key)
    if single is None:
        # Plain tuple and NumPy dtype (not a Size, not an engine.dtype): the plain path compares
        # gradients' ``data.shape`` and ``data.dtype`` with them at C speed.
        shape, dtype = tuple(shape), np.dtype(dtype)
        key = (shape, dtype, device._str)
        single = (InputMetadata(shape, dtype, device),)
        if len(_SHARED_METADATA) >= 4096:
            _SHARED_METADATA.clear()
        _SHARED_METADATA[key] = single
    return single


class RemovableHandle:
    """Returned by ``register_hook``; ``remove()`` takes the hook away again."""

    __slots__ = ("_hooks_ref", "id")

    _ids = itertools.count()

    def __init__(self, hooks: dict[int, Any]) -> None:
        self._hooks_ref = weakref.ref(hooks) if _weakrefable(hooks) else (lambda: hooks)
        self.id = next(RemovableHandle._ids)

    def remove(self) -> None:
        """Remove the hook (removing twice is harmless)."""
        hooks = self._hooks_ref()
        if hooks is not None:
            hooks.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


class _HookDict(dict[int, Any]):
    """A dict of hooks by handle id; a subclass so handles can refer to it weakly."""

    __slots__ = ("__weakref__",)


def _weakrefable(obj: object) -> bool:
    return isinstance(obj, _HookDict)


def new_hook_dict() -> dict[int, Any]:
    """An ordered container of hooks that removable handles point into."""
    return _HookDict()


def add_hook(hooks: dict[int, Any], fn: Callable[..., Any]) -> RemovableHandle:
    """Append ``fn`` to ``hooks``, returning the handle that removes it."""
    if not callable(fn):
        raise TypeError(f"hook must be callable, got {type(fn).__name__}")
    handle = RemovableHandle(hooks)
    hooks[handle.id] = fn
    return handle


class NodeHooks:
    """The hooks of one node, made with its first (Note [A node's hooks in one slot])."""

    __slots__ = ("post", "pre", "retains_grad", "tensor_pre")

    def __init__(self) -> None:
        self.pre: dict[int, Any] | None = None
        """``register_prehook``'s, by handle id."""
        self.post: dict[int, Any] | None = None
        """``register_hook``'s, by handle id."""
        self.tensor_pre: dict[int, dict[int, Any]] | None = None
        """``Tensor.register_hook``'s on each output, by output number, then handle id."""
        self.retains_grad: dict[int, Any] | None = None
        """``retain_grad``'s tensors (weakly) by output number."""


def _hooks_of(node: Node) -> NodeHooks:
    hooks = node._hooks
    if hooks is None:
        hooks = node._hooks = NodeHooks()
    return hooks


class Node(EdgesInSlots):
    """A function of the backward graph.

    Subclasses implement :meth:`apply`. The forward code that creates a node
    connects it with :meth:`set_next_edges` (which also fixes its
    topological number) and records what each gradient must look like with
    :meth:`add_input_metadata`.

    Note [Single entry]
    ~~~~~~~~~~~~~~~~~~~
    A node's ``apply`` is never entered concurrently by one graph task: the
    engine runs a node once, when its dependency count reaches zero. Several
    graph tasks (several threads calling backward) can reach the same
    ``AccumulateGrad``, which is why it alone takes a lock.
    """

    __slots__ = (
        "__weakref__",
        "_hooks",
        "_id",
        "_input_metadata",
        "_metadata",
        "_saved",
        "sequence_nr",
        "topological_nr",
    )

    releases_more = False
    """Whether :meth:`release_variables` frees more than ``_saved`` (set for subclasses that
    override it), so the engine must call it even when ``_saved`` is empty."""

    hooks_on_variable = False
    """Whether the node keeps tensor hooks outside ``_tensor_pre_hooks`` (``AccumulateGrad``
    keeps them on its leaf), so :meth:`has_tensor_hooks` must be asked."""

    skips_undefined_grads = True
    """When every incoming gradient is ``None``, the engine returns ``None`` for all
    outputs without calling ``apply`` (PyTorch's ``any_grad_defined`` check)."""

    bare_init = True
    """Whether the class keeps :meth:`Node.__init__` (set for subclasses), so that
    ``make_node`` may create it field by field (Note [Bare nodes])."""

    keeps_metadata = False
    """Whether every gradient :meth:`apply` returns is a tensor of the shape and dtype of the
    one it received (the class has one input), so that an edge expecting this node's own
    output metadata needs no shape or dtype check (Note [Gradients that keep their
    metadata] in engine.validation). A class that sets it is checked by
    tests/engine/test_keeps_metadata.py."""

    # Note [Bare nodes]
    # ~~~~~~~~~~~~~~~~~
    # Every forward op makes a node, so ``engine.ops._core.make_node`` does
    # not call the class: for classes that keep Node.__init__ it allocates
    # the object and sets the fields __init__ would set, itself, and so does
    # ``scalar_op`` next to it (Note [Scalar ops in one call]). A field added
    # to __init__ must be added in both; tests compare the three.

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.releases_more = cls.release_variables is not Node.release_variables
        cls.bare_init = cls.__init__ is Node.__init__

    def __init__(self, sequence_nr: int | None = None) -> None:
        self._num_edges = 0  # Note [Edges in the node's own slots] in engine.scheduler
        self.sequence_nr: int = next_sequence_nr() if sequence_nr is None else sequence_nr
        self.topological_nr: int = 0
        self._id: int = next(_node_ids)
        self._metadata: dict[str, Any] | None = None
        self._hooks: NodeHooks | None = None  # Note [A node's hooks in one slot]
        self._input_metadata: tuple[InputMetadata, ...] = ()
        self._saved: tuple[SavedTensor, ...] = ()
        if anomaly.STATE.node_metadata:
            self._metadata = anomaly.new_metadata()

    # -- identity --------------------------------------------------------
    def name(self) -> str:
        """The node's name, PyTorch's where PyTorch has one (``MulBackward0``)."""
        return type(self).__name__

    @property
    def node_id(self) -> int:
        """A stable id, unique in this process for the node's lifetime."""
        return self._id

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"

    # -- edges -----------------------------------------------------------
    # Note [A node is its own first edge]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # Python's cyclic collector walks every live object that can hold
    # references, and a long graph is mostly nodes and their edges: with an
    # Edge object per edge, a chain had three such objects per node (the
    # node, its edges tuple, the Edge), and with the collector on, building
    # one spent half its time in collections. Most edges go to input 0 of a
    # node (every op with one output), so a node stands for that edge itself:
    # ``function`` is the node, ``input_nr`` is 0. A node keeps the node
    # there and an Edge only for a later input; the scheduler reads both the
    # same way (``edge.function``, ``edge.input_nr``), and its hot loops tell
    # them apart by type. The public ``next_edges`` still gives Edge objects.
    # Where a node keeps its edges: Note [Edges in the node's own slots] in
    # engine.scheduler.
    #
    input_nr: ClassVar[int] = 0
    """As an edge: the input of ``function`` it feeds (Note [A node is its own first edge])."""

    @property
    def function(self) -> Node:
        """As an edge: the node it feeds, itself (Note [A node is its own first edge])."""
        return self

    def set_next_edges(self, edges: Sequence[EdgeLike | None]) -> None:
        """Connect this node; its topological number becomes 1 + the deepest child's."""
        kept = tuple([e.function if type(e) is Edge and e.input_nr == 0 else e for e in edges])
        store_edges(self, kept)
        topo = -1
        for edge in kept:
            if edge is not None and edge.function.topological_nr > topo:
                topo = edge.function.topological_nr
        self.topological_nr = topo + 1 if topo >= 0 else 0

    @property
    def next_edges(self) -> tuple[Edge | None, ...]:
        """One edge per forward input; ``None`` where no gradient is needed."""
        return tuple([_as_edge(e) for e in self._next_edges])

    def next_edge(self, i: int) -> Edge | None:
        """The edge of forward input ``i``; ``None`` where no gradient is needed."""
        return _as_edge(self._next_edges[i])

    @property
    def num_outputs(self) -> int:
        """How many gradients ``apply`` returns (one per forward input)."""
        n = self._num_edges
        return 2 if n == ONE_AND_A_NUMBER else n

    @property
    def next_functions(self) -> tuple[tuple[Node | None, int], ...]:
        """``((node, input_nr), ...)`` as in ``torch``; ``(None, 0)`` for missing edges."""
        return tuple((None, 0) if e is None else (e.function, e.input_nr) for e in self._next_edges)

    # -- inputs ----------------------------------------------------------
    def add_input_metadata(self, shape: tuple[int, ...], dtype: Any, device: Any) -> int:
        """Record the expected gradient of the next input; returns its index (output_nr)."""
        metadata = self._input_metadata
        self._input_metadata = metadata + shared_metadata(shape, dtype, device)
        return len(metadata)

    @property
    def num_inputs(self) -> int:
        """How many gradients ``apply`` takes (one per forward output)."""
        return len(self._input_metadata)

    def input_metadata(self, i: int) -> InputMetadata:
        return self._input_metadata[i]

    # -- metadata --------------------------------------------------------
    @property
    def metadata(self) -> dict[str, Any]:
        """A dict for anything; anomaly mode stores the forward stack under ``traceback_``."""
        if self._metadata is None:
            self._metadata = {}
        return self._metadata

    # -- saved tensors ---------------------------------------------------
    def save(self, *saved: SavedTensor) -> None:
        """Keep saved tensors; they are released after backward unless ``retain_graph``."""
        self._saved = saved

    def saved_tensors(self) -> tuple[Tensor, ...]:
        """Unpack the saved tensors (checking versions and that they were not freed)."""
        return tuple(s.unpack(self) for s in self._saved)

    def release_variables(self) -> None:
        """Free the saved tensors; a later unpack raises the "backward twice" error."""
        for s in self._saved:
            s.release()

    def should_compute_output(self, i: int) -> bool:
        """Whether the gradient for forward input ``i`` is needed by the running graph task."""
        n = self._num_edges
        if 0 <= i < n <= 2:  # the slots themselves: this runs in backward
            edge = self._edge1 if i else self._edge0
        elif n == ONE_AND_A_NUMBER and 0 <= i < 2:  # Note [A number's edge in the count]
            edge = None if i else self._edge0
        else:
            edge = self._next_edges[i]
        if edge is None:
            return False
        task = _context.TLS.graph_task
        if task is not None and task.exec_info:
            info = task.exec_info.get(edge.function)
            return info is not None and info.should_execute()
        return True

    # -- hooks -------------------------------------------------------------
    # Note [A node's hooks in one slot]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # Few nodes have hooks, yet every op stored four empty fields for them
    # (pre, post, tensor pre-hooks, retain_grad) and the plain path read all
    # four for every node it ran; each store and read is a generic one there,
    # as the node's class varies. They live in one NodeHooks object, made
    # with a node's first hook: an op stores one None, the plain path reads
    # one slot (Note [The plain path] in engine.engine), and a node keeps
    # three slots fewer. The four names stay as properties for the rest. A
    # node whose hooks were all removed keeps its NodeHooks and runs on the
    # general path, which gives the same results. AccumulateGrad is made
    # with one: its tensor hooks are its leaf's, which only the general path
    # looks for, so the plain path's one read of the slot covers it too.

    @property
    def _pre_hooks(self) -> dict[int, Any] | None:
        hooks = self._hooks
        return None if hooks is None else hooks.pre

    @_pre_hooks.setter
    def _pre_hooks(self, value: dict[int, Any] | None) -> None:
        _hooks_of(self).pre = value

    @property
    def _post_hooks(self) -> dict[int, Any] | None:
        hooks = self._hooks
        return None if hooks is None else hooks.post

    @_post_hooks.setter
    def _post_hooks(self, value: dict[int, Any] | None) -> None:
        _hooks_of(self).post = value

    @property
    def _tensor_pre_hooks(self) -> dict[int, dict[int, Any]] | None:
        hooks = self._hooks
        return None if hooks is None else hooks.tensor_pre

    @_tensor_pre_hooks.setter
    def _tensor_pre_hooks(self, value: dict[int, dict[int, Any]] | None) -> None:
        _hooks_of(self).tensor_pre = value

    @property
    def _retains_grad_hooks(self) -> dict[int, Any] | None:
        hooks = self._hooks
        return None if hooks is None else hooks.retains_grad

    @_retains_grad_hooks.setter
    def _retains_grad_hooks(self, value: dict[int, Any] | None) -> None:
        _hooks_of(self).retains_grad = value

    def register_hook(
        self, fn: Callable[[tuple[Any, ...], tuple[Any, ...]], Any]
    ) -> RemovableHandle:
        """Run ``fn(grad_inputs, grad_outputs)`` after this node; it may return new grad_inputs."""
        if self._post_hooks is None:
            self._post_hooks = new_hook_dict()
        return add_hook(self._post_hooks, fn)

    def register_prehook(self, fn: Callable[[tuple[Any, ...]], Any]) -> RemovableHandle:
        """Run ``fn(grad_outputs)`` before this node; it may return new grad_outputs."""
        if self._pre_hooks is None:
            self._pre_hooks = new_hook_dict()
        return add_hook(self._pre_hooks, fn)

    def tensor_pre_hooks(self, output_nr: int) -> dict[int, Any] | None:
        """Hooks registered with ``Tensor.register_hook`` on this node's output ``output_nr``."""
        if self._tensor_pre_hooks is None:
            return None
        return self._tensor_pre_hooks.get(output_nr)

    def has_tensor_hooks(self) -> bool:
        """Whether tensor hooks or ``retain_grad`` must run before this node."""
        return bool(self._tensor_pre_hooks) or bool(self._retains_grad_hooks)

    def add_tensor_pre_hook(self, output_nr: int, fn: Callable[[Any], Any]) -> RemovableHandle:
        if self._tensor_pre_hooks is None:
            self._tensor_pre_hooks = {}
        hooks = self._tensor_pre_hooks.get(output_nr)
        if hooks is None:
            hooks = self._tensor_pre_hooks[output_nr] = new_hook_dict()
        return add_hook(hooks, fn)

    # -- the work --------------------------------------------------------
    def apply(self, grads: list[Any]) -> Sequence[Any]:
        """Map gradients of the forward outputs to gradients of the forward inputs."""
        raise NotImplementedError(f"{self.name()} does not implement apply()")

    def __call__(self, grads: list[Any]) -> Sequence[Any]:
        return self.apply(grads)


class GraphRoot(Node):
    """The single start node when ``backward()`` is given several roots."""

    __slots__ = ("outputs",)
    skips_undefined_grads = False  # it has no inputs; its outputs are the root gradients

    def __init__(self, edges: Sequence[Edge], grads: Sequence[Any]) -> None:
        super().__init__()
        self.set_next_edges(edges)
        self.outputs = list(grads)

    def apply(self, grads: list[Any]) -> list[Any]:
        return self.outputs


_STEALS = _context.GIL
"""Whether reference counts can tell an unshared gradient (Note [Stealing the first gradient])."""


def _memory_only_it_reaches(array: Any) -> bool:
    """Whether ``array`` (NumPy or CuPy) is C-contiguous, writeable, and the only way to its memory.

    That is, it owns its memory, or it is a view of an array that nothing else
    holds (a reshape of a reduction's result, say).
    """
    flags = getattr(array, "flags", None)
    if flags is None or not (flags.c_contiguous and getattr(flags, "writeable", True)):
        return False
    base = getattr(array, "base", array)  # an array type that cannot tell: copy
    if base is None:
        return True
    if base is array:
        return False
    # The view's own reference, this name, the argument.
    return type(base) is type(array) and base.base is None and sys.getrefcount(base) <= 3


# Note [Stealing the first gradient]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A leaf's first gradient becomes its ``.grad``, which later backward calls add
# into in place, so ``.grad`` must not share memory with anything the user can
# still reach. Copying it always is safe but costs a pass over every parameter's
# gradient per step (a tenth of an MLP step here). PyTorch's AccumulateGrad
# steals the incoming gradient when nobody else holds it, and so does this one:
# the tensor must be held only by the input buffer (``grads``) and apply's own
# names, its array only by that tensor, and the array must be C-contiguous (as a
# copy would be), writeable, and own its memory or view an array nothing else
# holds.
# The engine calls apply with no other reference to the gradient (call_function
# drops its loop variable first; the plain path drops what it routed). Anything
# else holding it, a tensor hook that kept it, the same tensor routed to a second
# leaf, a caller's variable, shows in the counts and the gradient is copied.
# Under create_graph the gradient is the graph itself and is kept as is. Without
# a GIL the counts are not exact, so it always copies.


class AccumulateGrad(Node):
    """The sink of a leaf tensor: adds the incoming gradient into ``leaf.grad``.

    One exists per leaf while anything refers to it (the leaf holds it weakly,
    the graph strongly), so every path to the leaf meets in the same node.
    """

    __slots__ = ("variable",)

    _lock = threading.Lock()
    hooks_on_variable = True

    def __init__(self, variable: Tensor) -> None:
        super().__init__(sequence_nr=UINT64_MAX)
        self.variable = variable
        # Its tensor hooks are its leaf's, which the plain path does not look for: a NodeHooks
        # from the start sends it the general way (Note [A node's hooks in one slot]).
        self._hooks = NodeHooks()
        self.add_input_metadata(variable.data.shape, variable.data.dtype, variable.device)

    def tensor_pre_hooks(self, output_nr: int) -> dict[int, Any] | None:
        return self.variable._backward_hooks

    def add_tensor_pre_hook(self, output_nr: int, fn: Callable[[Any], Any]) -> RemovableHandle:
        return self.variable.register_hook(fn)

    def has_tensor_hooks(self) -> bool:
        return bool(self.variable._backward_hooks)

    def apply(self, grads: list[Any]) -> list[Any]:
        new_grad = grads[0]
        if new_grad is None:
            return []
        variable = self.variable
        task = _context.TLS.graph_task
        if task is not None and variable.device.type != "cpu":
            task.leaf_devices.add(variable.device)  # synchronized before backward() returns
        with AccumulateGrad._lock:
            old = variable._grad
            if old is None:
                if (
                    _STEALS
                    and not grad_mode._state.enabled
                    and sys.getrefcount(new_grad) <= 3  # grads, new_grad, the argument
                    and sys.getrefcount(new_grad.data) <= 2  # new_grad's slot, the argument
                    and _memory_only_it_reaches(new_grad.data)
                ):
                    variable._grad = new_grad.detach()  # Note [Stealing the first gradient]
                else:
                    variable._grad = new_grad.detach_copy_for_grad()
            else:
                variable._grad = old.accumulate_grad(new_grad)
        if HUB.active:
            HUB.emit(
                "accumulate",
                _context.current_device_name(),
                _context.current_graph_task_id(),
                self,
                target="leaf",
                leaf_name=variable.name,
                action="created" if old is None else "added",
                grad=LazySummary(variable._grad.data, str(variable.device)),
            )
        if variable._post_accumulate_grad_hooks:
            self._call_post_accumulate_grad_hooks(variable)
        return []

    def _call_post_accumulate_grad_hooks(self, variable: Tensor) -> None:
        """``hook(leaf)`` once ``.grad`` holds the sum, as PyTorch's AccumulateGrad calls it.

        Outside the lock (PyTorch holds the node's own mutex; ours is shared by all leaves,
        and a hook may start a backward of its own).
        """
        from engine.tensor import Tensor

        hooks = variable._post_accumulate_grad_hooks
        assert hooks is not None
        for hook in list(hooks.values()):
            result = hook(variable)
            if HUB.active:
                HUB.emit(
                    "hook",
                    _context.current_device_name(),
                    _context.current_graph_task_id(),
                    self,
                    hook="post_accumulate_grad",
                    replaced=False,
                    hook_name=getattr(hook, "__qualname__", repr(hook)),
                )
            if result is not None:
                if isinstance(result, Tensor):
                    raise RuntimeError("Tensor post accumulate grad hooks should return None.")
                raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")

    def name(self) -> str:
        return "AccumulateGrad"
