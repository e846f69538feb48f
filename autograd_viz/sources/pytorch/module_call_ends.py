"""Where a module call starts and ends, whatever order PyTorch runs global and module hooks in.

Both followers of module calls (the bridge's :mod:`~autograd_viz.sources.pytorch.module_calls`
and the NaN checker's :mod:`~autograd_viz.nan.forward.module_hooks`) start a
call in a global forward pre-hook and end it in a global forward hook; this module
makes those two hooks bracket everything PyTorch runs for the call.

Note [Where a module call ends]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
``Module._call_impl`` (torch 2.13) runs, in this order: the global forward
pre-hooks, then the module's own (``prepend=True`` orders only within the
module's own); the input side of the module's backward hooks (one
``BackwardHookFunctionBackward`` node over the inputs); ``forward``; the global
forward hooks, then the module's own; the output side of the backward hooks
(one more ``BackwardHookFunctionBackward`` node, over the outputs, when one of
them requires grad). When anything raises, the ``always_call`` forward hooks
not run yet are run, the global ones first. So a call followed by global hooks
alone starts after a user's global pre-hook registered before ours, and ends
before the module's own forward hooks and a user's global forward hook
registered after ours: what those hooks compute (a NaN made in a forward hook
on ``stages.2.blocks.3``) would be charged to the caller. Hence:

* the pre-hook that starts a call goes first among the global pre-hooks when
  it is registered (:func:`first_pre_hook`);
* the global hook that ends a call goes last among the global forward hooks
  at each call (:meth:`CallEnds.opened`), since a user may add one at any time;
* a module that has forward hooks of its own gets one more while a call of it
  runs, last of its own and ``always_call``; that hook ends the call and the
  global one lets it be (:meth:`CallEnds.owns`). It is taken off when the
  last call of that module ends. A module without forward hooks of its own
  gets none: nothing about it changes (``nn.TransformerEncoderLayer`` leaves
  its fast path when any of its modules has a forward hook; a module with one
  left it already);
* a module whose call sets up backward hooks makes its output side's node
  after every forward hook: :func:`output_node_follows` says when, so that the
  node is charged to the call too (the node of the input side is made inside
  the call already). The hooks' own code runs in backward, inside those two
  nodes: a NaN a backward hook makes is reported on one of them, so their
  module is the call's.

A module called inside its own call (recursion, or a module registered as its
own child) counts its open calls: the hook comes off when the outermost ends.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as nn_module
from torch.utils.hooks import RemovableHandle

End = Callable[[torch.nn.Module, Any, Any], None]
"""A forward hook that ends a module call: ``(module, args, output)``."""


def first_pre_hook(handle: RemovableHandle) -> None:
    """Move the global forward pre-hook of ``handle`` before every other global pre-hook."""
    hooks = nn_module._global_forward_pre_hooks
    if handle.id in hooks and hasattr(hooks, "move_to_end"):
        hooks.move_to_end(handle.id, last=False)


class CallEnds:
    """Ends module calls after every forward hook PyTorch runs for them (Note [Where a module
    call ends]).

    Args:
        end: what ends a call; called from the module's own last hook, or by the
            follower's global forward hook when :meth:`owns` is false.
    """

    def __init__(self, end: End) -> None:
        self._end = end
        self._lock = threading.Lock()
        self._open: dict[int, list[Any]] = {}
        """``id(module)`` → ``[handle of our hook on it, calls of it open]``."""
        self._stale: list[RemovableHandle] = []
        """Our hooks whose calls have ended but that PyTorch was iterating over (an
        exception's ``always_call`` loop): taken off at the next call."""
        self._global: RemovableHandle | None = None

    def last_global(self, handle: RemovableHandle) -> None:
        """The follower's global forward hook, to keep last among the global ones."""
        self._global = handle

    def opened(self, module: torch.nn.Module) -> None:
        """A call of ``module`` starts (from the follower's global pre-hook)."""
        handle = self._global
        if handle is not None:
            hooks = nn_module._global_forward_hooks
            # A user's global hook added since runs after ours otherwise: in the caller. Not
            # while an exception is handled: PyTorch may be iterating over the global hooks.
            if (
                hooks
                and next(reversed(hooks)) != handle.id
                and handle.id in hooks
                and sys.exc_info()[1] is None
            ):
                hooks.move_to_end(handle.id)  # type: ignore[attr-defined]
        if self._stale:
            self._drop_stale()
        own = module._forward_hooks
        if not own:
            return
        with self._lock:
            entry = self._open.get(id(module))
            if entry is None:
                mine = module.register_forward_hook(self._ended, always_call=True)
                self._open[id(module)] = [mine, 1]
            else:
                entry[1] += 1
                if next(reversed(own)) != entry[0].id:
                    own.move_to_end(entry[0].id)  # type: ignore[attr-defined]

    def owns(self, module: torch.nn.Module) -> bool:
        """Whether a call of ``module`` ends in our hook on it, not in the global one."""
        return id(module) in self._open

    def close(self) -> None:
        """Take every hook of ours off (the follower stops following)."""
        with self._lock:
            handles = [entry[0] for entry in self._open.values()] + self._stale
            self._open.clear()
            self._stale = []
        for handle in handles:
            handle.remove()

    def _ended(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        with self._lock:
            entry = self._open.get(id(module))
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._open[id(module)]
                    if sys.exc_info()[1] is None:
                        entry[0].remove()
                    else:  # PyTorch may be iterating over the module's hooks right now
                        self._stale.append(entry[0])
        self._end(module, args, output)

    def _drop_stale(self) -> None:
        with self._lock:
            stale, self._stale = self._stale, []
        for handle in stale:
            handle.remove()


def backward_hooked(module: torch.nn.Module) -> bool:
    """Whether a call of ``module`` sets up backward hooks (full ones or pre-hooks, its own
    or global), as ``Module._call_impl`` decides."""
    if not (
        module._backward_pre_hooks
        or module._backward_hooks
        or nn_module._global_backward_pre_hooks
        or nn_module._global_backward_hooks
    ):
        return False
    if module._backward_pre_hooks or nn_module._global_backward_pre_hooks:
        return True
    full, _old_style = module._get_backward_hooks()
    return bool(full)


def output_node_follows(module: torch.nn.Module, output: Any) -> bool:
    """Whether PyTorch makes one more node for this call once its forward hooks have run:
    the output side of its backward hooks (Note [Where a module call ends])."""
    if not torch.is_grad_enabled() or not backward_hooked(module):
        return False
    if isinstance(output, torch.Tensor):
        return output.requires_grad
    if isinstance(output, tuple):
        return any(isinstance(value, torch.Tensor) and value.requires_grad for value in output)
    return False


def input_nodes(args: Any) -> list[Any]:
    """The nodes the input side of a call's backward hooks made: the ``grad_fn`` of the
    tensors among ``args`` that is a ``BackwardHookFunctionBackward``."""
    if not isinstance(args, tuple):
        return []
    out = []
    for value in args:
        if isinstance(value, torch.Tensor):
            fn = value.grad_fn
            if fn is not None and fn.name() == "BackwardHookFunctionBackward":
                out.append(fn)
    return out


__all__ = [
    "CallEnds",
    "backward_hooked",
    "first_pre_hook",
    "input_nodes",
    "output_node_follows",
]
