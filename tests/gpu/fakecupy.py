"""A stand-in for CuPy on the CPU: NumPy underneath, CuPy's strictness on top.

Real CuPy arrays live in GPU memory, so CuPy refuses what would silently copy
them to the host or mix them with host arrays. This module refuses the same:

* ``numpy.asarray(array)`` raises CuPy's ``TypeError`` ("Implicit conversion to
  a NumPy array is not allowed. ..."); only ``array.get()`` and ``asnumpy``
  reach the host.
* An operation mixing an array with a NumPy array raises CuPy's ``TypeError``
  ("Unsupported type <class 'numpy.ndarray'>"), 0-dim ones included: CuPy takes
  Python and NumPy *scalars* as operands, never NumPy arrays. NumPy arrays are
  refused as indices and as assigned values too (stricter than CuPy, which
  copies some of them to the device behind your back).
* Reductions and integer indexing give 0-dim arrays, never NumPy scalars.
* Each thread has a current device (``cuda.Device(i).use()``, or ``with
  cuda.Device(i):``); arrays are made on it, and computing on an array from
  another device raises ``ValueError`` (CuPy without peer access).
* NumPy's ufuncs and functions called on these arrays dispatch here (as they do
  to CuPy, through ``__array_ufunc__`` and ``__array_function__``), or fail.

Stream synchronizations are counted per device (:data:`sync_calls`) so tests
can check that the engine waits for the GPU. Install the module as the
engine's CuPy with the ``fake_cupy`` or ``backend`` fixtures of
``tests/gpu/conftest.py``; :func:`reset` puts its state back.
"""

from __future__ import annotations

import builtins
import threading
import types
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

IMPLICIT_CONVERSION = (
    "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a "
    "NumPy array explicitly."
)
"""CuPy's message when something asks for a NumPy array (``numpy.asarray(cupy_array)``)."""

_SCALARS = (bool, int, float, complex, np.generic)

# -- state ------------------------------------------------------------------------------

_device_count = 1
_thread = threading.local()
_lock = threading.Lock()

sync_calls: Counter[int] = Counter()
"""How many times each device's current stream was synchronized."""
sync_threads: list[str] = []
"""The thread that synchronized, once per synchronization."""


def reset(device_count: int = 1) -> None:
    """Forget every count and set how many GPUs exist (0: CuPy finds no GPU)."""
    global _device_count
    _device_count = device_count
    with _lock:
        sync_calls.clear()
        sync_threads.clear()
    _thread.__dict__.clear()


def current_device_id() -> int:
    """The id of this thread's current device (0 until ``Device(i).use()``)."""
    return getattr(_thread, "device", 0)


class CUDARuntimeError(RuntimeError):
    """CuPy's ``cupy_backends.cuda.api.runtime.CUDARuntimeError``."""


def _record_sync(device_id: int) -> None:
    with _lock:
        sync_calls[device_id] += 1
        sync_threads.append(threading.current_thread().name)


# -- conversions --------------------------------------------------------------------------


def _unsupported(value: Any) -> TypeError:
    return TypeError(f"Unsupported type {type(value)}")


def _on_current_device(array: ndarray) -> np.ndarray:
    current = current_device_id()
    if array._device != current:
        raise ValueError(
            f"The device where the array resides ({array._device}) is different from the current "
            f"device ({current}). Peer access is unavailable between these devices."
        )
    return array._a


def _operand(value: Any) -> Any:
    """An operand of a kernel: a device array (on the current device) or a scalar."""
    if isinstance(value, ndarray):
        return _on_current_device(value)
    if isinstance(value, _SCALARS):
        return value
    raise _unsupported(value)


def _operands(value: Any) -> Any:
    """Like :func:`_operand` through lists and tuples (``concatenate([a, b])``); other
    arguments (axes, shapes, dtypes, ``None``) pass unchanged."""
    if isinstance(value, ndarray):
        return _on_current_device(value)
    if isinstance(value, list | tuple):
        return type(value)(_operands(v) for v in value)
    if isinstance(value, np.ndarray):
        raise _unsupported(value)
    return value


