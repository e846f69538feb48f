"""The user's hooks on a PyTorch node: which, where they were written, what they changed.

Note [Seeing the user's hooks]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A PyTorch node does not show its hooks to Python. What it runs, in order:
the tensor hooks of its input slots (``Tensor.register_hook``), its pre-hooks,
the node, for ``AccumulateGrad`` the leaf's post-accumulate-grad hooks, its
post hooks. They are found where PyTorch keeps them in Python:

- a leaf's tensor hooks and post-accumulate-grad hooks: the leaf's
  ``_backward_hooks`` and ``_post_accumulate_grad_hooks``;
- a non-leaf tensor's hooks: its ``_backward_hooks``, which its ``grad_fn``
  runs for slot ``output_nr``. The node cannot reach the tensor, so
  ``Tensor.register_hook`` is wrapped (once, when the bridge is first
  imported) to put that dict in the node's ``metadata`` as well: the same
  dict, so hooks removed later are gone from it too. The hook functions are
  the user's own, called by PyTorch as before;
- a module's ``register_full_backward_hook`` and
  ``register_full_backward_pre_hook``: PyTorch's ``BackwardHook`` runs them
  in a post hook of a ``BackwardHookFunctionBackward`` node it makes around
  the module's inputs (full backward hooks) and outputs (pre hooks); its
  ``setup_input_hook`` and ``setup_output_hook`` are wrapped to note the
  ``BackwardHook`` in that node's ``metadata``.

Hooks registered in C++ (DDP's reducer) cannot be seen. What a hook changed
is seen where the bridge's own hooks see the gradient before and after it:
a slot's tensor hooks between the sum delivered to the slot (followed by
copy) and what the node's pre-hook receives; a module's hooks between the
``BackwardHookFunctionBackward`` node's inputs and its outputs; a
post-accumulate-grad hook only after (``.grad`` when the node ends).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

TENSOR_HOOKS = "autograd_viz.tensor_hooks"
"""The key of a node's ``metadata``: ``{input slot: the tensor's _backward_hooks}``."""
MODULE_HOOKS = "autograd_viz.module_hooks"
"""The key of a ``BackwardHookFunctionBackward`` node's ``metadata``: ``(kind, BackwardHook)``."""

TENSOR_PRE = "tensor_pre"
POST_ACCUMULATE_GRAD = "post_accumulate_grad"
MODULE_FULL_BACKWARD = "module_full_backward"
MODULE_FULL_BACKWARD_PRE = "module_full_backward_pre"
WATCHERS_OWN = "_autograd_viz_watcher"
"""An attribute a hook of one of our own watchers carries (the gradient watch's): not the
user's, so not listed on the node nor recorded as a hook event."""


@dataclass(frozen=True, slots=True)
class UserHook:
    """One of the user's hooks on a node."""

    kind: str
    """``tensor_pre``, ``post_accumulate_grad``, ``module_full_backward``,
    ``module_full_backward_pre``."""
    slot: int | None
    """The input slot, for a tensor hook."""
    name: str
    """The function's ``__qualname__``."""
    location: str | None
    """``file:line`` where the function was defined, if Python knows it."""


def _describe(kind: str, slot: int | None, hook: Any) -> UserHook:
    fn = hook
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)  # a bound method
    fn = getattr(fn, "__wrapped__", fn)
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    code = getattr(fn, "__code__", None)
    location = None if code is None else f"{code.co_filename}:{code.co_firstlineno}"
    return UserHook(kind, slot, str(name), location)


def hooks_of(fn: Any, variable: torch.Tensor | None) -> tuple[UserHook, ...]:
    """The user's hooks on the PyTorch node ``fn`` (``variable``: an AccumulateGrad's leaf)."""
    found: list[UserHook] = []
    if variable is not None:
        for hook in (getattr(variable, "_backward_hooks", None) or {}).values():
            found.append(_describe(TENSOR_PRE, 0, hook))
        for hook in (getattr(variable, "_post_accumulate_grad_hooks", None) or {}).values():
            if not getattr(hook, WATCHERS_OWN, False):
                found.append(_describe(POST_ACCUMULATE_GRAD, None, hook))
        return tuple(found)
    if not _noted:
        return ()  # no hook was ever noted on a node: no metadata to read
    metadata = fn.metadata
    slots = metadata.get(TENSOR_HOOKS)
    if slots:
        for slot, hooks in sorted(slots.items()):
            for hook in hooks.values():
                found.append(_describe(TENSOR_PRE, slot, hook))
    module = metadata.get(MODULE_HOOKS)
    if module is not None:
        kind, backward_hook = module
        hooks = backward_hook.user_pre_hooks if kind == MODULE_FULL_BACKWARD_PRE else None
        if kind == MODULE_FULL_BACKWARD:
            hooks = backward_hook.user_hooks
        for hook in hooks or ():
            found.append(_describe(kind, None, hook))
    return tuple(found)


def counts(hooks: tuple[UserHook, ...]) -> tuple[tuple[str, int], ...]:
    """``(kind, count)`` per kind, as a trace's node lists its hooks."""
    if not hooks:
        return ()  # nearly every node: no dict made
    tally: dict[str, int] = {}
    for hook in hooks:
        tally[hook.kind] = tally.get(hook.kind, 0) + 1
    return tuple(tally.items())


