"""Gradients held until their watched call ends, then summarized together.

Note [Held gradients]
~~~~~~~~~~~~~~~~~~~~~
Every gradient a recorded backward makes is summarized, most of them a few
hundred or thousand floats, for which a summary is all Python calls: copying
one into a row of NumPy (Note [Deferred summaries]) cost two to three times
what the node that made it did. A gradient the engine passes from one ordinary
node to the next is instead held (a reference and its version counter) and
its summary left unsettled (Note [Held tensors] in ``sources/deferred.py``);
when the watched call ends, or when something reads a held summary, all
held gradients of one shape and dtype are copied into one block by a
single ``stack`` in C++ and reduced as rows by PyTorch (Note [Held summaries in
tensor ops]): minimum, maximum and the counts exactly those
:func:`~autograd_viz.sources.deferred.float_summary` gives each alone, mean and
norm equal to them up to float64 rounding (a summary is for display; a
watched program's own results never depend on it).

Holding a tensor must not change what PyTorch does with it, and what is held
must still be what was summarized:

- a reference stops ``AccumulateGrad`` from stealing the gradient (``.grad``
  would become a copy), so no gradient is held that may become ``.grad``:
  none that a node hands to an ``AccumulateGrad`` whose slot only that edge
  fills (several edges make a sum, a new tensor), and none that a node
  receives when a successor of it is such an ``AccumulateGrad`` (a transpose
  or an add passes its input on, as a view or as itself). Two such nodes
  in a row before a leaf are not looked through: there ``.grad`` would be
  a copy, with the same numbers;
- a node holds all the gradients it hands on or none: one tensor may go to
  several successors, and held for one it is held for all;
- a reference stops an input buffer from adding in place; it adds into a
  new tensor instead, the same numbers;
- nothing may change a held gradient before it is read, so none is held that
  the user's code takes: the user's hooks, a custom Function's backward
  (:func:`holds_inputs`, :func:`holds_outputs`); a saved tensor is held
  unless it is a parameter (an optimizer run by a hook may step it);
- a held tensor whose version counter moved anyway, or whose storage was
  freed, is not read: its summary keeps shape, dtype and device only.

Shape, dtype and device of a held gradient are the graph's (``_input_metadata``
of the slot it goes to, which PyTorch makes every gradient match before any
hook sees it), so holding one reads two of its attributes.

What is held is capped by bytes (:data:`HOLD_BYTES`): past it, everything
held is settled at once.

No summary is lost while settling: a stack follows its inputs' memory format
(permuted 4-D tensors, channels last, as a ConvNeXt's layer scale saves them,
stack into a block that is not C-contiguous), so a block is reshaped, copied
where it must be, never viewed; and should a block fail anyway, each of its
tensors is summarized alone, with a one-line warning. A summary whose tensor
was dropped unsettled reads as one without numbers (shape, dtype and device
only), never as a record without its fields.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from autograd_viz.sources import deferred
from autograd_viz.sources.deferred import DeferredSummary, no_numbers, unsettled
from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch.host_view import host_view
from autograd_viz.sources.summaries import summarize
from autograd_viz.trace.summary import TensorSummary, slot_twin

HOLD_BYTES = 32 << 20
"""Bytes of gradients held at most; past that they are summarized at once."""

Meta = tuple[tuple[int, ...], str, str, int, int]
"""What the graph says of a gradient that may be held: shape, dtype, device, elements, bytes."""

_held: dict[int, tuple[torch.Tensor, int, DeferredSummary, int, Any]] = {}
"""By ``id``: the tensor (so the id cannot be reused), its version, its summary, its length and
its torch dtype."""
_bytes = [0]
_flatten = torch._C._nn.flatten_dense_tensors
_STRIDED = torch.strided
_Tensor = torch.Tensor
_TORCH_DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64}
LARGE = 1 << 14
"""Elements from which a tensor is summarized where it lives (``summary.LARGE``), never held."""
SMALL = 64
"""Elements up to which a summary is taken at once (remembered by its bytes), never held."""


class _Place:
    """What a held summary's ``values`` slot points at until it is settled."""

    __slots__ = ()

    def settle_held(self) -> None:
        _settle_held()