def _index(key: Any) -> Any:
    """An index of a device array: ints, slices, ``None``, ``...``, lists and device arrays."""
    if isinstance(key, tuple):
        return tuple(_index(k) for k in key)
    if isinstance(key, ndarray):
        return _on_current_device(key)
    if isinstance(key, np.ndarray):
        raise TypeError(
            f"Unsupported type {type(key)} as an index of a device array: move the index to the "
            f"device first (cupy.asarray)"
        )
    return key


def _wrap(result: Any, device: int | None = None) -> Any:
    """Results as device arrays: NumPy scalars become 0-dim arrays, as CuPy returns."""
    if isinstance(result, tuple):
        return tuple(_wrap(r, device) for r in result)
    if isinstance(result, np.generic):
        result = np.asarray(result)
    if isinstance(result, np.ndarray):
        out = object.__new__(ndarray)
        out._a = result
        out._device = current_device_id() if device is None else device
        return out
    return result


def _host(value: Any) -> np.ndarray:
    """Host data to copy to the device (``asarray``/``array`` of NumPy data, lists, scalars)."""
    if isinstance(value, list | tuple) and builtins.any(isinstance(v, ndarray) for v in value):
        return np.stack([_host(v) for v in value])
    if isinstance(value, ndarray):
        return value._a
    return np.asarray(value)


# -- the array ----------------------------------------------------------------------------


class _Flags:
    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, a: np.ndarray) -> None:
        self.c_contiguous = bool(a.flags.c_contiguous)
        self.f_contiguous = bool(a.flags.f_contiguous)
        self.owndata = bool(a.flags.owndata)


class MemoryPointer:
    """``ndarray.data``: where the array starts in (here, host) memory."""

    __slots__ = ("device_id", "ptr")

    def __init__(self, ptr: int, device_id: int) -> None:
        self.ptr = ptr
        self.device_id = device_id


def _binary(ufunc: np.ufunc, reflected: bool = False) -> Callable[[ndarray, Any], Any]:
    def operator(self: ndarray, other: Any) -> Any:
        a, b = (other, self) if reflected else (self, other)
        with np.errstate(all="ignore"):
            return _wrap(ufunc(_operand(a), _operand(b)))

    return operator


def _inplace(ufunc: np.ufunc) -> Callable[[ndarray, Any], ndarray]:
    def operator(self: ndarray, other: Any) -> ndarray:
        target = _on_current_device(self)
        with np.errstate(all="ignore"):
            ufunc(target, _operand(other), out=target)
        return self

    return operator


def _unary(ufunc: np.ufunc) -> Callable[[ndarray], Any]:
    def operator(self: ndarray) -> Any:
        with np.errstate(all="ignore"):
            return _wrap(ufunc(_on_current_device(self)))

    return operator


def _kernel_method(name: str) -> Callable[..., Any]:
    """A method that computes (a kernel on the current device): ``sum``, ``max``, ..."""

    def method(self: ndarray, *args: Any, **kwargs: Any) -> Any:
        array = _on_current_device(self)
        args = _operands(args)
        kwargs = {k: _operands(v) for k, v in kwargs.items()}
        with np.errstate(all="ignore"):
            return _wrap(getattr(array, name)(*args, **kwargs))

    method.__name__ = name
    return method


def _view_method(name: str) -> Callable[..., Any]:
    """A method that only re-describes memory (no kernel): ``reshape``, ``transpose``, ..."""

    def method(self: ndarray, *args: Any, **kwargs: Any) -> Any:
        return _wrap(getattr(self._a, name)(*args, **kwargs), self._device)

    method.__name__ = name
    return method


