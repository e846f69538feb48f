"""The tensors a PyTorch node saved for backward, read without unpacking them.

Note [Reading saved tensors]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A node's ``_saved_self`` (and every ``_saved_*`` tensor, and a custom
Function's ``saved_tensors``) unpacks its ``SavedVariable``: when the tensor
was saved under ``torch.autograd.graph.saved_tensors_hooks`` that runs the
unpack hook, and the hook of a non-reentrant ``torch.utils.checkpoint``
recomputes the forward, ``save_on_cpu`` copies back to the device. A view
must not run the user's code. PyTorch 2.13 shows the ``SavedVariable``
itself as ``_raw_saved_*`` (a ``torch._C._autograd.SavedTensor``; a custom
Function's ``_raw_saved_tensors``), whose ``unpack_hook`` is ``None`` exactly
when no hook was registered on it, and whose ``data`` is then the saved
tensor as it is stored, read without unpacking (no hook, no version check);
with a hook, ``data`` is whatever the pack hook returned. So a saved tensor
is summarized when no hook owns it, and is ``None`` when one does (or when
PyTorch already freed it, or the hook is one Python cannot see). Nothing is
kept: the snapshot summarizes and lets go, during the graph task's start.
"""

from __future__ import annotations

from typing import Any

import torch

from autograd_viz.sources.pytorch.held import hold_saved
from autograd_viz.sources.pytorch.summary import has_values, summarize_tensor
from autograd_viz.trace.summary import TensorSummary

_FIRST = ("_raw_saved_self", "_raw_saved_other", "_raw_saved_result")
"""Named first, as the NaN report lists them; the rest alphabetically."""

_NAMES: dict[type, tuple[str, ...]] = {}
"""Each node class's ``_raw_saved_*`` attributes (``dir()`` is slow)."""


def saved_names(fn: Any) -> tuple[str, ...]:
    """The ``_raw_saved_*`` attributes of a node, in the order the snapshot lists them."""
    kind = type(fn)
    names = _NAMES.get(kind)
    if names is None:
        found = [n for n in dir(fn) if n.startswith("_raw_saved_")]
        found.sort(key=lambda n: (_FIRST.index(n) if n in _FIRST else len(_FIRST), n))
        names = _NAMES[kind] = tuple(found)
    return names


Seen = dict[tuple[Any, ...], TensorSummary]
"""Summaries already made in one snapshot, by the memory they read."""


def saved_summaries(fn: Any, max_values: int, seen: Seen) -> tuple[TensorSummary | None, ...]:
    """The node's saved tensors as summaries (Note [Reading saved tensors]).

    Args:
        fn: the PyTorch node.
        max_values: keep values of tensors up to this many elements.
        seen: the summaries this snapshot made so far: a tensor saved by many
            nodes (a weight, an input) is summarized once. Within one
            snapshot nothing runs, so the same memory read the same way
            has the same summary.

    Returns:
        One entry per saved tensor; ``None`` where a saved-tensors hook owns
        it, or it was freed.
    """
    names = saved_names(fn)
    if not names:
        return ()
    summaries: list[TensorSummary | None] = []
    for name in names:
        try:
            value = getattr(fn, name)
        except RuntimeError:  # a custom Function's, freed by an earlier backward
            continue
        for saved in value if isinstance(value, list | tuple) else (value,):
            summaries.append(_summary(saved, max_values, seen))
    return tuple(summaries)


def _summary(saved: Any, max_values: int, seen: Seen) -> TensorSummary | None:
    try:
        if saved.unpack_hook is not None:
            return None  # a hook owns it: reading it would run the hook
        tensor = saved.data
    except (RuntimeError, AttributeError):  # a hook Python cannot see; an older PyTorch
        return None
    if not isinstance(tensor, torch.Tensor):
        return None  # freed
    key = None
    if type(tensor) is torch.Tensor and tensor.layout is torch.strided and has_values(tensor):
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.stride(), tensor.dtype, tensor.device)
        summary = seen.get(key)
        if summary is not None:
            return summary
    # Held until the call ends where it may be (Note [Held gradients]).
    summary = hold_saved(tensor, max_values) or summarize_tensor(
        tensor, str(tensor.device), max_values
    )  # never raises
    if key is not None:
        seen[key] = summary
    return summary
