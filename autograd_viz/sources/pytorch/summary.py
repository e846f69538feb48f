"""Tensor summaries of PyTorch tensors, taken without holding the tensor.

The engine's :class:`~engine.events.LazySummary` holds a weak reference to a
NumPy array; :class:`TorchSummary` is one for a ``torch.Tensor``, which resolves itself
(tensors support weak references). Listeners resolve summaries inside their
callback, while PyTorch still holds the gradient; a weak reference never keeps
a gradient alive, so ``AccumulateGrad`` still steals the buffer it would steal
without us (see the field notes on keeping references to gradients).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings
import weakref
from typing import Any

import torch

from autograd_viz.sources.deferred import DeferredSummary, defer
from autograd_viz.sources.once import program_stacklevel
from autograd_viz.sources.pytorch.held import held_summary
from autograd_viz.sources.pytorch.held import hold as held_tensor
from autograd_viz.sources.pytorch.host_view import FreedStorageError, host_view
from autograd_viz.sources.summaries import summarize
from autograd_viz.trace.summary import TensorSummary
from engine.events import LazySummary

_DTYPE_NAMES: dict[torch.dtype, str] = {}
_MAX_INDEX = sys.maxsize


def dtype_name(dtype: torch.dtype) -> str:
    """NumPy's name for a torch dtype where NumPy has one (``float32``), else torch's."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


_WIDENED = frozenset({torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2})
"""Dtypes NumPy lacks: their statistics are taken in ``float32``."""

LARGE = 1 << 14
"""Elements from which statistics are computed by PyTorch itself, where the tensor lives."""


def summarize_tensor(
    tensor: torch.Tensor, device: str, max_values: int = 0, hold: bool = False
) -> TensorSummary:
    """The :class:`~autograd_viz.trace.summary.TensorSummary` of a tensor, computed now.

    Small tensors are summarized by :func:`autograd_viz.sources.summaries.summarize` on a NumPy
    view (a host copy for a device tensor), so NaN and Inf are counted the
    same way as for our engine. Mid-size floating-point tensors are copied
    and summarized later, many at once (Note [Deferred summaries] in
    :mod:`autograd_viz.sources.deferred`). Large floating-point tensors are
    reduced by PyTorch where they live (Note [Summaries of large tensors]). Dtypes NumPy lacks
    (``bfloat16``) are widened to ``float32``; the summary keeps the tensor's
    own dtype. A jagged nested tensor is summarized by its packed values.
    Tensors that have no plain strided values (sparse, complex, meta, fake,
    functorch wrappers, subclasses) get shape, dtype and device only (Note
    [Tensors without values]).

    Args:
        tensor: the tensor; it is read through ``detach()`` (so nothing records a
            graph, even under ``create_graph``) and never kept.
        device: the device name to record.
        max_values: keep the flattened values up to this many elements.
        hold: a mid-size float tensor may be held until the watched call ends
            instead of copied (Note [Held gradients] in ``held.py``); the
            caller vouches that nothing will change it meanwhile.

    Returns:
        The summary; shape, dtype and device only if the values cannot be read
        (a tensor subclass), since a listener must never fail on one.
    """
    kind = tensor.dtype
    dtype = _DTYPE_NAMES.get(kind) or dtype_name(kind)
    if (
        type(tensor) is _Tensor
        and kind in _FLOATS
        and tensor.is_cpu
        and tensor.layout is _STRIDED
        and not tensor.is_nested
    ):
        # The common case, a CPU float gradient of a few hundred or thousand elements,
        # in straight-line code: it is summarized several times per node.
        count = tensor.numel()
        if _SMALL < count < LARGE and count > max_values:
            if tensor.requires_grad:
                if hold and tensor.is_leaf:
                    hold = False  # a parameter: an optimizer in a hook may step it meanwhile
                tensor = tensor.detach()
            if hold and not tensor.is_neg():
                return held_tensor(tensor, tuple(tensor.shape), dtype, device)
            try:
                array = host_view(tensor)  # Note [Reading a storage without pinning it]
            except RuntimeError:  # a negative view, a freed storage: the general path
                pass
            else:
                return defer(array, tuple(tensor.shape), dtype, device)  # Note [Deferred summaries]
    try:
        if tensor.is_nested:
            return _summarize_nested(tensor, dtype, device, max_values)
        shape = plain_shape(tensor.shape)
        if (
            not has_values(tensor)
            or tensor.layout is not _STRIDED
            or tensor.is_complex()
            or tensor.device.type == "meta"
        ):
            return TensorSummary(shape, dtype, device)
        return _summarize_values(tensor.detach(), shape, dtype, device, max_values)
    except Exception:  # noqa: BLE001 - a tensor we cannot read: describe, never fail
        try:
            return TensorSummary(plain_shape(tensor.shape), dtype, device)
        except Exception:  # noqa: BLE001 - not even a shape (a strided nested tensor)
            return TensorSummary((), dtype, device)


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def has_values(tensor: torch.Tensor) -> bool:
    """Whether the bridge reads a tensor's values (Note [Tensors without values]).

    Only a plain ``torch.Tensor`` (or ``Parameter``) that is not a functorch
    wrapper is read; reading anything else runs code of its own.
    """
    if type(tensor) not in _PLAIN:
        _say_without_values(tensor)
        return False
    return not _is_functorch_wrapper(tensor)


