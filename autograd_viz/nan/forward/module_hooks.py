"""The module calls the NaN checks tie each value to, through PyTorch's global module hooks.

One job of :class:`~autograd_viz.nan.forward.checks.TorchNanChecker`:
which module (by qualified name) is running on each thread, and stepping the
checker's function mode aside while a module runs without grad. A call runs
from before the module's own forward pre-hooks to after its own forward hooks
(Note [Where a module call ends] in ``sources/pytorch/module_call_ends.py``): what a hook
computes is charged to its module, and so are the two nodes its backward
hooks run in.

Note [A module called by its model's method]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Paths are the names ``named_modules()`` of the outermost module called gives.
But a model's own method may call a part of it outermost: transformers'
``generate()`` runs ``self.encoder(...)`` once, then the whole model per
token. Named from the encoder, its blocks would be ``block.0``, where the
same blocks are ``encoder.block.0`` in the model's own forward and in its
``state_dict``. So an outermost call is named from the module whose method
called it, found on the stack (the innermost frame whose ``self`` is a
module holding it), and only then from itself. The stack is walked once per
outermost call (about 20 µs on a 45-frame stack of methods, measured here);
the paths of each root are computed once (weakly cached).

Note [Fast paths]
~~~~~~~~~~~~~~~~~
With any TorchFunctionMode active, PyTorch's has_torch_function() is true, and
nn.MultiheadAttention and the nn.Transformer layers skip their inference fast
path (results then differ in the last bits). Without grad there is no node to
tie to a line, so a module that runs without grad runs with the function mode
off the stack, taking the path it takes unwatched; aten ops are checked all the
same. The mode goes back when that module returns.
"""

from __future__ import annotations

import sys
import threading
import weakref
from types import FrameType
from typing import Any

import torch

from autograd_viz.sources.pytorch.compiled import class_name, is_compiling, module_paths
from autograd_viz.sources.pytorch.module_call_ends import (
    CallEnds,
    backward_hooked,
    first_pre_hook,
    input_nodes,
    output_node_follows,
)
from autograd_viz.sources.pytorch.module_calls import named_parameters_once
from autograd_viz.sources.pytorch.origins import (
    HOOKED_OUTPUT_KEY,
    ORIGIN_KEY,
    Origin,
    user_frames,
)


class _Stack(threading.local):
    def __init__(self) -> None:
        self.modules: list[str] = []
        self.calls: list[int] = []
        """``id()`` of each running module, as :attr:`modules` names them: a call ends by its
        module, never by position (a module called inside its own call ends the inner call)."""
        self.names: dict[int, str] = {}
        """Qualified names of the modules under the outermost one running."""
        self.aside_at = -1
        """The module depth at which the function mode stepped aside (Note [Fast paths])."""
        self.root: Any = None
        """A weak reference to the module the paths are named from, while one runs."""