_PLACE = _Place()


def meta_of(slot: tuple[tuple[int, ...], str, str]) -> Meta | None:
    """A slot's ``(shape, dtype, device)`` as a :data:`Meta`, if a gradient there may be held.

    Only CPU float tensors of more than :data:`SMALL` and fewer than
    :data:`LARGE` elements: the rest are summarized as they come. Remembered
    by the slot (slots of a few shapes repeat over a graph and its calls).
    """
    try:
        return _METAS[slot]
    except KeyError:
        pass
    shape, dtype, device = slot
    kind = _TORCH_DTYPES.get(dtype)
    meta = None
    if kind is not None and device == "cpu":
        count = 1
        for dim in shape:
            count *= dim
        if SMALL < count < LARGE:
            meta = (shape, dtype, device, count, count * kind.itemsize)
    if len(_METAS) >= 4096:
        _METAS.clear()
    _METAS[slot] = meta
    return meta


_METAS: dict[tuple[tuple[int, ...], str, str], Meta | None] = {}


def held_summary(tensor: torch.Tensor) -> DeferredSummary | None:
    """The summary ``tensor`` is held with, if it is held and unchanged."""
    entry = _held.get(id(tensor))
    if entry is not None and entry[1] == tensor._version:
        return entry[2]
    return None


def hold_or_none(tensor: Any, meta: Meta, max_values: int) -> DeferredSummary | None:
    """Hold a gradient the graph describes with ``meta``; ``None`` if it cannot be held.

    The tensor must be a plain strided tensor (not a subclass, not sparse)
    with more elements than ``max_values`` (whose values a summary would keep).
    """
    if type(tensor) is not _Tensor or tensor.layout is not _STRIDED or meta[3] <= max_values:
        return None
    version = tensor._version
    key = id(tensor)
    entry = _held.get(key)
    if entry is not None and entry[1] == version:
        return entry[2]
    summary = unsettled(meta[0], meta[1], meta[2], _PLACE)
    with deferred.LOCK:
        if entry is not None:  # the same tensor, changed in place: its first summary first
            _settle_held()
        _held[key] = (tensor, version, summary, meta[3], _TORCH_DTYPES[meta[1]])
        size = _bytes[0] + meta[4]
        if size > HOLD_BYTES:
            _settle_held()
        else:
            _bytes[0] = size
    return summary


def hold(tensor: torch.Tensor, shape: tuple[int, ...], dtype: str, device: str) -> DeferredSummary:
    """Hold a dense CPU float tensor of any size below :data:`LARGE` (its summary settles later).

    Args:
        tensor: a plain strided CPU float tensor; it may require grad (it is
            read without recording a graph).
        shape: its shape.
        dtype: its dtype's name.
        device: the device name to record.
    """
    count = tensor.numel()
    summary = held_summary(tensor)
    if summary is not None:
        return summary
    summary = unsettled(shape, dtype, device, _PLACE)
    with deferred.LOCK:
        if id(tensor) in _held:
            _settle_held()
        _held[id(tensor)] = (tensor, tensor._version, summary, count, tensor.dtype)
        size = _bytes[0] + count * tensor.element_size()
        if size > HOLD_BYTES:
            _settle_held()
        else:
            _bytes[0] = size
    return summary


def hold_saved(tensor: torch.Tensor, max_values: int) -> DeferredSummary | None:
    """Hold a tensor a node saved, if it is a plain CPU float tensor of middle size.

    Nothing of the user's runs during the call but hooks, and a parameter (which
    an optimizer in a hook may step) is never held. ``None`` where it is not held.
    """
    if (
        type(tensor) is not _Tensor
        or tensor.layout is not _STRIDED
        or not tensor.is_cpu
        or tensor.is_nested
        or tensor.is_neg()
    ):
        return None
    dtype = _DTYPE_NAMES.get(tensor.dtype)
    count = tensor.numel()
    if dtype is None or not SMALL < count < LARGE or count <= max_values:
        return None
    if tensor.requires_grad:
        if tensor.is_leaf:
            return None
        tensor = tensor.detach()
    return hold(tensor, tuple(tensor.shape), dtype, "cpu")