_is_functorch_wrapper = torch._C._functorch.is_functorch_wrapped_tensor

# Note [Tensors without values]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Reading a tensor's values (a sum, a copy to NumPy) dispatches ops on it. On a
# plain tensor that is what it seems; on anything else it runs somebody's code:
# a FakeTensor or a meta tensor has no values (the fake one raises
# DataDependentOutputException, and PyTorch logs it), a functorch wrapper
# (torch.func.grad, vmap) has no storage, and a subclass's __torch_dispatch__
# may do anything. Those are summarized by shape, dtype and device only:
# "values not available" in the trace, never an error. A subclass that is not
# one of PyTorch's own is said once per type, in one line, since the user may
# expect its numbers; its plain inner tensors are still read where they are
# the gradients. A dimension that is not one number (a jagged nested tensor's
# ragged dimension) is written as 0.

_SAID: set[type] = set()


def _say_without_values(tensor: torch.Tensor) -> None:
    kind = type(tensor)
    if kind in _SAID:
        return
    _SAID.add(kind)
    module = kind.__module__ or ""
    if module.startswith("torch."):
        return  # PyTorch's own (fake, functional, nested): no values by design
    warnings.warn(
        f"autograd-viz: tensors of type {kind.__qualname__} are recorded without values "
        "(shape, dtype and device only): reading them would run their own code",
        RuntimeWarning,
        stacklevel=program_stacklevel(),
    )


def plain_shape(shape: Any) -> tuple[int, ...]:
    """A shape as ints; a dimension that is not one number (ragged, symbolic) as 0."""
    dims = tuple(shape)
    for dim in dims:
        if type(dim) is not int:
            return tuple([_plain_dim(d) for d in dims])
    return dims


def _plain_dim(dim: Any) -> int:
    if type(dim) is int:
        return dim
    try:
        return int(dim)
    except Exception:  # noqa: BLE001 - a nested int has no value
        return 0


def summary_shape(tensor: torch.Tensor) -> tuple[int, ...]:
    """The shape a summary of ``tensor`` records: its packed values' for a jagged nested one."""
    if tensor.is_nested:
        try:
            return plain_shape(tensor.detach().values().shape)
        except Exception:  # noqa: BLE001 - a strided nested tensor has no one shape
            return ()
    return plain_shape(tensor.shape)


def _summarize_nested(
    tensor: torch.Tensor, dtype: str, device: str, max_values: int
) -> TensorSummary:
    """A jagged nested tensor is summarized by its packed values (``values()``)."""
    values = tensor.detach().values()  # raises for a strided nested tensor: described by dtype only
    return summarize_tensor(values, device, max_values)


_Tensor = torch.Tensor
_STRIDED = torch.strided


def _summarize_values(
    values: torch.Tensor, shape: tuple[int, ...], dtype: str, device: str, max_values: int
) -> TensorSummary:
    count = values.numel()
    if count and not values.data_ptr():
        # A storage FSDP2 freed (resize_(0)): any read would crash PyTorch itself.
        raise FreedStorageError("the tensor's storage has been freed")
    if count >= LARGE and count > max_values and values.is_floating_point():
        return _summarize_large(values, shape, dtype, device)
    if values.dtype in _WIDENED:
        values = values.float()
    if not values.is_cpu:
        values = values.cpu()
    try:
        array = host_view(values)  # Note [Reading a storage without pinning it]
    except RuntimeError:  # a conjugate or negative view: resolved, it is a copy of our own
        array = values.resolve_conj().resolve_neg().numpy()
    if count > _SMALL and count > max_values and array.dtype.kind == "f":
        return defer(array, shape, dtype, device)  # Note [Deferred summaries]
    summary = summarize(array, device, max_values)
    if summary.dtype != dtype:
        summary = dataclasses.replace(summary, dtype=dtype)
    return summary