class ndarray:
    """An array "on a GPU": a NumPy array that refuses to be mixed with host data."""

    __slots__ = ("__weakref__", "_a", "_device")
    _a: np.ndarray
    _device: int

    def __init__(self, shape: Any, dtype: Any = float) -> None:
        self._a = np.empty(shape, dtype)
        self._device = current_device_id()

    # -- what it is
    @property
    def shape(self) -> tuple[int, ...]:
        return self._a.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._a.dtype

    @property
    def ndim(self) -> int:
        return self._a.ndim

    @property
    def size(self) -> int:
        return self._a.size

    @property
    def strides(self) -> tuple[int, ...]:
        return self._a.strides

    @property
    def itemsize(self) -> int:
        return self._a.itemsize

    @property
    def nbytes(self) -> int:
        return self._a.nbytes

    @property
    def flags(self) -> _Flags:
        return _Flags(self._a)

    @property
    def device(self) -> Device:
        return Device(self._device)

    @property
    def data(self) -> MemoryPointer:
        return MemoryPointer(int(self._a.__array_interface__["data"][0]), self._device)

    @property
    def T(self) -> ndarray:
        return _wrap(self._a.T, self._device)

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self) -> Iterator[ndarray]:
        if self._a.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        for i in range(len(self._a)):
            yield self[i]

    # -- leaving the device
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError(IMPLICIT_CONVERSION)

    def get(self, stream: Any = None, out: Any = None) -> np.ndarray:
        """A NumPy copy on the host."""
        return self._a.copy()

    def set(self, array: np.ndarray, stream: Any = None) -> None:
        """Copy host data in (same shape)."""
        if not isinstance(array, np.ndarray) or array.shape != self.shape:
            raise ValueError("Shape mismatch: set() needs a numpy.ndarray of the same shape")
        self._a[...] = array

    def item(self) -> Any:
        return self._a.item()

    def tolist(self) -> Any:
        return self._a.tolist()

    def _scalar(self) -> Any:
        if self._a.size != 1:
            raise TypeError("only length-1 arrays can be converted to Python scalars")
        return self._a.reshape(()).item()

    def __bool__(self) -> bool:
        if self._a.size != 1:
            raise ValueError(
                "The truth value of an array with more than one element is ambiguous. "
                "Use a.any() or a.all()"
            )
        return bool(self._scalar())

    def __int__(self) -> int:
        return int(self._scalar())

    def __float__(self) -> float:
        return float(self._scalar())

    def __complex__(self) -> complex:
        return complex(self._scalar())

    def __repr__(self) -> str:
        return repr(self._a)

    def __str__(self) -> str:
        return str(self._a)

    # -- NumPy's protocols: dispatch here, or fail as CuPy does
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        mine = _UFUNCS.get(ufunc.__name__)
        if mine is None:
            return NotImplemented
        if method == "__call__":
            return mine(*inputs, **kwargs)
        if method == "at":
            return mine.at(*inputs, **kwargs)
        return NotImplemented

    def __array_function__(
        self, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        mine = globals().get(func.__name__)
        if mine is None or mine is func or not callable(mine) or func.__name__.startswith("_"):
            return NotImplemented
        return mine(*args, **kwargs)

    # -- indexing
    def __getitem__(self, key: Any) -> ndarray:
        key = _index(key)
        result = self._a[key]
        if isinstance(result, np.generic):
            # Every dimension taken by an int: CuPy gives a 0-dim view, NumPy a scalar copy.
            result = self._a[(*(key if isinstance(key, tuple) else (key,)), Ellipsis)]
        return _wrap(result, self._device)

    def __setitem__(self, key: Any, value: Any) -> None:
        target = _on_current_device(self)
        with np.errstate(all="ignore"):
            target[_index(key)] = _operand(value)

    # -- conversions and copies
    def astype(self, dtype: Any, order: str = "K", casting: Any = None, copy: bool = True) -> Any:
        """A cast (or copy) made by a kernel on the current device, as CuPy does."""
        if not copy and np.dtype(dtype) == self.dtype:
            return self
        return _wrap(_on_current_device(self).astype(dtype, order=order))

    def copy(self, order: str = "C") -> ndarray:
        """A copy on the current device, from any device (CuPy copies between devices)."""
        return _wrap(self._a.copy(order=order))

    def fill(self, value: Any) -> None:
        _on_current_device(self).fill(_operand(value))

    reshape = _view_method("reshape")
    transpose = _view_method("transpose")
    swapaxes = _view_method("swapaxes")
    squeeze = _view_method("squeeze")
    ravel = _view_method("ravel")
    view = _view_method("view")
    diagonal = _view_method("diagonal")
    flatten = _kernel_method("flatten")
    sum = _kernel_method("sum")
    prod = _kernel_method("prod")
    mean = _kernel_method("mean")
    var = _kernel_method("var")
    std = _kernel_method("std")
    max = _kernel_method("max")
    min = _kernel_method("min")
    argmax = _kernel_method("argmax")
    argmin = _kernel_method("argmin")
    any = _kernel_method("any")
    all = _kernel_method("all")
    cumsum = _kernel_method("cumsum")
    clip = _kernel_method("clip")
    round = _kernel_method("round")
    dot = _kernel_method("dot")
    nonzero = _kernel_method("nonzero")
    conj = _kernel_method("conj")

    # -- arithmetic
    __add__ = _binary(np.add)
    __radd__ = _binary(np.add, reflected=True)
    __sub__ = _binary(np.subtract)
    __rsub__ = _binary(np.subtract, reflected=True)
    __mul__ = _binary(np.multiply)
    __rmul__ = _binary(np.multiply, reflected=True)
    __truediv__ = _binary(np.true_divide)
    __rtruediv__ = _binary(np.true_divide, reflected=True)
    __floordiv__ = _binary(np.floor_divide)
    __rfloordiv__ = _binary(np.floor_divide, reflected=True)
    __mod__ = _binary(np.remainder)
    __rmod__ = _binary(np.remainder, reflected=True)
    __pow__ = _binary(np.power)
    __rpow__ = _binary(np.power, reflected=True)
    __matmul__ = _binary(np.matmul)
    __rmatmul__ = _binary(np.matmul, reflected=True)
    __and__ = _binary(np.bitwise_and)
    __rand__ = _binary(np.bitwise_and, reflected=True)
    __or__ = _binary(np.bitwise_or)
    __ror__ = _binary(np.bitwise_or, reflected=True)
    __xor__ = _binary(np.bitwise_xor)
    __rxor__ = _binary(np.bitwise_xor, reflected=True)
    __eq__ = _binary(np.equal)
    __ne__ = _binary(np.not_equal)
    __lt__ = _binary(np.less)
    __le__ = _binary(np.less_equal)
    __gt__ = _binary(np.greater)
    __ge__ = _binary(np.greater_equal)
    __hash__ = None
    __iadd__ = _inplace(np.add)
    __isub__ = _inplace(np.subtract)
    __imul__ = _inplace(np.multiply)
    __itruediv__ = _inplace(np.true_divide)
    __ipow__ = _inplace(np.power)
    __iand__ = _inplace(np.bitwise_and)
    __ior__ = _inplace(np.bitwise_or)
    __neg__ = _unary(np.negative)
    __pos__ = _unary(np.positive)
    __abs__ = _unary(np.absolute)
    __invert__ = _unary(np.invert)


# -- ufuncs -------------------------------------------------------------------------------


class ufunc:
    """A CuPy ufunc: NumPy's, on device arrays and scalars only."""

    def __init__(self, numpy_ufunc: np.ufunc) -> None:
        self._ufunc = numpy_ufunc
        self.__name__ = numpy_ufunc.__name__
        self.nin = numpy_ufunc.nin
        self.nout = numpy_ufunc.nout

    def __call__(self, *args: Any, out: Any = None, dtype: Any = None, **kwargs: Any) -> Any:
        operands = [_operand(a) for a in args]
        if dtype is not None:
            kwargs["dtype"] = dtype
        with np.errstate(all="ignore"):
            if out is None:
                return _wrap(self._ufunc(*operands, **kwargs))
            if not isinstance(out, ndarray):
                raise TypeError(f"out must be a cupy.ndarray, got {type(out)}")
            self._ufunc(*operands, out=_on_current_device(out), **kwargs)
            return out

    def at(self, a: ndarray, indices: Any, b: Any = None) -> None:
        """In place at ``indices``, repeated indices applying again (``add.at`` adds up)."""
        target = _on_current_device(a)
        with np.errstate(all="ignore"):
            if b is None:
                self._ufunc.at(target, _index(indices))
            else:
                self._ufunc.at(target, _index(indices), _operand(b))

    def __repr__(self) -> str:
        return f"<ufunc '{self.__name__}'>"


_UFUNC_NAMES = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "true_divide",
    "floor_divide",
    "remainder",
    "power",
    "negative",
    "positive",
    "absolute",
    "sign",
    "exp",
    "exp2",
    "log",
    "log2",
    "log10",
    "log1p",
    "expm1",
    "sqrt",
    "square",
    "reciprocal",
    "sin",
    "cos",
    "tan",
    "arcsin",
    "arccos",
    "arctan",
    "arctan2",
    "sinh",
    "cosh",
    "tanh",
    "floor",
    "ceil",
    "trunc",
    "rint",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "invert",
    "isnan",
    "isinf",
    "isfinite",
    "signbit",
    "copysign",
    "matmul",
]
_UFUNCS: dict[str, ufunc] = {name: ufunc(getattr(np, name)) for name in _UFUNC_NAMES}
globals().update(_UFUNCS)
abs = _UFUNCS["absolute"]


