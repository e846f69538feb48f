"""Reading an aten op's arguments and results: which tensors it wrote, and are they finite.

Helpers of the NaN checks (:mod:`~autograd_viz.nan.forward.checks`),
looked up from the op's schema (:class:`OpInfo`) and never changing a tensor.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

FILL_OPS = frozenset(
    {
        "masked_fill",
        "where",
        "full",
        "full_like",
        "new_full",
        "fill",
        "scalar_tensor",
        "index_fill",
        "constant_pad_nd",
        "lift_fresh",
        "lift_fresh_copy",
    }
)
"""Ops whose ``-inf`` from a ``-inf`` fill value is intentional (Note [Intentional -inf])."""

UNINITIALIZED_OPS = frozenset(
    {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize"}
)
"""Ops whose outputs hold whatever was in memory: not checked (a NaN there is no birth)."""

KERNEL_STATE_RETURNS = frozenset(
    {
        "log_sumexp",
        "logsumexp",
        "softmax_logsumexp",
        "philox_seed",
        "philox_offset",
        "rng_state",
        "unused",
        "debug_attn_mask",
        "cum_seq_q",
        "cum_seq_k",
    }
)
"""Returns of fused attention kernels that are the kernel's own state saved for its
backward, not values of the program, by their names in the schema: they are not checked.
The memory-efficient kernel pads ``log_sumexp`` to a multiple of 32 queries with ``inf``
by design (seen on an H200: every transformer step reported "born Inf"), and a fully
masked row's ``logsumexp`` is ``-inf``; the attention's output, return 0, is checked."""

PENDING_NAMESPACES = frozenset({"_c10d_functional", "c10d_functional"})
"""Functional collectives (FSDP2's all-gather, reduce-scatter): their outputs hold whatever
was in memory until ``wait_tensor``, so they are not checked (Note [Born in PyTorch]); the
values they bring from other ranks are checked by the ops that read them, and were born
on another rank, whose own checks name them."""

NORM_OPS = frozenset({"linalg_vector_norm", "norm", "frobenius_norm", "linalg_norm"})
"""Ops whose outputs are remembered (weakly) as norms, so that a division by one is named."""

NAN, POSINF, NEGINF = "nan", "+inf", "-inf"
ACCUMULATE_GRAD_NR = 2**64 - 1


@dataclass(frozen=True, slots=True)
class OpInfo:
    """What the schema says about an op, looked up once per overload."""

    name: str
    """``aten.log.default``."""
    short: str
    """``log``: the overload packet's name, without a leading or trailing underscore."""
    view: bool
    """Every output aliases an input and nothing is written (or the op allocates memory
    without setting it): nothing new to check."""
    mutated: tuple[tuple[int, str], ...]
    """``(position, name)`` of each argument written in place."""
    fresh: tuple[int, ...]
    """Indices of the returns that alias nothing."""
    several: bool
    """The op returns several values (a tuple)."""
    fills: bool
    """A fill op (Note [Intentional -inf])."""
    ignored: bool
    """An op the user said makes non-finite values on purpose."""


def finite(t: torch.Tensor) -> bool:
    """One reduction: the sum is finite iff every element is (an overflow is sorted out later).

    A tensor whose values cannot be read (fake, a subclass) counts as finite:
    nothing can be said about it (Note [Tensors without values] in ``summary.py``).
    """
    if type(t) is not _Tensor:
        values = checked_values(t)
        if values is None:
            return True
        t = values
    if t.device.type == "meta":
        return True
    if not t.is_floating_point() or t.numel() == 0:
        return t.is_floating_point() or not t.is_complex() or bool(torch.isfinite(t).all())
    if t.layout is not torch.strided:
        return bool(torch.isfinite(t.to_dense()).all())
    if t.dtype in (torch.float16, torch.bfloat16):
        return math.isfinite(float(torch.sum(t, dtype=torch.float32)))
    return math.isfinite(float(t.sum()))


_Tensor = torch.Tensor


def checked_values(t: torch.Tensor) -> torch.Tensor | None:
    """The plain tensor whose values stand for ``t``: itself, a jagged nested tensor's
    packed values; ``None`` when they cannot be read (fake, functorch wrappers, subclasses)."""
    kind = type(t)
    if kind is _Tensor:
        return None if torch._C._functorch.is_functorch_wrapped_tensor(t) else t
    if kind is torch.nn.Parameter:
        return t
    if t.is_nested:
        try:
            return t.detach().values()
        except RuntimeError:  # a strided nested tensor
            return None
    return None


def tensors(tree: Any) -> Iterator[torch.Tensor]:
    """The tensors in nested tuples, lists and dicts, in order."""
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, list | tuple):
        for item in tree:
            yield from tensors(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from tensors(item)


def scalar_kinds(tree: Any) -> frozenset[str]:
    """Which non-finite Python numbers the arguments hold (a fill value, ``x * inf``)."""
    kinds = []
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            kinds.append(NAN if math.isnan(item) else POSINF if item > 0 else NEGINF)
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return frozenset(kinds)


def mutated(op: OpInfo, args: Any, kwargs: dict[str, Any]) -> Iterator[torch.Tensor]:
    for position, name in op.mutated:
        value = args[position] if position < len(args) else kwargs.get(name)
        yield from tensors(value)


def results(op: OpInfo, out: Any, args: Any, kwargs: dict[str, Any]) -> list[torch.Tensor | None]:
    """The tensors the op wrote: its fresh returns, then its arguments written in place."""
    written: list[torch.Tensor | None] = []
    if op.fresh:
        returns = out if op.several else (out,)
        for i in op.fresh:
            item = returns[i] if i < len(returns) else None
            if isinstance(item, list | tuple):
                written.extend(tensors(item))
            else:
                written.append(item if isinstance(item, torch.Tensor) else None)
    if op.mutated:
        written.extend(mutated(op, args, kwargs))
    return written


def new_nodes(out: Any, start: int) -> dict[int, Any]:
    """The nodes made since sequence number ``start`` that ``out`` reaches, by ``sequence_nr``."""
    found: dict[int, Any] = {}
    stack = [t.grad_fn for t in tensors(out) if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        nr = fn._sequence_nr()
        if nr < start or nr == ACCUMULATE_GRAD_NR or nr in found:
            continue
        found[nr] = fn
        stack.extend(f for f, _ in fn.next_functions if f is not None)
    return found