_SMALL = 64
"""Up to this many elements :func:`~autograd_viz.sources.summaries.summarize` is fastest
(and remembers)."""


_FLOATS = frozenset({torch.float16, torch.float32, torch.float64})


# Note [Summaries of large tensors]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A gradient of a 1024-wide layer has a million elements; NumPy's float64
# passes over it cost milliseconds per summary, and a recorded backward makes
# several per node. PyTorch's own reductions are faster, and run where the
# tensor lives (no host copy of a CUDA tensor): the sum first (PyTorch's
# cascade summation, accurate without a float64 copy, which costs thirty
# times more here), finite exactly when no element is NaN or Inf, so the
# counts cost nothing in the common case; minimum and maximum exact in the
# tensor's dtype (NumPy's on the CPU, twice as fast as ``aminmax`` here); the
# norm by ``vector_norm`` on another device, and on the CPU as the square
# root of the tensor's dot product with itself over its memory (``torch.dot``,
# BLAS's several float32 accumulators: 13 µs against ``vector_norm``'s 24 for
# 256×1024 floats here, and ten times nearer the float64 norm, about 1e-7
# against 1e-6; a tensor whose memory is not dense keeps ``vector_norm``; both
# overflow to Inf alike). Half-precision tensors are widened to float32
# first. The numbers equal NumPy's float64 ones up to float32 rounding.
#
# Measured again on this machine (torch 2.13, one thread, a million float32):
# ``sum(dtype=torch.float64)`` and ``vector_norm(dtype=torch.float64)`` take
# 1.06 and 0.88 ms against 0.19 and 0.18 in float32, since ATen widens the
# input of a CPU reduction into a full copy when its accumulation dtype
# differs, and widening it in cache-sized pieces costs 1.1 ms; ``aminmax``
# takes 0.31-0.33 ms against 0.38 for NumPy's two passes on a contiguous
# million, but 0.15 against 0.11 at 256×1024, and five times NumPy's on a
# transposed weight gradient. So the CPU path stays as it is. On another
# device the four numbers come back in one transfer (``tolist`` of the
# stacked results): one synchronization per summary instead of three, and a
# second only when there is a NaN or an Inf to count.
#
# A CPU tensor of four pieces or more (a piece: 2**18 elements, a megabyte
# of float32) is summarized a piece at a time: its four passes then read the
# piece from the cache, not from memory, and one pass over memory is left
# (``_in_pieces``). The minimum and maximum are the same numbers; the sum and
# the norm gather the pieces' float32 ones in float64, so they differ from
# the whole tensor's in the last bits, and are nearer the float64 ones (a
# float32 norm of a million elements is about 1.3e-5 off, the pieces' 2e-6).
# A transposed gradient is summarized through a flat view of its memory. Per
# summary, on this machine with one thread, whole → pieces: a 1024×1024
# 0.62 → 0.46-0.47 ms, its transpose 0.63-0.64 → 0.47-0.49, a 4096×1024
# 2.72-2.80 → 1.87-1.93; a 512×1024 (two pieces) gained nothing, 0.19-0.21
# either way, hence four. With the norm by ``dot`` (whole tensors and pieces):
# 256×1024 0.100 → 0.069 ms, 1024×1024 0.51 → 0.46, 4096×1024 2.04 → 1.76.


def _summarize_large(
    values: torch.Tensor, shape: tuple[int, ...], dtype: str, device: str
) -> TensorSummary:
    if values.element_size() < 4:
        values = values.float()
    if values.device.type != "cpu":
        return _summarize_on_device(values, shape, dtype, device)
    count = values.numel()
    flat = _dense_flat(values)
    if flat is not None and count >= 4 * _PIECE:
        found = _in_pieces(flat)
        if found is not None:
            low, high, total, norm = found
            return TensorSummary(shape, dtype, device, low, high, total / count, norm)
        return _with_counts(values, shape, dtype, device, float(values.sum()))
    # Over the flat view where there is one: every tensor over the same memory sums alike.
    total = float(values.sum() if flat is None else flat.sum())
    if math.isfinite(total):
        array = host_view(values)
        low, high = float(array.min()), float(array.max())
        if flat is not None:
            norm = math.sqrt(float(_dot(flat, flat)))
        else:
            norm = float(torch.linalg.vector_norm(values))
        return TensorSummary(shape, dtype, device, low, high, total / count, norm)
    return _with_counts(values, shape, dtype, device, total)


