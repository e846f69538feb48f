"""What every operation uses: operand checks, node creation and output wrapping.

An operation computes its result on arrays, then, if any input requires grad
and grad mode is on, creates its backward node next to it::

    class ExpBackward0(Node):
        __slots__ = ()

        def apply(self, grads):
            (result,) = self.saved_tensors()
            return (grads[0] * result,)

    def exp(input):
        node = make_node(ExpBackward0, input)
        out = wrap(input.device.xp.exp(input.data), input.device, node)
        if node is not None:
            node.save(save_output(out))
        return out

Backward formulas are written with Tensor operations, so with
``create_graph=True`` they build a graph of their own (higher-order
gradients). Broadcasting needs no care in a formula: the engine sums each
gradient down to its input's shape (see ``engine.engine.validate_outputs``).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from engine import anomaly, grad_mode
from engine import graph as _graph
from engine.devices import CPU, Device
from engine.graph import (
    _SHARED_METADATA,
    Edge,
    EdgeLike,
    Node,
    _sequence,
    edge_to,
    next_sequence_nr,
    shared_metadata,
    store_edges,
)
from engine.saved import SavedTensor
from engine.scheduler import ONE_AND_A_NUMBER
from engine.tensor import Tensor

N = TypeVar("N", bound=Node)

_ANOMALY = anomaly.STATE
_new_object = object.__new__


def needs_grad(*tensors: Tensor | None) -> bool:
    """Whether an op on ``tensors`` must record a node."""
    if not grad_mode._state.enabled:
        return False
    for t in tensors:  # noqa: SIM110 - a loop beats any() + generator on the hot path
        if t is not None and t._requires_grad:
            return True
    return False


def make_node(cls: type[N], *inputs: Tensor | None) -> N | None:
    """Create ``cls()`` linked to ``inputs`` if a node is needed, else ``None``.

    Edge ``i`` of the node is the gradient edge of ``inputs[i]`` (``None`` for
    inputs that do not require grad or are not tensors).
    """
    if not grad_mode._state.enabled:
        return None
    for t in inputs:
        if t is not None and t._requires_grad:
            break
    else:
        return None
    if cls.bare_init:
        # Node.__init__, written out (this runs once per op); see Note [Bare nodes].
        node = _new_object(cls)
        try:
            node.sequence_nr = _sequence.next()
        except AttributeError:  # this thread's first node
            node.sequence_nr = next_sequence_nr()
        node._id = next(_graph._node_ids)  # a module attribute: tests restart it
        node._metadata = None
        node._hooks = None  # Note [A node's hooks in one slot]
        node._input_metadata = ()
        node._saved = ()
        if _ANOMALY.node_metadata:
            node._metadata = anomaly.new_metadata()
    else:
        node = cls()
    # Node.set_next_edges, written out: edges and topological_nr, in the node's slots (Note
    # [Edges in the node's own slots]). An edge to input 0 is the node itself (Note [A node is
    # its own first edge]).
    if len(inputs) == 1:  # most ops: no loop, no list
        fn = t.grad_fn
        if fn is None:
            fn = t._get_grad_accumulator()
            node._edge0 = fn
        elif t._output_nr:
            node._edge0 = Edge(fn, t._output_nr)
        else:
            node._edge0 = fn
        node._num_edges = 1
        node.topological_nr = fn.topological_nr + 1
    else:
        edges: list[EdgeLike | None] = []
        topo = -1
        for t in inputs:
            if t is None or not t._requires_grad:
                edges.append(None)
                continue
            fn = t.grad_fn
            if fn is None:
                fn = t._get_grad_accumulator()
                edges.append(fn)
            elif t._output_nr:
                edges.append(Edge(fn, t._output_nr))
            else:
                edges.append(fn)
            if fn.topological_nr > topo:  # noqa: PLR1730 - max() costs a call
                topo = fn.topological_nr
        if len(edges) == 2:
            node._edge0, node._edge1 = edges
            node._num_edges = 2
        else:
            store_edges(node, tuple(edges))
        node.topological_nr = topo + 1
    if _ANOMALY.check_forward and _ANOMALY.enabled:  # see Note [Born non-finite] in engine.anomaly
        anomaly.note_forward_inputs(node, inputs)
    return node


def scalar_op(cls: type[N], input: Tensor, data: Any) -> tuple[Tensor, N | None]:
    """``node = make_node(cls, input, None)`` and ``wrap(data, input.device, node)`` in one call.

    For an op of one tensor and a Python scalar (``y * 2.0``, ``y + 1``):
    the node's second edge, the scalar's, is ``None``. Returns the output and
    the node (``None`` when none is needed), whose own fields the caller sets.

    Note [Scalar ops in one call]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    A chain of scalar arithmetic is the smallest graph there is, and there
    the two calls (make_node, wrap), the argument tuple and make_node's
    input loop were a seventh of the op. This is make_node and wrap written
    out for exactly that case. Its fields must stay those of make_node and
    wrap (Note [Bare nodes]); a test compares the three ways to make a node.
    """
    device = input.device
    out: Tensor = _new_object(Tensor)
    out.data = data
    out.device = device
    out._version_counter = None  # Note [Lazy version counters]
    out._base = None
    state = grad_mode._state
    if grad_mode.inference_threads and state.inference:  # Note [Inference mode counted]
        out._is_inference = True
    if not (state.enabled and input._requires_grad):
        out.grad_fn = None
        out._requires_grad = False
        out._output_nr = 0
        return out, None
    node: N
    if cls.bare_init:
        node = _new_object(cls)
        try:
            node.sequence_nr = _sequence.next()
        except AttributeError:  # this thread's first node
            node.sequence_nr = next_sequence_nr()
        node._id = next(_graph._node_ids)
        node._metadata = None
        node._hooks = None  # Note [A node's hooks in one slot]
        node._saved = ()
        if _ANOMALY.node_metadata:
            node._metadata = anomaly.new_metadata()
    else:
        node = cls()
    fn = input.grad_fn
    if fn is None:
        fn = input._get_grad_accumulator()
        node._edge0 = fn  # Note [A node is its own first edge]
    elif input._output_nr:
        node._edge0 = Edge(fn, input._output_nr)
    else:
        node._edge0 = fn
    node._num_edges = ONE_AND_A_NUMBER  # Note [A number's edge in the count]
    node.topological_nr = fn.topological_nr + 1
    single = _SHARED_METADATA.get((data.shape, data.dtype, device._str))
    if single is None:
        single = shared_metadata(data.shape, data.dtype, device)
    node._input_metadata = single  # Note [Shared input metadata]
    out.grad_fn = node
    out._requires_grad = True
    out._output_nr = 0
    if _ANOMALY.check_forward and _ANOMALY.enabled:  # make_node's and wrap's checks, in order
        anomaly.note_forward_inputs(node, (input, None))
        anomaly.check_forward_output(node, out)
    return out, node


def link(node: N, inputs: Sequence[Tensor | None]) -> N:
    """Connect an already built ``node`` to ``inputs`` (for nodes with constructor args)."""
    node.set_next_edges([_edge(t) for t in inputs])
    return node


def _edge(t: Tensor | None) -> EdgeLike | None:
    if t is None or not t._requires_grad:
        return None
    if t.grad_fn is not None:
        return edge_to(t.grad_fn, t._output_nr)
    return t._get_grad_accumulator()  # Note [A node is its own first edge]


def wrap(data: Any, device: Device, node: Node | None = None) -> Tensor:
    """Wrap an op's result array; attach it as the next output of ``node``.

    Anomaly mode with ``check_forward`` checks the output here, as it is born.
    """
    # make_tensor and Node.add_input_metadata, written out (this runs once per op).
    out: Tensor = _new_object(Tensor)
    out.data = data
    out.device = device
    out._version_counter = None  # Note [Lazy version counters]
    out._base = None
    if grad_mode.inference_threads and grad_mode._state.inference:
        out._is_inference = True
    if node is None:
        out.grad_fn = None
        out._requires_grad = False
        out._output_nr = 0
    else:
        out.grad_fn = node
        out._requires_grad = True
        metadata = node._input_metadata
        single = _SHARED_METADATA.get((data.shape, data.dtype, device._str))
        if single is None:
            single = shared_metadata(data.shape, data.dtype, device)
        if metadata:
            out._output_nr = len(metadata)
            node._input_metadata = metadata + single
        else:
            out._output_nr = 0
            node._input_metadata = single  # Note [Shared input metadata]
        if _ANOMALY.check_forward and _ANOMALY.enabled:
            anomaly.check_forward_output(node, out)
    return out


def wrap_view(data: Any, base: Tensor, node: Node | None = None) -> Tensor:
    """Like :func:`wrap` for a view: shares ``base``'s version counter."""
    out = wrap(data, base.device, node)
    out._version_counter = base._shared_version_counter()
    root = base if base._base is None else base._base
    out._base = root
    if base._is_inference:  # a view of an inference tensor is one too, made where it may
        out._is_inference = True
    if node is not None:
        # Views with a history are rewritten when an in-place op rebases their base.
        if root._views is None:
            root._views = weakref.WeakSet()
        root._views.add(out)
    return out


