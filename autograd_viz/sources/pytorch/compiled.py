"""``torch.compile``d code under watch: its regions stay compiled, and are seen at their edges.

Note [Compiled regions]
~~~~~~~~~~~~~~~~~~~~~~~
Dynamo does not compile a frame while a user's ``TorchDispatchMode`` is
active (it runs it eagerly, and the results then differ in the last bits),
and it traces a ``TorchFunctionMode`` and global module hooks into the graph
it compiles (our Python code there makes graph breaks). So what watches the
forward pass (the NaN checks' modes, the module hooks) must be out of the
way while compiled code runs, and the program must run exactly as it does
unwatched:

- every function ``torch.compile`` returns (for a module, its
  ``OptimizedModule``'s ``forward``) is wrapped once, when it is made: with
  nothing registered on the thread (:func:`around_compiled`) the wrapper
  calls straight through, else the registered callable runs the region
  (the NaN checker steps its modes aside and checks the region's inputs and
  outputs at its boundary). ``OptimizedModule.__call__`` is wrapped the same
  way, on the class, so a model compiled before we were loaded is a region
  too. Dynamo's ``OptimizeContext`` inherits ``__call__`` in some PyTorch
  versions (2.11) and defines it in others (2.13): it is found through the
  class's MRO, and where it cannot be found one line says so;
- why it matters: a compiled frame entered while a ``TorchDispatchMode`` is
  on the stack is not just run eagerly (a few ulps off) but marked by Dynamo
  to be skipped from then on, so the program stays eager after watching
  ends. As a second line of defence for code compiled where no wrapper
  reaches (a function compiled before we were loaded), the checker's
  dispatch mode says ``ignore_compile_internals`` (Dynamo then compiles
  under it, and does not skip), and its function mode is the identity while
  Dynamo traces, so the graph is the one compiled unwatched;
- global module hooks return at once while Dynamo traces them
  (``torch.compiler.is_compiling()``), so they leave no trace in the graph;
- PyTorch's warning that a compiled module sees global hooks (ours) is not
  shown while the bridge is armed: the hooks are ours and inert there.

The backward of a compiled region is PyTorch's ``CompiledFunctionBackward``
node, watched like any other. Compiled autograd is not watched (one line).
"""

from __future__ import annotations

import functools
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch

from autograd_viz.sources.once import warn_once

Around = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]
"""``around(compiled, owner, args, kwargs)`` runs one call of a compiled region."""


class _Local(threading.local):
    def __init__(self) -> None:
        self.around: Around | None = None


_LOCAL = _Local()
_lock = threading.Lock()
_installed = False
_GLOBAL_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"
_filter: tuple[Any, ...] | None = None
_REGION = "_autograd_viz_region"
CANNOT_STEP_AROUND = (
    "autograd-viz: this PyTorch's torch.compile could not be wrapped: while the forward "
    "checks are on, compiled code may run eagerly (results may differ in the last bits); "
    "watch_nan(forward=False) or `autograd-viz nan --no-forward` leaves it compiled"
)


def around_compiled(around: Around | None) -> Around | None:
    """Run this thread's compiled regions through ``around`` (``None``: straight); returns
    the one it replaces."""
    install()
    previous = _LOCAL.around
    _LOCAL.around = around
    return previous


def _region(compiled: Callable[..., Any], owner: Any) -> Callable[..., Any]:
    @functools.wraps(compiled)  # keeps Dynamo's attributes (_torchdynamo_orig_callable, ...)
    def compiled_region(*args: Any, **kwargs: Any) -> Any:
        around = _LOCAL.around
        if around is None:
            return compiled(*args, **kwargs)
        return around(compiled, owner, args, kwargs)

    setattr(compiled_region, _REGION, True)
    return compiled_region


def install() -> None:
    """Wrap what ``torch.compile`` makes from now on (Note [Compiled regions]); idempotent."""
    global _installed
    with _lock:
        if _installed:
            return
        eval_frame = sys.modules.get("torch._dynamo.eval_frame")
        if eval_frame is None:
            _wrap_torch_compile()  # Dynamo is imported by the first torch.compile
            return
        context = getattr(eval_frame, "OptimizeContext", None)
        # Through the MRO: 2.11's OptimizeContext inherits __call__, 2.13's defines it.
        original: Any = _class_call(context)
        module = getattr(eval_frame, "OptimizedModule", None)
        module_call: Any = _class_call(module)
        _installed = True
    if original is None or module_call is None:
        warn_once(CANNOT_STEP_AROUND)
    if original is not None:
        _wrap_optimize_context(context, original)
    if module_call is not None:
        _wrap_optimized_module(module, module_call)