_dot = torch.dot

_PIECE = 1 << 18
"""Elements of a piece of a large CPU tensor summarized piece by piece (1 MB of float32: it
stays in this machine's cache for the four passes); tensors of fewer than four pieces are
summarized whole (Note [Summaries of large tensors])."""


def _dense_flat(values: torch.Tensor) -> torch.Tensor | None:
    """Every element of ``values`` once, as a flat view of its memory (``None``: not dense).

    A transposed gradient is as good as a contiguous one: reductions over every element do
    not mind their order.
    """
    if values.is_contiguous():
        return values.view(-1)
    strides = values.stride()
    order = sorted(range(values.dim()), key=lambda d: -strides[d])
    laid = values.permute(order)
    return laid.view(-1) if laid.is_contiguous() else None


def _in_pieces(flat: torch.Tensor) -> tuple[float, float, float, float] | None:
    """Minimum, maximum, sum and norm of a large CPU tensor, a cache-sized piece at a time.

    ``None`` when a piece is not finite (a NaN, an Inf, or a sum that overflowed): counted
    then by the path that counts. Minimum and maximum are exact; the sum and the norm gather
    the pieces' float32 ones in float64.
    """
    total = squares = 0.0
    low, high = math.inf, -math.inf
    for piece in flat.split(_PIECE):
        part = float(piece.sum())
        if not math.isfinite(part):
            return None
        total += part
        squares += float(_dot(piece, piece))
        array = host_view(piece)
        piece_low, piece_high = float(array.min()), float(array.max())
        low = min(low, piece_low)
        high = max(high, piece_high)
    return low, high, total, math.sqrt(squares)


def _summarize_on_device(
    values: torch.Tensor, shape: tuple[int, ...], dtype: str, device: str
) -> TensorSummary:
    """:func:`_summarize_large` where the tensor lives, its numbers brought back at once."""
    low, high = torch.aminmax(values)
    stats = torch.stack((low, high, values.sum(), torch.linalg.vector_norm(values)))
    low_, high_, total, norm = stats.tolist()  # one synchronization for the four
    if math.isfinite(low_) and math.isfinite(high_) and math.isfinite(total):
        return TensorSummary(shape, dtype, device, low_, high_, total / values.numel(), norm)
    return _with_counts(values, shape, dtype, device, total)


def _with_counts(
    values: torch.Tensor, shape: tuple[int, ...], dtype: str, device: str, total: float
) -> TensorSummary:
    """The summary of a large tensor with a NaN or an Inf (or a sum that overflowed)."""
    nan_count, inf_count = torch.stack((values.isnan().sum(), values.isinf().sum())).tolist()
    if nan_count:
        nan = math.nan
        return TensorSummary(shape, dtype, device, nan, nan, nan, nan, nan_count, inf_count)
    low_t, high_t = torch.aminmax(values)
    return TensorSummary(
        shape,
        dtype,
        device,
        float(low_t),
        float(high_t),
        total / values.numel(),
        math.inf,
        0,
        inf_count,
    )