def save(t: Tensor) -> SavedTensor:
    """Save an input of the op for backward."""
    return SavedTensor(t, is_output=False)


def save_output(t: Tensor) -> SavedTensor:
    """Save an output of the op (no reference cycle; see ``engine.saved``)."""
    return SavedTensor(t, is_output=True)


def as_tensor_like(value: Any, like: Tensor) -> Tensor:
    """A Python or NumPy scalar as a 0-dim tensor on ``like``'s device (no grad)."""
    if isinstance(value, Tensor):
        return value
    xp = like.device.xp
    if isinstance(value, bool | int | float | np.number):
        if isinstance(value, float) or np.issubdtype(np.asarray(value).dtype, np.floating):
            dtype = like.data.dtype if np.issubdtype(like.data.dtype, np.inexact) else np.float32
        else:
            dtype = like.data.dtype
        return Tensor._make(xp.asarray(value, dtype=dtype), like.device)
    if isinstance(value, np.ndarray | list | tuple):
        return Tensor._make(xp.asarray(value), like.device)
    raise TypeError(
        f"unsupported operand type: expected a Tensor or a number, got {type(value).__name__}"
    )


def check_same_device(*tensors: Tensor) -> Device:
    """The common device of ``tensors``; 0-dim CPU tensors go anywhere, as in PyTorch.

    Raises:
        RuntimeError: PyTorch's message when two devices meet.
    """
    device: Device | None = None
    for t in tensors:
        if t.device is CPU and t.data.ndim == 0:
            continue
        if device is None:
            device = t.device
        elif t.device is not device:
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two devices, "
                f"{device} and {t.device}!"
            )
    if device is None:
        return tensors[0].device
    return device