class ModuleHooks:
    """The module running on each thread, by qualified name (``encoder.layers.0``).

    Args:
        modes: the checker's modes, its function mode first once armed (read
            when a module runs, so the list may fill after :meth:`hook`).
    """

    def __init__(self, modes: list[Any]) -> None:
        self._modes = modes
        self._local = _Stack()
        self._names: weakref.WeakKeyDictionary[torch.nn.Module, dict[int, str]] = (
            weakref.WeakKeyDictionary()
        )
        self._handles: list[Any] = []
        self._ends = CallEnds(self._end)

    @property
    def current(self) -> str | None:
        """The innermost module running on this thread, if any."""
        modules = self._local.modules
        return modules[-1] if modules else None

    def parameter_name(self, t: torch.Tensor) -> str | None:
        """``t``'s name in the model running on this thread (``head.fc.weight``), if it is
        one of its parameters; looked up only for a finding (a walk of its parameters)."""
        local = self._local
        root = local.root() if local.modules and local.root is not None else None
        if root is None:
            return None
        return next((name for name, p in named_parameters_once(root) if p is t), None)

    def hook(self) -> None:
        """Follow every module call from now on."""
        hooks = torch.nn.modules.module
        enter = hooks.register_module_forward_pre_hook(self._enter)
        first_pre_hook(enter)
        leave = hooks.register_module_forward_hook(self._leave, always_call=True)
        self._ends.last_global(leave)
        self._handles += [enter, leave]

    def unhook(self) -> None:
        """Stop following module calls."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._ends.close()

    def _enter(self, module: torch.nn.Module, args: Any) -> None:
        if is_compiling():
            return  # Dynamo traces this hook: nothing of ours goes into its graph
        local = self._local
        if local.aside_at < 0 and not torch.is_grad_enabled() and self._function_mode_on_top():
            torch._C._pop_torch_function_stack()
            local.aside_at = len(local.modules)
        if not local.modules:
            root = self._holder(module, sys._getframe(1)) or module
            local.names = self._paths(root)
            local.root = weakref.ref(root)
        path = local.names.get(id(module))
        if path is None:  # not a submodule of the model: made in a forward (kernels' ``Func``)
            kind = class_name(module)
            path = f"{local.modules[-1]}.{kind}" if local.modules else kind  # as the bridge
        local.modules.append(path)
        local.calls.append(id(module))
        self._ends.opened(module)

    def _paths(self, root: torch.nn.Module) -> dict[int, str]:
        names = self._names.get(root)
        if names is None:
            names = self._names[root] = module_paths(root)
        return names

    def _holder(self, module: torch.nn.Module, frame: FrameType | None) -> torch.nn.Module | None:
        """The module whose method, running on this stack, called ``module`` outermost
        and holds it: the innermost such (Note [A module called by its model's method])."""
        while frame is not None:
            code = frame.f_code
            if code.co_argcount and code.co_varnames[0] == "self":
                owner = frame.f_locals.get("self")
                if (
                    owner is not module
                    and isinstance(owner, torch.nn.Module)
                    and id(module) in self._paths(owner)
                ):
                    return owner
            frame = frame.f_back
        return None

    def _leave(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if is_compiling() or self._ends.owns(module):
            return  # ended by its own last hook, after the module's own forward hooks
        self._end(module, args, output)

    def _end(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if is_compiling():
            return
        local = self._local
        calls = local.calls
        key = id(module)
        for depth in range(len(calls) - 1, -1, -1):
            if calls[depth] == key:
                break
        else:
            return  # not followed: it started before the hooks were on
        name = local.modules[depth]
        del local.modules[depth:], calls[depth:]
        try:
            self._tag_backward_hooks(module, name, args, output)
        finally:
            if local.aside_at >= len(local.modules):  # -1 when it never stepped aside
                local.aside_at = -1
                torch._C._push_on_torch_function_stack(self._modes[0])

    def _tag_backward_hooks(
        self, module: torch.nn.Module, name: str, args: Any, output: Any
    ) -> None:
        """Charge the nodes a call's backward hooks run in to its module (Note [Where a
        module call ends]): the input side's is made, the output side's comes next."""
        if not backward_hooked(module):
            return
        nodes = input_nodes(args)
        follows = output_node_follows(module, output)
        if not nodes and not follows:
            return
        frame = next(user_frames(sys._getframe(2)), None)
        if frame is None:
            return
        origin = Origin(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, name)
        for fn in nodes:
            fn.metadata.setdefault(ORIGIN_KEY, origin)
        if follows:
            values = output if isinstance(output, tuple) else (output,)
            for value in values:
                if isinstance(value, torch.Tensor) and value.grad_fn is not None:
                    value.grad_fn.metadata[HOOKED_OUTPUT_KEY] = origin  # type: ignore[index]

    def _function_mode_on_top(self) -> bool:
        depth = torch._C._len_torch_function_stack()
        return (
            bool(self._modes)
            and depth > 0
            and (torch._C._get_function_stack_at(depth - 1) is self._modes[0])
        )