# -- functions ----------------------------------------------------------------------------


def _function(numpy_function: Callable[..., Any]) -> Callable[..., Any]:
    """A function computing on device arrays (refusing NumPy arrays), giving device arrays."""

    def function(*args: Any, **kwargs: Any) -> Any:
        args = _operands(args)
        kwargs = {k: _operands(v) for k, v in kwargs.items()}
        with np.errstate(all="ignore"):
            return _wrap(numpy_function(*args, **kwargs))

    function.__name__ = numpy_function.__name__
    return function


_FUNCTION_NAMES = [
    "where",
    "sum",
    "prod",
    "mean",
    "var",
    "std",
    "amax",
    "amin",
    "max",
    "min",
    "argmax",
    "argmin",
    "all",
    "any",
    "count_nonzero",
    "take_along_axis",
    "take",
    "expand_dims",
    "squeeze",
    "reshape",
    "ravel",
    "transpose",
    "swapaxes",
    "moveaxis",
    "broadcast_to",
    "broadcast_arrays",
    "concatenate",
    "stack",
    "dot",
    "tensordot",
    "outer",
    "nonzero",
    "argwhere",
    "clip",
    "sort",
    "argsort",
    "cumsum",
    "cumprod",
    "tile",
    "diag",
    "tril",
    "triu",
    "flip",
    "allclose",
    "isclose",
    "array_equal",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "may_share_memory",
    "shares_memory",
]
globals().update({name: _function(getattr(np, name)) for name in _FUNCTION_NAMES})