_DTYPE_NAMES = {kind: name for name, kind in _TORCH_DTYPES.items()}


def _settle_held() -> None:
    """Settle every held summary, a block per shape, dtype and contiguity.

    Call it holding ``deferred.LOCK``.
    """
    if not _held:
        return
    groups: dict[tuple[Any, ...], tuple[list[torch.Tensor], list[Any], int]] = {}
    places: dict[tuple[int, int, Any], Any] = {}
    twins: list[tuple[Any, Any]] = []
    for tensor, version, summary, length, kind in _held.values():
        address = tensor.data_ptr()
        if tensor._version != version or not address:
            no_numbers(summary)  # changed in place, or freed: what was summarized is gone
            continue
        contiguous = tensor.is_contiguous()
        if contiguous or (tensor.dim() == 2 and _transposed(tensor)):
            # See Note [Held summaries in tensor ops]: one summary per dense memory.
            place = (address, length, kind)
            first = places.get(place)
            if first is not None:
                twins.append((summary, first))
                continue
            places[place] = summary
        # One strided view among contiguous tensors takes the whole stack off its memcpy path.
        key = (summary.shape, kind, contiguous)
        group = groups.get(key)
        if group is None:
            group = groups[key] = ([], [], length)
        group[0].append(tensor)
        group[1].append(summary)
    _held.clear()
    _bytes[0] = 0
    try:
        with torch.no_grad():  # a gradient of create_graph=True requires grad: record nothing
            settle_blocks(
                [
                    _block(tensors, length, summaries)
                    for tensors, summaries, length in groups.values()
                ]
            )
    except Exception as exc:  # noqa: BLE001 - a summary is never lost (Note [Held gradients])
        _settle_alone(groups.values(), exc)
    for summary, first in twins:
        _store(
            summary,
            first.min,
            first.max,
            first.mean,
            first.norm,
            first.nan_count,
            first.inf_count,
        )


def _block(
    tensors: list[torch.Tensor], length: int, summaries: list[Any]
) -> tuple[torch.Tensor, list[Any]]:
    """The tensors of one group as the rows of one C-contiguous block, each in its C order."""
    # One copy: a stack of tensors of one shape costs half a flattening.
    try:
        rows = _stack(tensors)
    except RuntimeError:  # a tensor not of the shape the graph gave: flattened
        rows = _flatten(tensors)
    # A stack follows its inputs' memory format: permuted 4-D tensors (channels last, as
    # a ConvNeXt's) stack into a block that is not C-contiguous.
    return rows.reshape(len(tensors), length), summaries


def _settle_alone(groups: Any, exc: Exception) -> None:
    """Settling held blocks failed: each summary left waiting is made alone, or keeps
    shape, dtype and device only; none is left without its numbers' slots."""
    warn_once(
        f"autograd-viz: summarizing held gradients together failed ({exc!r}); "
        "summarizing each alone"
    )
    for tensors, summaries, _ in groups:
        for tensor, summary in zip(tensors, summaries, strict=True):
            if type(summary) is not DeferredSummary:
                continue  # settled before the failure
            try:
                with torch.no_grad():
                    alone = summarize(host_view(tensor.contiguous()), summary.device)
            except Exception:  # noqa: BLE001 - as a freed tensor: no numbers
                no_numbers(summary)
                continue
            _store(
                summary,
                alone.min,
                alone.max,
                alone.mean,
                alone.norm,
                alone.nan_count,
                alone.inf_count,
            )