class TorchSummary(LazySummary):
    """A :class:`~engine.events.LazySummary` of a ``torch.Tensor``.

    Shape, dtype and device are read at once; the statistics the first time
    :meth:`resolve` is called, if the tensor is still alive.
    """

    __slots__ = ("_covers", "version")

    def __init__(self, tensor: torch.Tensor, device: str | None = None) -> None:
        # LazySummary.__init__ reads NumPy attributes; the fields are set here instead.
        self.version: int = tensor._version
        """The tensor's version counter when this summary was made."""
        self.shape = summary_shape(tensor)
        self.dtype = _DTYPE_NAMES.get(tensor.dtype) or dtype_name(tensor.dtype)
        if device is None:
            device = "cpu" if tensor.is_cpu else str(tensor.device)
        self.device = device
        self.summary = None
        self._covers = -1  # the largest max_values the summary answers as it is; none yet
        self._ref: Any = weakref.ref(tensor)
        self._strong = None

    def resolve(self, max_values: int = 0) -> TensorSummary:
        """The summary; only shape, dtype and device if the tensor is already gone."""
        if max_values <= self._covers:
            return self.summary  # it holds everything asked for
        tensor = self._ref()
        if tensor is None:
            return self.summary or TensorSummary(self.shape, self.dtype, self.device)
        key = None
        if type(tensor) is _Tensor and tensor.layout is _STRIDED and tensor.numel() >= LARGE:
            # See Note [One summary per memory]
            key = _memory_key(tensor, self.shape, self.device)
            twin = _SAME_MEMORY.get(key)
            if twin is not None and max_values <= twin[0]._covers:
                made, version = twin
                source = made._ref()
                if source is not None and source._version == version:
                    shared = made.summary
                    if shared.shape != self.shape:
                        shared = dataclasses.replace(shared, shape=self.shape)
                    self._covers = made._covers
                    self.summary = shared
                    # This tensor now vouches for the memory: the first may die first.
                    _SAME_MEMORY[key] = (self, tensor._version)
                    return shared
        summary = summarize_tensor(tensor, self.device, max_values)
        self._take(tensor, summary, max_values, key)
        return summary

    def _take(
        self,
        tensor: torch.Tensor,
        summary: TensorSummary,
        max_values: int,
        key: tuple[Any, ...] | None,
    ) -> None:
        """``summary``, made with ``max_values``, is ``tensor``'s; its memory (``key``, for a
        large tensor) is looked up through this one from now on (Note [One summary per
        memory])."""
        self.summary = summary
        # Asked again with a smaller max_values, the answer is the same summary; with a
        # larger one too, unless it would keep values this one has not.
        # (A deferred summary keeps no values, and reading them would settle it.)
        kept = type(summary) is not DeferredSummary and summary.values is not None
        self._covers = _MAX_INDEX if kept else max(max_values, summary.numel - 1)
        if key is not None and not kept:
            if len(_SAME_MEMORY) >= _SAME_MEMORY_MAX:
                _SAME_MEMORY.clear()
            _SAME_MEMORY[key] = (self, tensor._version)

    def __repr__(self) -> str:
        return f"TorchSummary(shape={self.shape}, dtype={self.dtype}, device={self.device})"


# Note [One summary per memory]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A large gradient often reaches the events as several tensor objects over
# the same memory: a linear layer's weight gradient leaves ``AddmmBackward0``
# in a transposed layout, ``TBackward0`` makes it a contiguous view, and
# ``AccumulateGrad`` steals that into ``.grad``. A summary is a function of
# the memory read the same way (address, shape, strides, dtype, device), so
# a tensor that reads the memory of a summarized tensor the same way takes
# its summary, as long as that tensor is alive (its memory cannot have been
# handed to another tensor) and its version counter, which its views share,
# has not moved (nothing wrote it in place). A dense CPU float block (a
# contiguous tensor of any shape, or a contiguous matrix transposed) is
# summarized through the flat view of its memory (``_dense_flat``), so every
# view of it that reads the whole block (a reshape, a flatten, a transpose)
# gets the same numbers with its own shape (tests check this bit for bit): on
# a GPT-2 the logits' gradient is summarized once, not again as its
# (batch, length, vocabulary) view, 4 ms a step. Only large tensors are
# looked up: the key costs more than a small summary; and only summaries
# without values (values are listed in the tensor's own order). A tensor that
# takes a summary this way becomes the one the memory is looked up through:
# the addmm output a weight gradient starts as dies before the ``.grad`` that
# ``AccumulateGrad`` makes of its transpose is summarized.

_SAME_MEMORY: dict[tuple[Any, ...], tuple[TorchSummary, int]] = {}
_SAME_MEMORY_MAX = 256
_DENSE_SHARED = frozenset({torch.float32, torch.float64})


def _memory_key(tensor: torch.Tensor, shape: tuple[int, ...], device: str) -> tuple[Any, ...]:
    """What a large tensor's summary numbers depend on (Note [One summary per memory])."""
    dims = len(shape)
    if (
        tensor.is_cpu
        and tensor.dtype in _DENSE_SHARED
        and (tensor.is_contiguous() or (dims == 2 and tensor.t().is_contiguous()))
    ):
        # A dense block, read in memory order whatever its shape: its views and its
        # transpose agree.
        return (tensor.data_ptr(), tensor.numel(), tensor.dtype, device)
    return (tensor.data_ptr(), shape, tensor.stride(), tensor.dtype, device)