def _creation(numpy_function: Callable[..., Any]) -> Callable[..., Any]:
    def function(*args: Any, **kwargs: Any) -> ndarray:
        return _wrap(np.asarray(numpy_function(*args, **kwargs)))

    function.__name__ = numpy_function.__name__
    return function


zeros = _creation(np.zeros)
ones = _creation(np.ones)
empty = _creation(np.empty)
full = _creation(np.full)
arange = _creation(np.arange)
linspace = _creation(np.linspace)
eye = _creation(np.eye)
identity = _creation(np.identity)


def array(obj: Any, dtype: Any = None, copy: bool = True, order: str = "K", ndmin: int = 0) -> Any:
    """A new device array from device or host data (host data is copied to the device)."""
    if isinstance(obj, ndarray):
        if not copy and (dtype is None or np.dtype(dtype) == obj.dtype):
            return obj
        return _wrap(np.array(obj._a, dtype=dtype, copy=True, order=order, ndmin=ndmin))
    return _wrap(np.array(_host(obj), dtype=dtype, copy=True, order=order, ndmin=ndmin))


def asarray(obj: Any, dtype: Any = None, order: Any = None) -> Any:
    """``obj`` itself when it is a device array of ``dtype``, else a device copy of it."""
    if isinstance(obj, ndarray):
        if dtype is None or np.dtype(dtype) == obj.dtype:
            return obj
        return obj.astype(dtype)
    return _wrap(np.array(_host(obj), dtype=dtype, copy=True))


def ascontiguousarray(a: Any, dtype: Any = None) -> Any:
    if isinstance(a, ndarray) and a._a.flags.c_contiguous and dtype in (None, a.dtype):
        return a
    return _wrap(np.ascontiguousarray(_host(a), dtype=dtype))


def asnumpy(a: Any, stream: Any = None, order: str = "C", out: Any = None) -> np.ndarray:
    """A host (NumPy) copy of a device array; host data is returned as a NumPy array."""
    if isinstance(a, ndarray):
        return a._a.copy()
    return np.asarray(a)