_DTYPE_NAMES = {
    "float16": "Half",
    "float32": "Float",
    "float64": "Double",
    "int8": "Char",
    "uint8": "Byte",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "bool": "Bool",
    "complex64": "ComplexFloat",
    "complex128": "ComplexDouble",
}


def dtype_name(dtype: Any) -> str:
    """PyTorch's short name of a dtype in its error messages (``Float``, ``Long``, ``Bool``)."""
    name = np.dtype(dtype).name
    return _DTYPE_NAMES.get(name, name)


_KINDS = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def _kind(dtype: Any) -> int:
    """Rank of the dtype's category in type promotion: bool < integer < floating < complex."""
    return _KINDS[np.dtype(dtype).kind]


def promoted(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """``a`` and ``b`` cast to PyTorch's result dtype for them.

    Of two operands of different kinds, the higher kind's dtype wins whatever the sizes
    (``float32`` with ``int64`` is ``float32``; NumPy would say ``float64``).

    PyTorch lets a 0-dim operand (or a number) decide the dtype only when it is of a higher kind
    (bool < integer < floating) than the dimensioned one: ``int64[3]`` with ``0.5`` is float, but
    ``float32[3]`` with a float64 0-dim tensor stays float32. NumPy would promote both to float64.
    """
    dtype_a, dtype_b = a.data.dtype, b.data.dtype
    if (a.ndim == 0) == (b.ndim == 0):
        kind_a, kind_b = _kind(dtype_a), _kind(dtype_b)
        if kind_a == kind_b:
            dtype = np.result_type(dtype_a, dtype_b)
        else:  # a float meeting an integer keeps its own size: float32 with int64 is float32
            dtype = dtype_a if kind_a > kind_b else dtype_b
    else:
        dimensioned, zero_dim = (dtype_a, dtype_b) if b.ndim == 0 else (dtype_b, dtype_a)
        dtype = dimensioned if _kind(zero_dim) <= _kind(dimensioned) else zero_dim
    return _cast(a, dtype), _cast(b, dtype)


def _cast(t: Tensor, dtype: Any) -> Tensor:
    return t if t.data.dtype == dtype else t.to(dtype)


def operands(a: Any, b: Any, promote: bool = True) -> tuple[Tensor, Tensor, Device]:
    """Tensors for a binary op, checked to share a device.

    With ``promote`` (elementwise ops) both are cast to PyTorch's result dtype and
    their shapes must broadcast; matrix products pass ``False`` because PyTorch
    refuses mixed dtypes there (and checks shapes its own way).

    Raises:
        RuntimeError: PyTorch's message for shapes that do not broadcast.
    """
    if not isinstance(a, Tensor):
        a = as_tensor_like(a, b)
    if not isinstance(b, Tensor):
        b = as_tensor_like(b, a)
    device = check_same_device(a, b)
    if a.device is not device:
        a = a.to(device)  # a 0-dim CPU operand: recorded, so its gradient comes back
    if b.device is not device:
        b = b.to(device)
    if promote:
        if a.data.shape != b.data.shape:
            check_broadcast(a.data.shape, b.data.shape)
        if a.data.dtype != b.data.dtype:
            a, b = promoted(a, b)
    return a, b, device


def check_broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    """Check that shapes ``a`` and ``b`` broadcast, from the last dimension (PyTorch's order).

    Raises:
        RuntimeError: PyTorch's message, naming the first mismatch from the right by its
            dimension in the broadcast result.
    """
    ndim = len(a) if len(a) > len(b) else len(b)
    for offset in range(ndim):
        size_a = a[-1 - offset] if offset < len(a) else 1
        size_b = b[-1 - offset] if offset < len(b) else 1
        if size_a not in (size_b, 1) and size_b != 1:
            raise RuntimeError(
                f"The size of tensor a ({size_a}) must match the size of tensor b ({size_b}) at "
                f"non-singleton dimension {ndim - 1 - offset}"
            )


def normalize_dim(dim: int, ndim: int) -> int:
    """A possibly negative ``dim`` as an index into ``ndim`` dimensions.

    Raises:
        IndexError: PyTorch's message when ``dim`` is out of range.
    """
    lo, hi = (-1, 0) if ndim == 0 else (-ndim, ndim - 1)
    if not lo <= dim <= hi:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})"
        )
    return dim % ndim if ndim else 0