def vouch(tensor: torch.Tensor | None, summary: TensorSummary, max_values: int) -> None:
    """``tensor`` holds, bit for bit and in the same layout, the values ``summary`` was made
    of (compared): its summary is ``summary``, and so is that of a tensor over its memory.

    For an input-buffer sum the bridge followed by copy and found equal to what the node
    receives: the ``.grad`` an ``AccumulateGrad`` makes of it is not summarized again (a
    GPT-2's tied embedding, 7 ms a step). ``max_values``: what ``summary`` was made with.
    """
    if type(tensor) is not _Tensor or not isinstance(summary, TensorSummary):
        return
    _remember(tensor, max_values, summary)
    if tensor.layout is _STRIDED and tensor.numel() >= LARGE:  # looked up by memory
        lazy = summary_of(tensor)
        if lazy is not None and lazy.summary is None:
            lazy._take(tensor, summary, max_values, _memory_key(tensor, lazy.shape, lazy.device))


# Note [One summary per gradient]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A gradient appears in several events: as the output of the node that made
# it, as the gradient a buffer accumulates, and as the input of the node
# that takes it. The same tensor object, unchanged, gets the same summary
# object, so a listener computes its numbers once. "Unchanged" is PyTorch's
# version counter: an input buffer that adds in place (it does, when nothing
# else holds the gradient) bumps it, and the sum gets a summary of its own.

_RECENT: dict[int, TorchSummary] = {}
_RECENT_MAX = 4096


def summary_of(tensor: torch.Tensor | None) -> TorchSummary | None:
    """A lazy summary of ``tensor``, ``None`` for an undefined gradient.

    The same object for the same unchanged tensor (Note [One summary per gradient]).
    """
    if tensor is None:
        return None
    key = id(tensor)
    summary = _RECENT.get(key)
    if summary is not None and summary._ref() is tensor and summary.version == tensor._version:
        return summary
    summary = TorchSummary(tensor)
    if len(_RECENT) >= _RECENT_MAX:
        _RECENT.clear()
    _RECENT[key] = summary
    return summary


def summaries_of(tensors: Any) -> list[TorchSummary | None]:
    """One summary per tensor (:func:`summary_of`)."""
    return [None if t is None else summary_of(t) for t in tensors]


_RESOLVED: dict[int, tuple[Any, int, int, TensorSummary]] = {}


def resolved_summary(tensor: torch.Tensor, max_values: int, hold: bool = False) -> TensorSummary:
    """The summary of ``tensor`` computed now, as ``summary_of(tensor).resolve(max_values)``.

    For events built as rows (Note [Batched events] in ``sources/batches.py``),
    which need the numbers at once: no lazy summary in between, and the same
    summary for the same unchanged tensor (Note [One summary per gradient]).
    Large tensors go through :class:`TorchSummary`, which shares summaries
    between tensors over the same memory (Note [One summary per memory]).
    ``hold`` as for :func:`summarize_tensor`.
    """
    held = held_summary(tensor)
    if held is not None:
        return held
    key = id(tensor)
    hit = _RESOLVED.get(key)
    if (
        hit is not None
        and hit[0]() is tensor
        and hit[1] == tensor._version
        and hit[2] == max_values
    ):
        return hit[3]
    if type(tensor) is _Tensor and not tensor.is_nested and tensor.numel() >= LARGE:
        summary = summary_of(tensor).resolve(max_values)  # type: ignore[union-attr]
    else:
        device = "cpu" if tensor.is_cpu else str(tensor.device)
        summary = summarize_tensor(tensor, device, max_values, hold)
    _remember(tensor, max_values, summary)
    return summary


def _remember(tensor: torch.Tensor, max_values: int, summary: TensorSummary) -> None:
    """``summary`` is ``tensor``'s, made with ``max_values``, while it is unchanged."""
    if len(_RESOLVED) >= _RECENT_MAX:
        _RESOLVED.clear()
    _RESOLVED[id(tensor)] = (weakref.ref(tensor), tensor._version, max_values, summary)