def get_array_module(*args: Any) -> types.ModuleType:
    """This module if any argument is a device array, else NumPy."""
    import sys

    if builtins.any(isinstance(a, ndarray) for a in args):
        return sys.modules[__name__]
    return np


def isscalar(value: Any) -> bool:
    return bool(np.isscalar(value))


def _dtype_of(value: Any) -> Any:
    return value.dtype if isinstance(value, ndarray) else value


def can_cast(from_: Any, to: Any, casting: str = "safe") -> bool:
    return bool(np.can_cast(_dtype_of(from_), to, casting))


def result_type(*arrays_and_dtypes: Any) -> np.dtype[Any]:
    return np.result_type(*(_dtype_of(a) for a in arrays_and_dtypes))


dtype = np.dtype
finfo = np.finfo
iinfo = np.iinfo
float16 = np.float16
float32 = np.float32
float64 = np.float64
complex64 = np.complex64
complex128 = np.complex128
int8 = np.int8
int16 = np.int16
int32 = np.int32
int64 = np.int64
uint8 = np.uint8
uint32 = np.uint32
uint64 = np.uint64
bool_ = np.bool_
newaxis = None
inf = np.inf
nan = np.nan
pi = np.pi
e = np.e


# -- cuda ---------------------------------------------------------------------------------


class Device:
    """``cupy.cuda.Device``: a GPU by id; ``use()`` or ``with`` makes it this thread's current."""

    def __init__(self, device: Any = None) -> None:
        self.id = current_device_id() if device is None else int(device)

    def _check(self) -> None:
        if not 0 <= self.id < _device_count:
            raise CUDARuntimeError("cudaErrorInvalidDevice: invalid device ordinal")

    def use(self) -> None:
        self._check()
        _thread.device = self.id

    def __enter__(self) -> Device:
        self._check()
        stack = _thread.__dict__.setdefault("stack", [])
        stack.append(current_device_id())
        _thread.device = self.id
        return self

    def __exit__(self, *exc: object) -> None:
        _thread.device = _thread.stack.pop()

    def synchronize(self) -> None:
        _record_sync(self.id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id}>"


class Stream:
    """A CUDA stream of one device; ``synchronize()`` is counted in :data:`sync_calls`."""

    def __init__(self, device_id: int | None = None) -> None:
        self.device_id = current_device_id() if device_id is None else device_id

    def synchronize(self) -> None:
        _record_sync(self.device_id)


def _get_device_count() -> int:
    if _device_count == 0:
        raise CUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
    return _device_count


def _get_current_stream(device_id: int | None = None) -> Stream:
    return Stream(device_id)


runtime = types.SimpleNamespace(getDeviceCount=_get_device_count, CUDARuntimeError=CUDARuntimeError)
cuda = types.SimpleNamespace(
    Device=Device,
    Stream=Stream,
    runtime=runtime,
    get_current_stream=_get_current_stream,
    is_available=lambda: _device_count > 0,
)


# -- random -------------------------------------------------------------------------------


class _Generator:
    def __init__(self, seed: Any = None) -> None:
        self._rng = np.random.default_rng(seed)

    def standard_normal(self, size: Any = None, dtype: Any = np.float64) -> ndarray:
        return _wrap(np.asarray(self._rng.standard_normal(size, dtype=dtype)))

    def random(self, size: Any = None, dtype: Any = np.float64) -> ndarray:
        return _wrap(np.asarray(self._rng.random(size, dtype=dtype)))

    def integers(self, low: int, high: int | None = None, size: Any = None) -> ndarray:
        return _wrap(np.asarray(self._rng.integers(low, high, size)))


_global_rng = _Generator()


def _seed(seed: Any = None) -> None:
    _global_rng._rng = np.random.default_rng(seed)


random = types.SimpleNamespace(
    default_rng=_Generator,
    seed=_seed,
    standard_normal=_global_rng.standard_normal,
    random=lambda size=None, dtype=np.float64: _global_rng.random(size, dtype),
    rand=lambda *shape: _global_rng.random(shape),
    randn=lambda *shape: _global_rng.standard_normal(shape),
    randint=lambda low, high=None, size=None: _global_rng.integers(low, high, size),
)