def _class_call(cls: Any) -> Callable[..., Any] | None:
    """What calling an instance of ``cls`` runs, its own or inherited through the MRO;
    ``None`` if ``cls`` is not a class or its instances are not callable."""
    for klass in cls.__mro__ if isinstance(cls, type) else ():
        if "__call__" in vars(klass):
            call: Callable[..., Any] = vars(klass)["__call__"]
            return call
    return None


def _wrap_optimize_context(context: Any, original: Callable[..., Any]) -> None:

    @functools.wraps(original)
    def call(self: Any, fn: Any) -> Any:
        result = original(self, fn)
        if isinstance(result, torch.nn.Module) or isinstance(fn, type) or not callable(result):
            return result  # a module's forward is wrapped when OptimizedModule makes it
        return _region(result, getattr(fn, "__self__", None))

    context.__call__ = call


def _wrap_optimized_module(module: Any, module_call: Callable[..., Any]) -> None:
    """A module compiled before we were loaded gets its ``forward`` wrapped at its first call."""

    @functools.wraps(module_call)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        forward = vars(self).get("forward")
        if forward is not None and not getattr(forward, _REGION, False):
            self.forward = _region(forward, getattr(self, _WRAPPED, None))
        return module_call(self, *args, **kwargs)

    module.__call__ = call


def _wrap_torch_compile() -> None:
    original = torch.compile
    if getattr(original, "_autograd_viz_wrapped", False):
        return

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:
        import torch._dynamo.eval_frame  # noqa: F401 - what torch.compile imports first

        install()
        return original(*args, **kwargs)

    compile._autograd_viz_wrapped = True  # type: ignore[attr-defined]
    torch.compile = compile


def hide_global_hooks_warning(hide: bool) -> None:
    """Hide PyTorch's warning that a compiled module sees global module hooks (ours)."""
    global _filter
    if hide and _filter is None:
        warnings.filterwarnings("ignore", message=_GLOBAL_HOOKS_WARNING, category=UserWarning)
        _filter = warnings.filters[0]
    elif not hide and _filter is not None:
        if _filter in warnings.filters:
            warnings.filters.remove(_filter)  # type: ignore[attr-defined]
            warnings._filters_mutated()  # type: ignore[attr-defined]
        _filter = None


is_compiling = torch.compiler.is_compiling
"""True while Dynamo traces: a global hook returns at once (Note [Compiled regions])."""


def region_name(compiled: Callable[..., Any], owner: Any) -> str:
    """How a compiled region is named in a finding: ``compiled MLP.forward``, ``compiled f``."""
    inner = getattr(compiled, "_torchdynamo_orig_callable", compiled)
    if owner is not None:
        return f"compiled {type(owner).__name__}"
    return f"compiled {getattr(inner, '__qualname__', None) or repr(inner)}"


def module_paths(root: torch.nn.Module) -> dict[int, str]:
    """The path of every module under ``root`` (by ``id``) as the program reaches it, ``root``
    itself named by its class: ``torch.compile(model)`` is named as ``model`` (its class, and
    ``fc`` for ``model.fc``), not ``OptimizedModule`` and ``_orig_mod.fc``.

    An ``OptimizedModule`` hands attribute reads on to the module it wraps, its
    ``_orig_mod``, so ``compiled.fc`` is ``model.fc``: that part of the path is
    left out, at the root and inside (``encoder._orig_mod.lin`` is ``encoder.lin``).
    """
    inner = original(root)
    paths = {id(root): type(inner).__name__, id(inner): type(inner).__name__}
    for path, module in inner.named_modules():
        if path:
            paths[id(module)] = unwrapped_path(path)
    return paths


_WRAPPED = "_orig_mod"
"""The attribute under which an ``OptimizedModule`` holds the module it compiled."""


def unwrapped_path(path: str) -> str:
    """A module's or parameter's path as the program reaches it: without the
    ``_orig_mod`` an ``OptimizedModule`` holds its module under (``fc.bias`` for
    ``_orig_mod.fc.bias``)."""
    if _WRAPPED not in path:
        return path
    return ".".join(part for part in path.split(".") if part != _WRAPPED)


def original(module: torch.nn.Module) -> torch.nn.Module:
    """The module a compiled module (``OptimizedModule``) wraps (through any number of them);
    ``module`` itself when it is not one."""
    # Without Dynamo imported there is no OptimizedModule, and importing it takes a second.
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    while eval_frame is not None and isinstance(module, eval_frame.OptimizedModule):
        module = getattr(module, _WRAPPED)
    return module


def class_name(module: torch.nn.Module) -> str:
    """A module's class as the program wrote it: a compiled module's is the one it wraps."""
    kind = type(module).__name__
    return kind if kind != "OptimizedModule" else type(original(module)).__name__


__all__ = [
    "Around",
    "around_compiled",
    "class_name",
    "hide_global_hooks_warning",
    "install",
    "is_compiling",
    "module_paths",
    "original",
    "region_name",
    "unwrapped_path",
]
