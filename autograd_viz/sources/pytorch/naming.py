"""Naming leaves the way the user knows them.

A parameter of an ``nn.Module`` is named by its qualified name
(``encoder.layers.0.linear1.weight``); a tensor given a name through
:func:`name` by that name; any other leaf by its shape (``tensor[3, 4]``).

Note [Finding the user's modules]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
PyTorch keeps no link from a parameter to the module that owns it. When a
backward call starts, the modules the user can name are the ones the calling
code can reach: every ``nn.Module`` bound to a local variable of a frame on
the calling thread's stack (``self`` in a training method included) and to a
global of those frames' modules (``model`` in a script). Each such module's
``named_parameters()`` gives the qualified names; the module with the most
parameters is asked first, so that a parameter reachable both from ``model``
and from ``model.encoder`` is named from ``model``. No garbage-collector scan
(its cost grows with the whole heap) and no reference is kept after the call.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterable
from types import FrameType
from typing import Any

import torch

_GIVEN: dict[int, tuple[weakref.ref[torch.Tensor], str]] = {}
"""``id(tensor)`` → (weak reference, name); an entry dies with its tensor."""


def name(tensor: torch.Tensor, label: str) -> torch.Tensor:
    """Give a PyTorch tensor a name that traces and views show for it.

    The name is kept beside the tensor, not in it, and is forgotten when the
    tensor is freed; the tensor itself is not changed.

    Example:
        >>> x = autograd_viz.sources.pytorch.name(torch.randn(3, requires_grad=True), "x")

    Args:
        tensor: the tensor (usually a leaf that requires grad).
        label: its name.

    Returns:
        ``tensor``, so that the call can wrap the tensor's creation.

    Raises:
        TypeError: ``tensor`` is not a ``torch.Tensor`` or ``label`` not a string.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"name() names a torch.Tensor, got {type(tensor).__name__}")
    if not isinstance(label, str):
        raise TypeError(f"a tensor's name must be a string, got {type(label).__name__}")
    key = id(tensor)

    def forget(ref: weakref.ref[torch.Tensor]) -> None:
        entry = _GIVEN.get(key)
        if entry is not None and entry[0] is ref:
            del _GIVEN[key]

    _GIVEN[key] = (weakref.ref(tensor, forget), label)
    return tensor


def given_name(tensor: torch.Tensor) -> str | None:
    """The name given to ``tensor`` with :func:`name`, if any."""
    entry = _GIVEN.get(id(tensor))
    if entry is not None and entry[0]() is tensor:
        return entry[1]
    return None


def shape_name(tensor: torch.Tensor) -> str:
    """The name of an unnamed leaf: its shape, as ``tensor[3, 4]``."""
    return f"tensor[{', '.join(str(d) for d in tensor.shape)}]"


def visible_modules(frame: FrameType | None) -> list[torch.nn.Module]:
    """The modules reachable from ``frame`` and its callers (Note [Finding the user's modules])."""
    found: dict[int, torch.nn.Module] = {}
    seen_globals: set[int] = set()
    while frame is not None:
        _collect(frame.f_locals.values(), found)
        if id(frame.f_globals) not in seen_globals:
            seen_globals.add(id(frame.f_globals))
            _collect(frame.f_globals.values(), found)
        frame = frame.f_back
    return sorted(found.values(), key=_parameter_count, reverse=True)


def _collect(values: Iterable[Any], found: dict[int, torch.nn.Module]) -> None:
    for value in list(values):
        if isinstance(value, torch.nn.Module):
            found.setdefault(id(value), value)


def _parameter_count(module: torch.nn.Module) -> int:
    return sum(1 for _ in module.parameters())


class LeafNamer:
    """Names leaves for one backward call, from the modules visible when it started."""

    def __init__(self, frame: FrameType | None = None) -> None:
        self._frame: FrameType | None = sys._getframe(1) if frame is None else frame
        self._qualified: dict[int, str] | None = None

    def __call__(self, tensor: torch.Tensor) -> str:
        """The leaf's name: given, qualified parameter name, or its shape."""
        given = given_name(tensor)
        if given is not None:
            return given
        if self._qualified is None:
            self._qualified = {}
            for module in visible_modules(self._frame):
                for qualified, parameter in module.named_parameters():
                    self._qualified.setdefault(id(parameter), qualified)
            self._frame = None  # keep no frame (and its locals) past the first lookup
        found = self._qualified.get(id(tensor))
        return shape_name(tensor) if found is None else found
