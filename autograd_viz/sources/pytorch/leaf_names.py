"""Naming leaves the way the user knows them.

A tensor given a name through :func:`name` is named by that name; a parameter
of an ``nn.Module`` by its qualified name (``encoder.layers.0.linear1.weight``;
``head.weight`` when several separate modules are in view); any other leaf by
the variable it is bound to in the code that called backward (``x``), or by
its shape (``tensor[3, 4]``).

Note [Finding the user's modules]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
PyTorch keeps no link from a parameter to the module that owns it. When a
backward call starts, the modules the user can name are the ones the calling
code can reach: every ``nn.Module`` bound to a local variable of a frame on
the calling thread's stack (``self`` in a training method included) and to a
global of those frames' modules (``model`` in a script). Each such module's
``named_parameters()`` gives the qualified names; a module that is a
submodule of another visible one is not asked, so that a parameter reachable
both from ``model`` and from ``model.encoder`` is named from ``model``. No garbage-collector scan
(its cost grows with the whole heap) and no reference is kept after the call.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterable
from types import FrameType
from typing import Any

import torch

from autograd_viz.sources.pytorch.compiled import unwrapped_path
from autograd_viz.sources.pytorch.module_calls import named_parameters_once
from autograd_viz.trace.text import shape_name

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


def _visible(
    frame: FrameType | None,
) -> tuple[dict[int, tuple[str, torch.nn.Module]], dict[int, str]]:
    """Modules and leaf tensors bound to a variable, innermost frame first, with that name."""
    modules: dict[int, tuple[str, torch.nn.Module]] = {}
    tensors: dict[int, str] = {}
    seen_globals: set[int] = set()
    while frame is not None:
        _collect(_local_variables(frame), modules, tensors)
        if id(frame.f_globals) not in seen_globals:
            seen_globals.add(id(frame.f_globals))
            _collect(frame.f_globals.items(), modules, tensors)
        frame = frame.f_back
    return modules, tensors


# Note [Reading a frame's locals]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Before Python 3.13 (PEP 667), ``frame.f_locals`` of a function copies the
# frame's variables into a dict the frame keeps until it returns, and that
# dict holds every value: a tensor the function deletes after backward (the
# last batch, the last loss) would stay alive until the function returns or
# calls backward again. Watching must not change what lives how long, so a
# dict that the read made and that nobody else holds (``locals()`` in the
# user's code or a debugger would) is emptied again after the read. Nothing
# reads that dict without refreshing it first: ``locals()``, ``f_locals``
# and trace functions all copy the variables in again. Module and class
# frames are their namespace, never a copy, and are never emptied.

_LOCALS_ARE_COPIES = sys.version_info < (3, 13)


def _local_variables(frame: FrameType) -> list[tuple[str, Any]]:
    """``frame``'s local variables, leaving no copy behind (Note [Reading a frame's locals])."""
    variables = frame.f_locals
    items = list(variables.items())
    if (
        _LOCALS_ARE_COPIES
        and type(variables) is dict
        and variables is not frame.f_globals
        and frame.f_code.co_flags & _OPTIMIZED  # a function's frame: f_locals is a copy
        and sys.getrefcount(variables) <= _ONLY_THE_FRAME_AND_US
    ):
        variables.clear()
    return items


_OPTIMIZED = 0x1  # CO_OPTIMIZED: the code keeps its variables in the frame, not in a dict
_ONLY_THE_FRAME_AND_US = 3  # the frame, ``variables``, getrefcount's argument


def _collect(
    items: Iterable[tuple[str, Any]],
    modules: dict[int, tuple[str, torch.nn.Module]],
    tensors: dict[int, str],
) -> None:
    for variable, value in list(items):
        if isinstance(value, torch.nn.Module):
            modules.setdefault(id(value), (variable, value))
        elif (
            isinstance(value, torch.Tensor)
            and value.requires_grad
            and value.grad_fn is None
            and variable.isidentifier()
            and not variable.startswith("_")
        ):
            tensors.setdefault(id(value), variable)


def _qualified_names(modules: dict[int, tuple[str, torch.nn.Module]]) -> dict[int, str]:
    """``id(parameter)`` → its qualified name (Note [Finding the user's modules]).

    Only modules that are no other visible module's submodule name parameters;
    when there are several such (``block`` and ``head``), each name starts with
    the variable the module is bound to (``head.weight``), so that no two
    parameters read the same. Each module's tree is walked once (a ViT's two
    hundred modules: a walk costs a millisecond here, and this runs every call).
    """
    inner: set[int] = set()
    parameters: dict[int, list[tuple[str, torch.nn.Parameter]]] = {}
    for _, module in modules.values():
        # Walked without recursion: a module tree may be deeper than the recursion limit,
        # or hold a module as its own child (walk_modules in modules.py).
        parameters[id(module)] = list(named_parameters_once(module, inner))
    tops = sorted(
        (entry for key, entry in modules.items() if key not in inner),
        key=lambda entry: len(parameters[id(entry[1])]),
        reverse=True,
    )
    tops = [(variable, module) for variable, module in tops if parameters[id(module)]]
    names: dict[int, str] = {}
    for variable, module in tops:
        prefix = f"{variable}." if len(tops) > 1 else ""
        for qualified, parameter in parameters[id(module)]:
            names.setdefault(id(parameter), prefix + unwrapped_path(qualified))
    return names


def qualified_parameters(
    frame: FrameType | None,
) -> tuple[list[torch.nn.Parameter], dict[int, str]]:
    """The parameters of the modules the code at ``frame`` (and its callers) can reach, and
    ``id(parameter)`` → its qualified name (Note [Finding the user's modules])."""
    modules, _tensors = _visible(frame)
    names = _qualified_names(modules)
    seen: dict[int, torch.nn.Parameter] = {}
    for _variable, module in modules.values():
        for _name, parameter in named_parameters_once(module):
            seen.setdefault(id(parameter), parameter)
    return list(seen.values()), names


class LeafNamer:
    """Names leaves for one backward call, from the modules visible when it started."""

    def __init__(self, frame: FrameType | None = None) -> None:
        self._frame: FrameType | None = sys._getframe(1) if frame is None else frame
        self._qualified: dict[int, str] | None = None
        self._variables: dict[int, str] = {}
        self._module_variables: dict[int, str] = {}
        self._modules: list[torch.nn.Module] = []  # their modules, alive as long as the namer
        self.tracked: dict[int, str] = {}
        """``id(parameter)`` → its name under the modules the forward was seen to call
        (:mod:`~autograd_viz.sources.pytorch.module_calls`): it names a parameter as the trace
        names its module."""

    def __call__(self, tensor: torch.Tensor) -> str:
        """The leaf's name: given, as its module was called, qualified parameter name,
        variable name, or its shape."""
        given = given_name(tensor)
        if given is not None:
            return given
        tracked = self.tracked.get(id(tensor))
        if tracked is not None:
            return tracked
        qualified = self._look()
        found = qualified.get(id(tensor)) or self._variables.get(id(tensor))
        return shape_name(tuple(tensor.shape)) if found is None else found

    def module_variables(self) -> dict[int, str]:
        """``id(module)`` → the variable a module the calling code can reach is bound to."""
        self._look()
        return self._module_variables

    def _look(self) -> dict[int, str]:
        """Read the calling code's variables, once (Note [Finding the user's modules])."""
        if self._qualified is None:
            modules, self._variables = _visible(self._frame)
            self._qualified = _qualified_names(modules)
            self._module_variables = {key: variable for key, (variable, _) in modules.items()}
            # A call derived later names modules by these ids: they must not be reused.
            self._modules = [module for _, module in modules.values()]
            self._frame = None  # keep no frame (and its locals) past the first lookup
        return self._qualified