# -- noting hooks where the node can find them (Note [Seeing the user's hooks]) ---------


def _note_tensor_hooks(tensor: torch.Tensor) -> None:
    fn: Any = tensor.grad_fn
    hooks = tensor._backward_hooks
    if fn is not None and hooks is not None:
        fn.metadata.setdefault(TENSOR_HOOKS, {})[tensor.output_nr] = hooks
        if not _noted:
            _noted.append(True)


def _note_module_hooks(kind: str, backward_hook: Any, result: Any) -> None:
    for t in result if isinstance(result, tuple | list) else (result,):
        fn = getattr(t, "grad_fn", None)
        if fn is not None and fn.name() == "BackwardHookFunctionBackward":
            fn.metadata[MODULE_HOOKS] = (kind, backward_hook)
            if not _noted:
                _noted.append(True)
            return


_installed = False
_noted: list[bool] = []
"""Non-empty once a hook was noted on some node (until then no node's metadata is read)."""


def install() -> None:
    """Wrap the registrations that a node cannot show (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    register = torch.Tensor.register_hook

    @functools.wraps(register)
    def register_hook(self: torch.Tensor, hook: Any) -> Any:
        handle = register(self, hook)
        with contextlib.suppress(Exception):  # noting never fails the registration
            _note_tensor_hooks(self)
        return handle

    torch.Tensor.register_hook = register_hook  # type: ignore[method-assign]
    original = getattr(torch.autograd.Function, "_register_hook", None)
    if callable(original):
        # See Note [Keyed hooks]; C++ reads it from torch.autograd.Function by name.
        torch.autograd.Function._register_hook = staticmethod(  # type: ignore[method-assign]
            _keyed(original)
        )
    backward_hook = getattr(torch.utils.hooks, "BackwardHook", None)
    if backward_hook is None:
        return
    for method, kind in (
        ("setup_input_hook", MODULE_FULL_BACKWARD),
        ("setup_output_hook", MODULE_FULL_BACKWARD_PRE),
    ):
        original = getattr(backward_hook, method, None)
        if original is not None:
            setattr(backward_hook, method, _noting(original, kind))


# Note [Keyed hooks]
# ~~~~~~~~~~~~~~~~~~
# ``node.register_hook`` and ``register_prehook`` are C++ that calls
# ``torch.autograd.Function._register_hook`` in Python, which makes a
# ``RemovableHandle`` (a weak reference, a global counter) to put the hook in
# the node's hook dict; ``remove()`` is Python again. A watch hooks every node
# of every call and removes every hook when the call ends: that was two
# Python calls and an object per hook, as much as a third of what the hook
# costs to run. So ``_register_hook`` is wrapped (once, by :func:`install`):
# inside :func:`keyed_hooks` on the thread that entered it, a hook goes into
# the node's dict under the watch's own key and the "handle" returned is the
# dict itself, from which :func:`remove_keyed` takes the key again. Anywhere
# else (the user's registrations, other threads) PyTorch's own function runs,
# as before. The dict is an ``OrderedDict``, as PyTorch makes it: a
# ``RemovableHandle`` the user makes later on the same node refers to it weakly.


class _Keys(threading.local):
    key: object | None = None


_KEYS = _Keys()


@contextlib.contextmanager
def keyed_hooks(key: object) -> Iterator[None]:
    """Node hooks this thread registers inside go in under ``key`` (Note [Keyed hooks]).

    Their ``register_hook`` and ``register_prehook`` return the node's hook dict;
    :func:`remove_keyed` removes the hook. Without :func:`install` they return
    PyTorch's handles, which :func:`remove_keyed` removes too.
    """
    _KEYS.key = key
    try:
        yield
    finally:
        _KEYS.key = None


def remove_keyed(handle: Any, key: object) -> None:
    """Remove a hook registered inside :func:`keyed_hooks` (``handle``: what registering gave)."""
    if type(handle) is OrderedDict:
        handle.pop(key, None)
    else:
        handle.remove()


def _keyed(original: Any) -> Any:
    @functools.wraps(original)
    def register(backward_hooks: Any, hook: Any) -> Any:
        key = _KEYS.key
        if key is None:
            return original(backward_hooks, hook)
        if backward_hooks is None:
            backward_hooks = OrderedDict()
        backward_hooks[key] = hook
        return backward_hooks, backward_hooks

    return register


def _noting(original: Any, kind: str) -> Any:
    @functools.wraps(original)
    def setup(self: Any, args: Any) -> Any:
        result = original(self, args)
        with contextlib.suppress(Exception):  # noting never fails the forward
            _note_module_hooks(kind, self, result)
        return result

    return setup


__all__ = [
    "MODULE_FULL_BACKWARD",
    "MODULE_FULL_BACKWARD_PRE",
    "POST_ACCUMULATE_GRAD",
    "TENSOR_PRE",
    "UserHook",
    "counts",
    "hooks_of",
    "install",
    "keyed_hooks",
    "remove_keyed",
]