# Note [Held summaries in tensor ops]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The held gradients of one shape and dtype, stacked into one block, are reduced
# as rows by PyTorch where they live, six calls a block whatever its rows: the
# exact minimum and maximum in the tensors' dtype (``amin`` and ``amax``: along
# rows ``aminmax`` is ten times slower), the sum and the norm of the rows
# widened to float64 once, into memory kept for it (so a mean and a norm are
# accurate to about 1e-12 relative, as NumPy's float64 ones were; they may differ
# from those in the last bits, PyTorch summing in its own order). One ``tolist``
# brings the four numbers of every row of every block to Python. A float64 sum
# of float32 values cannot overflow, so a row whose mean is finite has no NaN
# and no Inf; only a row that has one is summarized again, alone, by the general
# path that counts them (``summaries.summarize``): counts, minimum and maximum
# are exactly what they were. ``sum(dtype=torch.float64)`` and
# ``vector_norm(dtype=torch.float64)`` widen a float32 input into a full copy of
# their own on the CPU (ATen casts the input of a reduction whose accumulation
# dtype differs), each as slow as the widening here. On a recorded GRUCell's
# blocks PyTorch's reductions cost what NumPy's float64 rows did (``python -m
# benchmarks.torch_bridge --held``); what settling saves is in the copies: a
# stack instead of a flattening, strided views stacked apart (one among
# contiguous tensors takes the whole stack off its memcpy path), and the memory
# below reduced once.
#
# A weight gradient is held twice over one memory: ``mm``'s output and
# ``TBackward0``'s transposed view of it (a quarter of the GRU's held floats).
# Two held tensors that each cover the same run of memory densely (contiguous,
# or a contiguous matrix transposed), at the same address, length and dtype,
# hold the same values: the second takes the first's numbers, computed once.
# Its minimum, maximum and counts are its own exactly; its mean and norm are
# its values summed in the other's order, which only rounding can tell apart.


def settle_blocks(blocks: list[tuple[torch.Tensor, list[Any]]]) -> None:
    """Store the numbers of each row of each block in its summary.

    See Note [Held summaries in tensor ops]. Call it holding ``deferred.LOCK``, under
    ``torch.no_grad()``.

    Args:
        blocks: pairs of a C-contiguous 2-D float tensor, one row per summary in its
            tensor's C order, and the unsettled summaries, one per row.
    """
    if not blocks:
        return
    numbers = [_row_numbers(rows) for rows, _ in blocks]
    lows, highs, means, norms = (numbers[0] if len(numbers) == 1 else _cat(numbers, 1)).tolist()
    summaries = [summary for _, block in blocks for summary in block]
    if _isfinite(sum(means)):  # the common case: no NaN, no Inf anywhere
        for summary, low, high, mean, norm in zip(
            summaries, lows, highs, means, norms, strict=True
        ):
            # Stored through the twin's plain slots (Note [Building frozen records]).
            _set_class(summary, "__class__", _Fields)
            summary.min = low
            summary.max = high
            summary.mean = mean
            summary.norm = norm
            summary.values = None
            summary.__class__ = TensorSummary
        return
    rows_of = [rows[i] for rows, block in blocks for i in range(len(block))]
    for i, summary in enumerate(summaries):
        if _isfinite(means[i]):
            _store(summary, lows[i], highs[i], means[i], norms[i], 0, 0)
        else:  # a NaN or an Inf: the general path counts them
            general = summarize(host_view(rows_of[i]), summary.device)
            _store(
                summary,
                general.min,
                general.max,
                general.mean,
                general.norm,
                general.nan_count,
                general.inf_count,
            )


def _row_numbers(rows: torch.Tensor) -> torch.Tensor:
    """Minimum, maximum, mean and norm of each row, as a float64 tensor of four rows."""
    if rows.dtype is _F64:
        wide = rows
    else:
        # Widened into memory kept for it: a fresh megabyte would be mapped and faulted in.
        size = rows.numel()
        if _scratch[0].numel() < size:
            _scratch[0] = torch.empty(size, dtype=_F64)
        wide = _scratch[0][:size].view(rows.shape).copy_(rows)
    return _stack(
        (
            rows.amin(dim=1).to(_F64),
            rows.amax(dim=1).to(_F64),
            wide.sum(dim=1).div_(rows.shape[1]),
            _norm(wide, dim=1),
        )
    )