ERR_INFERENCE_INPLACE = (
    "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a "
    "clone to get a normal tensor before doing inplace update.See "
    "https://github.com/pytorch/rfcs/pull/17 for more details."
)
"""PyTorch's words, missing spaces included."""


def check_inplace(t: Tensor, *others: Tensor | None) -> None:
    """Refuse in-place changes autograd cannot follow (PyTorch's messages).

    Raises:
        RuntimeError: a leaf that requires grad, a view of one, or an inference tensor
            outside inference mode.
    """
    if t._is_inference and not grad_mode._state.inference:
        raise RuntimeError(ERR_INFERENCE_INPLACE)
    if not grad_mode._state.enabled:
        return
    if t.grad_fn is None and t._requires_grad and t._base is None:
        raise RuntimeError(
            "a leaf Variable that requires grad is being used in an in-place operation."
        )
    base = t._base
    if base is not None and base.grad_fn is None and base._requires_grad:
        raise RuntimeError(
            "a view of a leaf Variable that requires grad is being used in an in-place operation."
        )


def inplace_source(t: Tensor, *others: Tensor | None) -> Tensor:
    """``t`` as an operand of its own in-place op.

    The op's node may save its input, which the in-place write is about to
    overwrite; when a graph is being recorded the operand is a copy of the
    values with ``t``'s history (PyTorch saves the original self the same way).
    """
    if not needs_grad(t, *others):
        return t
    source = Tensor._make(t.data.copy(), t.device)
    source.grad_fn = t.grad_fn
    source._output_nr = t._output_nr
    source._requires_grad = t._requires_grad
    return source


def rebase_history(t: Tensor, result: Tensor, keep_view: bool = True) -> Tensor:
    """Finish an in-place op on ``t`` computed out of place as ``result``.

    The result is written into ``t``'s array, ``t``'s version goes up (so any
    node that saved the old value fails loudly in backward) and ``t`` takes
    over ``result``'s place in the graph. When ``t`` is a view, its base is
    rebased instead (see Note [In-place on views]); ``keep_view=False`` says nobody
    else holds the view, so it need not take a new history too.
    """
    if result.data.shape != t.data.shape:
        raise RuntimeError(
            f"output with shape [{', '.join(map(str, t.data.shape))}] doesn't match the broadcast "
            f"shape [{', '.join(map(str, result.data.shape))}]"
        )
    if not t.device.xp.can_cast(result.data.dtype, t.data.dtype, casting="same_kind"):
        raise RuntimeError(
            f"result type {result.data.dtype} can't be cast to the desired output type "
            f"{t.data.dtype}"
        )
    if any(
        stride == 0 and size > 1 for stride, size in zip(t.data.strides, t.data.shape, strict=True)
    ):
        raise RuntimeError(
            "unsupported operation: more than one element of the written-to tensor refers to a "
            "single memory location. Please clone() the tensor before performing the operation."
        )
    base = t._base
    if base is not None and (result.grad_fn is not None or base._requires_grad):
        from engine.ops.inplace_views import rebase_view

        return rebase_view(t, base, result, keep_view)
    t.data[...] = result.data
    t._bump_version()
    if result.grad_fn is not None:
        t.grad_fn = result.grad_fn
        t._output_nr = result._output_nr
        t._requires_grad = True
        if t._views:
            from engine.ops.inplace_views import regenerate_views

            regenerate_views(t)
    return t
