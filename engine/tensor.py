"""Tensor: an array plus the autograd metadata that links it into the graph.

Differentiable operations are defined in ``engine.ops`` and installed on this
class as methods and operators when ``engine`` is imported.
"""

from __future__ import annotations

import math
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from engine import dtypes, grad_mode
from engine.devices import CPU, Device
from engine.graph import AccumulateGrad, Edge, RemovableHandle, add_hook, new_hook_dict

if TYPE_CHECKING:
    from engine.graph import Node

__all__ = [
    "Size",
    "Tensor",
    "is_differentiable_dtype",
    "make_tensor",
]


class Size(tuple[int, ...]):
    """A shape: a tuple of ints that prints as ``engine.Size([2, 3])``, like ``torch.Size``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"engine.Size([{', '.join(map(str, self))}])"

    def numel(self) -> int:
        """The number of elements a tensor of this shape holds."""
        return math.prod(self)


_COUNTER_LOCK = threading.Lock()
"""Makes each lazy version counter once; see Note [Lazy version counters]."""

_NONLEAF_GRAD_WARNING = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad field "
    "to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. If you "
    "access the non-leaf Tensor by mistake, make sure you access the leaf Tensor instead."
)


ERR_DETACH_VIEW = (
    "Can't detach views in-place. Use detach() instead. If you are using DistributedDataParallel "
    "(DDP) for training, and gradient_as_bucket_view is set as True, gradients are views of DDP "
    "buckets, and hence detach_() cannot be called on these gradients. To fix this error, please "
    "refer to the Optimizer.zero_grad() function in torch/optim/optimizer.py as the solution."
)

# PyTorch words the same refusal three ways, and people search for each.
FACTORY_DTYPE_ERROR = "Only Tensors of floating point and complex dtype can require gradients"
"""``tensor(..., requires_grad=True)`` and the other factories."""
_SETTER_DTYPE_ERROR = "only Tensors of floating point and complex dtype can require gradients"
_METHOD_DTYPE_ERROR = "only Tensors of floating point dtype can require gradients"

_C_TYPE_NAMES = {
    "float16": "c10::Half",
    "float32": "float",
    "float64": "double",
    "int8": "signed char",
    "uint8": "unsigned char",
    "int16": "short int",
    "int32": "int",
    "int64": "long int",
    "bool": "bool",
    "complex64": "c10::complex<float>",
    "complex128": "c10::complex<double>",
}


def _c_type_name(array: Any) -> str:
    """The C++ name PyTorch gives an element type in some messages (``float``, ``long int``)."""
    return _C_TYPE_NAMES.get(array.dtype.name, array.dtype.name)


def _short_type_name(array: Any) -> str:
    from engine.ops._core import dtype_name

    return dtype_name(array.dtype)


def _dims(shape: tuple[int, ...]) -> str:
    return f"[{', '.join(map(str, shape))}]"


def is_differentiable_dtype(dtype: Any) -> bool:
    """Whether tensors of ``dtype`` may require grad (floating point and complex)."""
    return np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating)


class Tensor:
    """An n-dimensional array that records the operations applied to it.

    Create tensors with :func:`engine.tensor` and the factories (``zeros``,
    ``randn``, ...). ``data`` is the underlying NumPy (or CuPy) array.
    """

    __slots__ = (
        "__dict__",
        "__weakref__",
        "_base",
        "_output_nr",
        "_requires_grad",
        "_version_counter",
        "data",
        "device",
        "grad_fn",
    )

    # Note [Lean tensors]
    # ~~~~~~~~~~~~~~~~~~~
    # Every op makes a tensor, forward and backward, so making one must be
    # cheap: only the fields every tensor needs are slots set at creation.
    # The rest are class-level defaults until a tensor sets its own (a leaf's
    # hooks, a name), which lands in its ``__dict__``. A view's base is a slot
    # too: a backward through ``cat`` makes one view per input, and a dict for
    # each was a second object for the cyclic collector to track.
    _grad: Tensor | None = None
    _grad_accumulator: weakref.ref[AccumulateGrad] | None = None
    _backward_hooks: dict[int, Any] | None = None
    _retains_grad: bool = False
    _is_inference: bool = False
    _views: weakref.WeakSet[Tensor] | None = None
    _post_accumulate_grad_hooks: dict[int, Any] | None = None

    if TYPE_CHECKING:
        # Operations are installed on the class by ``engine.ops`` at import time.
        def __getattr__(self, name: str) -> Any: ...
        def __add__(self, other: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __sub__(self, other: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __mul__(self, other: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __truediv__(self, other: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __pow__(self, other: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __matmul__(self, other: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __lt__(self, other: Any) -> Tensor: ...
        def __le__(self, other: Any) -> Tensor: ...
        def __gt__(self, other: Any) -> Tensor: ...
        def __ge__(self, other: Any) -> Tensor: ...
        def __and__(self, other: Any) -> Tensor: ...
        def __rand__(self, other: Any) -> Tensor: ...
        def __or__(self, other: Any) -> Tensor: ...
        def __ror__(self, other: Any) -> Tensor: ...
        def __xor__(self, other: Any) -> Tensor: ...
        def __iadd__(self, other: Any) -> Tensor: ...
        def __isub__(self, other: Any) -> Tensor: ...
        def __imul__(self, other: Any) -> Tensor: ...
        def __itruediv__(self, other: Any) -> Tensor: ...
        def __eq__(self, other: Any) -> Any: ...
        def __ne__(self, other: Any) -> Any: ...
        def __neg__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __invert__(self) -> Tensor: ...
        def __getitem__(self, key: Any) -> Tensor: ...
        def __setitem__(self, key: Any, value: Any) -> None: ...

    # NumPy must defer to our reflected operators (ndarray * Tensor -> Tensor.__rmul__).
    __array_ufunc__ = None
    __hash__ = object.__hash__

    data: Any
    """The underlying array (``numpy.ndarray``; ``cupy.ndarray`` on ``cuda``)."""
    device: Device
    """The device the data lives on."""
    grad_fn: Node | None
    """The node that computes this tensor's gradient contribution; ``None`` for leaves."""
    name: str | None = None
    """An optional name, shown by the visualizer."""

    def __init__(
        self,
        data: Any,
        device: str | Device | None = None,
        requires_grad: bool = False,
        name: str | None = None,
    ) -> None:
        from engine.factories import as_array

        array, dev = as_array(data, None, device)
        self._init(array, dev)
        self.name = name
        if requires_grad:
            self._set_requires_grad(True, FACTORY_DTYPE_ERROR)

    def _init(self, data: Any, device: Device) -> None:
        self.data = data
        self.device = device
        self.grad_fn = None
        self._requires_grad = False
        self._output_nr = 0
        self._version_counter: list[int] | None = None  # Note [Lazy version counters]
        self._base: Tensor | None = None  # the tensor a view views (a slot: every view sets it)
        if grad_mode.inference_threads and grad_mode._state.inference:
            self._is_inference = True

    @staticmethod
    def _make(data: Any, device: Device = CPU) -> Tensor:
        """Wrap an array without copying or checking (for the engine and ops)."""
        return make_tensor(data, device)

    # -- shape and type ----------------------------------------------------
    @property
    def shape(self) -> Size:
        """The shape, as a :class:`Size` (a tuple)."""
        return Size(self.data.shape)

    def size(self, dim: int | None = None) -> Any:
        """The shape as a :class:`Size`, or the size of dimension ``dim``."""
        return Size(self.data.shape) if dim is None else self.data.shape[dim]

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return int(self.data.ndim)

    def dim(self) -> int:
        """Number of dimensions."""
        return int(self.data.ndim)

    def numel(self) -> int:
        """Number of elements."""
        return int(self.data.size)

    @property
    def dtype(self) -> dtypes.dtype:
        """The element type, e.g. ``engine.float32`` (equal to NumPy's ``float32``)."""
        return dtypes.of(self.data.dtype)

    def __len__(self) -> int:
        if self.data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return int(self.data.shape[0])

    # -- autograd metadata -----------------------------------------------
    @property
    def is_leaf(self) -> bool:
        """True for tensors not produced by a recorded operation."""
        return self.grad_fn is None

    def is_inference(self) -> bool:
        """Whether the tensor was made in inference mode (PyTorch's ``Tensor.is_inference``)."""
        return self._is_inference

    @property
    def requires_grad(self) -> bool:
        """Whether gradients flow to this tensor."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self._set_requires_grad(value, _SETTER_DTYPE_ERROR)

    def _set_requires_grad(self, value: bool, dtype_error: str) -> None:
        """The ``requires_grad`` setter; PyTorch words the dtype error three ways (see below)."""
        if self.grad_fn is not None:
            if value:
                return
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to use a "
                "computed variable in a subgraph that doesn't require differentiation use "
                "var_no_grad = var.detach()."
            )
        if value and not is_differentiable_dtype(self.data.dtype):
            raise RuntimeError(dtype_error)
        if value and self._is_inference:
            raise RuntimeError(
                "Setting requires_grad=True on inference tensor outside InferenceMode is not "
                "allowed."
            )
        self._requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set ``requires_grad`` in place and return ``self``."""
        self._set_requires_grad(requires_grad, _METHOD_DTYPE_ERROR)
        return self

    @property
    def grad(self) -> Tensor | None:
        """The accumulated gradient (leaves, and non-leaves after ``retain_grad()``)."""
        if self.grad_fn is not None and not self._retains_grad and self._grad is None:
            warnings.warn(_NONLEAF_GRAD_WARNING, UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(
                    f"assigned grad expected to be a Tensor or None but got grad of type "
                    f"{type(value).__name__}"
                )
            if value.data.dtype != self.data.dtype:
                raise RuntimeError(
                    f"attempting to assign a gradient with dtype '{_c_type_name(value.data)}' "
                    f"to a tensor with grad_dtype '{_short_type_name(self.data)}'. The gradient "
                    f"must match the tensor's grad_dtype (defaults to the tensor's dtype). You "
                    f"can set the tensor's grad_dtype attribute with a specific dtype, or None "
                    f"to allow any dtype. Set grad_dtype with caution. Diverging the dtypes of a "
                    f"tensor and its gradient may break downstream systems that assume they match."
                )
            if value.device.type != self.device.type:
                raise RuntimeError(
                    f"attempting to assign a gradient with device type '{value.device.type}' to a "
                    f"tensor with device type '{self.device.type}'. Please ensure that the "
                    f"gradient and the tensor are on the same device"
                )
            if value.device is not self.device:
                raise RuntimeError(
                    f"attempting to assign a gradient located on device with index "
                    f"'{value.device.index}' to a tensor located on device with index "
                    f"'{self.device.index}'. Please ensure that the gradient and the tensor are "
                    f"on the same device"
                )
            if value.data.shape != self.data.shape:
                raise RuntimeError(
                    f"attempting to assign a gradient of size '{_dims(value.data.shape)}' to a "
                    f"tensor of size '{_dims(self.data.shape)}'. Please ensure that the gradient "
                    f"and the tensor are the same size"
                )
        self._grad = value

    @property
    def retains_grad(self) -> bool:
        """True for a non-leaf after ``retain_grad()``."""
        return self._retains_grad

    @property
    def output_nr(self) -> int:
        """Which output of ``grad_fn`` this tensor is."""
        return self._output_nr

    @property
    def _version(self) -> int:
        """How many in-place changes this tensor's data has seen."""
        counter = self._version_counter
        return 0 if counter is None else counter[0]

    def _bump_version(self) -> None:
        self._shared_version_counter()[0] += 1

    def _shared_version_counter(self) -> list[int]:
        """The version counter, made now if the tensor had none (Note [Lazy version counters])."""
        counter = self._version_counter
        if counter is None:
            with _COUNTER_LOCK:  # two threads must not make two counters for one tensor
                counter = self._version_counter
                if counter is None:
                    counter = self._version_counter = [0]
        return counter

    # Note [Lazy version counters]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # Every tensor has a version counter (PyTorch's VariableVersion): a one-item
    # list that views, detached tensors and saved tensors share, so that an
    # in-place change through any of them is seen by all. Most tensors are
    # never modified in place, viewed or saved, yet a list per tensor was a
    # quarter of the objects the cyclic collector tracks per op, and 88 bytes.
    # So a tensor starts with ``None``, meaning version 0 and shared by no one,
    # and the list is made the first time something shares it or bumps it.

    def _get_grad_accumulator(self) -> AccumulateGrad:
        """The leaf's one ``AccumulateGrad`` node, created on first use."""
        ref = self._grad_accumulator
        acc = ref() if ref is not None else None
        if acc is None:
            acc = AccumulateGrad(self)
            self._grad_accumulator = weakref.ref(acc)
        return acc

    def gradient_edge(self) -> Edge:
        """The edge a gradient for this tensor travels along (see the seeds)."""
        if self.grad_fn is not None:
            return Edge(self.grad_fn, self._output_nr)
        return Edge(self._get_grad_accumulator(), 0)

    def retain_grad(self) -> None:
        """Keep ``.grad`` for this non-leaf tensor during backward (a no-op on leaves)."""
        if self.grad_fn is None:
            if not self._requires_grad:
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
            return
        if self._retains_grad:
            return
        node = self.grad_fn
        if node._retains_grad_hooks is None:
            node._retains_grad_hooks = {}
        node._retains_grad_hooks[self._output_nr] = weakref.ref(self)
        self._retains_grad = True

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
        """Call ``hook(grad)`` when this tensor's gradient is computed.

        The hook may return a new gradient to use instead. Returns a handle
        whose ``remove()`` unregisters it.

        Raises:
            RuntimeError: if the tensor does not require grad.
        """
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            return self.grad_fn.add_tensor_pre_hook(self._output_nr, hook)
        if self._backward_hooks is None:
            self._backward_hooks = new_hook_dict()
        return add_hook(self._backward_hooks, hook)

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]) -> RemovableHandle:
        """Call ``hook(self)`` each time a backward pass has added into this leaf's ``.grad``.

        The hook sees the sum (``self.grad``) and must return None; ``grad()`` and
        backward passes that do not reach the leaf do not call it. Returns a handle
        whose ``remove()`` unregisters it.

        Raises:
            RuntimeError: if the tensor does not require grad, or is not a leaf.
        """
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            raise RuntimeError(
                "post accumulate grad hooks cannot be registered on non-leaf tensors"
            )
        if self._post_accumulate_grad_hooks is None:
            self._post_accumulate_grad_hooks = new_hook_dict()
        return add_hook(self._post_accumulate_grad_hooks, hook)

    def detach(self) -> Tensor:
        """A new tensor sharing data (and version counter), cut from the graph."""
        out = Tensor._make(self.data, self.device)
        out._version_counter = self._shared_version_counter()
        return out

    def detach_(self) -> Tensor:
        """Cut this tensor from the graph in place; it becomes a leaf.

        Raises:
            RuntimeError: on a view (PyTorch's message): use ``detach()``.
        """
        if self._base is not None:
            raise RuntimeError(ERR_DETACH_VIEW)
        self.grad_fn = None
        self._output_nr = 0
        self._requires_grad = False
        return self

    def backward(
        self,
        gradient: Tensor | None = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
        inputs: Tensor | Sequence[Tensor] | None = None,
    ) -> None:
        """Accumulate the gradient of this tensor into the ``.grad`` of the leaves.

        See :func:`engine.backward`.
        """
        from engine.autograd import backward

        backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    # -- gradient storage helpers used by AccumulateGrad -------------------
    def detach_copy_for_grad(self) -> Tensor:
        """A leaf's first gradient: a copy it owns (a ``CopyBackwards`` under create_graph)."""
        if grad_mode._state.enabled and self._requires_grad:
            from engine.ops.conversion import copy_for_grad

            return copy_for_grad(self)
        return make_tensor(self.data.copy(), self.device)

    def accumulate_grad(self, new_grad: Tensor) -> Tensor:
        """``self + new_grad`` for ``.grad``; in place when no graph is being built.

        In place even when ``.grad`` has a history (a ``CopyBackwards`` left by an earlier
        create_graph backward): PyTorch adds into it too, and keeps its ``grad_fn``.
        """
        if grad_mode._state.enabled:
            return self + new_grad
        self.data += new_grad.data
        self._bump_version()
        return self

    # -- conversion ----------------------------------------------------------
    def numpy(self) -> np.ndarray[Any, Any]:
        """The data as a NumPy array (shared, not copied).

        Raises:
            RuntimeError: if the tensor requires grad, or lives off the CPU.
        """
        if self._requires_grad:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() "
                "instead."
            )
        if self.device.type == "cuda":
            raise TypeError(
                f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to "
                f"copy the tensor to host memory first."
            )
        return self.data

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        array = self.numpy()
        if dtype is not None:
            array = array.astype(dtype)
        return array

    def item(self) -> Any:
        """The value of a one-element tensor as a Python number."""
        if self.data.size != 1:
            raise RuntimeError(
                f"a Tensor with {self.data.size} elements cannot be converted to Scalar"
            )
        return self.data.reshape(()).item()

    def tolist(self) -> Any:
        """The data as (nested) Python lists."""
        return self.data.tolist()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if not np.issubdtype(self.data.dtype, np.integer) or self.data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __bool__(self) -> bool:
        if self.data.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    def __repr__(self) -> str:
        array = self.data if self.device.type != "cuda" else self.data.get()
        array = np.asarray(array)
        integral = not np.issubdtype(array.dtype, np.floating) or bool(
            np.all(np.isfinite(array) & (array == np.round(array)))
        )
        body = np.array2string(
            array,
            precision=4,
            separator=", ",
            prefix="tensor(",
            floatmode="maxprec" if integral else "fixed",
        )
        extras = []
        if self.device is not CPU:
            extras.append(f"device='{self.device}'")
        if self.data.dtype not in (np.float32, np.int64, np.bool_):
            extras.append(f"dtype=engine.{self.data.dtype}")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self._requires_grad:
            extras.append("requires_grad=True")
        if self.name:
            extras.append(f"name={self.name!r}")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"


_new_tensor = object.__new__


def make_tensor(data: Any, device: Device) -> Tensor:
    """A tensor wrapping ``data`` as is: :meth:`Tensor._make` without the method call.

    The fields are :meth:`Tensor._init`'s, written out: this runs once per op.
    """
    t: Tensor = _new_tensor(Tensor)
    t.data = data
    t.device = device
    t.grad_fn = None
    t._requires_grad = False
    t._output_nr = 0
    t._version_counter = None
    t._base = None
    if grad_mode.inference_threads and grad_mode._state.inference:
        t._is_inference = True
    return t