def _transposed(matrix: torch.Tensor) -> bool:
    """Whether a 2-D tensor is a contiguous matrix transposed (read without making a view)."""
    return matrix.stride() == (1, matrix.shape[0])


def _store(
    summary: Any, low: Any, high: Any, mean: Any, norm: Any, nan_count: int, inf_count: int
) -> None:
    _set_class(summary, "__class__", _Fields)
    summary.min = low
    summary.max = high
    summary.mean = mean
    summary.norm = norm
    summary.nan_count = nan_count
    summary.inf_count = inf_count
    summary.values = None
    summary.__class__ = TensorSummary


_F64 = torch.float64
_scratch = [torch.empty(0, dtype=_F64)]
_stack = torch.stack
_cat = torch.cat
_norm = torch.linalg.vector_norm
_isfinite = math.isfinite
_set_class = object.__setattr__
_Fields: Any = slot_twin(TensorSummary)


deferred.add_holder(_settle_held)


def _plain_successors(node: Any, fan_in: dict[tuple[Any, int], int]) -> bool:
    """Whether no successor of ``node`` runs the user's hooks or takes a gradient into ``.grad``.

    An ``AccumulateGrad`` whose slot several edges fill takes their sum (a
    new tensor); one edge alone is what it steals.
    """
    for edge in node._next_edges:
        if edge is not None:
            successor = edge.function
            if successor.hooks or successor.fn is None:
                return False
            if successor.variable is not None and fan_in.get((successor, edge.input_nr), 0) < 2:
                return False
    return True


def _ordinary(node: Any) -> bool:
    """A node of PyTorch's own formulas: not a leaf, no user hooks, not a custom Function."""
    return (
        node.fn is not None
        and node.variable is None
        and not node.hooks
        and not isinstance(node.fn, _CUSTOM)
    )


_CUSTOM = torch.autograd.function.BackwardCFunction


def holds_inputs(node: Any, fan_in: dict[tuple[Any, int], int]) -> tuple[Meta | None, ...]:
    """For each gradient ``node`` receives, its :data:`Meta` if it may be held, else ``None``.

    Args:
        node: the node.
        fan_in: how many edges arrive at each input slot (``GraphPlan.fan_in``).
    """
    found = node.holds
    if found is None:
        if _ordinary(node) and _plain_successors(node, fan_in) and node.inputs:
            found = tuple([meta_of(slot) for slot in node.inputs])
        else:
            found = ()
        node.holds = found
    return found


def holds_outputs(node: Any, fan_in: dict[tuple[Any, int], int]) -> tuple[Meta | None, ...]:
    """For each gradient ``node`` hands on, its :data:`Meta` if it may be held, else ``None``.

    Args:
        node: the node.
        fan_in: how many edges arrive at each input slot (``GraphPlan.fan_in``):
            a leaf's gradient summed from several edges is a new tensor, and
            one held before the sum is added to, not added into.
    """
    found = node.holds_out
    if found is None:
        metas: list[Meta | None] = []
        for edge in node._next_edges:
            if edge is None:
                metas.append(None)  # nothing takes it
                continue
            successor = edge.function
            slot = edge.input_nr
            if successor.variable is not None:
                safe = not successor.hooks and fan_in.get((successor, slot), 0) > 1
            else:
                safe = bool(holds_inputs(successor, fan_in))
            if not safe:
                # A node may hand one tensor to several successors (an add passes its
                # gradient on to both sides): held for one, it would be held for all.
                metas = []
                break
            inputs = successor.inputs
            metas.append(meta_of(inputs[slot]) if inputs and slot < len(inputs) else None)
        found = node.holds_out = tuple(metas)
    return found
