"""What a PyTorch forward did with each parameter: its uses, its cuts, its modules' outputs.

A :class:`ForwardLog` is filled between two backward calls of one thread by a
``TorchFunctionMode`` (:class:`UsesMode`, every torch function and tensor
method with the user's line) and PyTorch's global module hooks. It keeps, per
parameter, its first use without grad and its last use with grad; every cut
(``.detach()``, ``.data``, ``.item()``, ``.numpy()``, ``.tolist()``,
``torch.tensor(t)``, ...) of a tensor that required grad; and each module's
outputs. :mod:`autograd_viz.grads.torch_calls` reads it when the next
backward call ends, then starts a new one.

Note [What a forward log holds]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Nodes cannot be weakly referenced, but tensors can. Module outputs, one per
module call, are kept by weak reference and their ``grad_fn`` read when the
call is explained: a branch the program dropped is freed when it would be
unwatched, and a parameter whose dropped output is gone is explained by its
last use (the line), not by that output. A cut is kept with its node, because
the cut tensor is usually dropped at once (``h = h.detach()``): the graph under
it then lives until the backward call ends, for at most :data:`KEPT_CUTS` cuts
(the oldest go first). The log is emptied when each backward call ends.

Note [The program's line]
~~~~~~~~~~~~~~~~~~~~~~~~~
A line shown is the program's own: the first frame outwards that is not
torch's or ours and not an installed package's (``site-packages``), so a
``timm`` or ``transformers`` model run under ``no_grad`` is shown at the
program's ``feats = model.forward_features(x)``, not inside the library. A
stack of installed code alone gives its first frame that is not torch's nor
the standard library's (``contextlib``'s wrapper of a function decorated with
``@torch.no_grad()`` is no one's line).

Note [Uses the program makes]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A use or a cut counts when a module is running (its forward, and the torch
code it calls) or when the program's own line called the torch function.
Torch's machinery outside any forward reads parameters for its own ends:
DDP's constructor broadcasts each one through ``p.detach()``, an optimizer
reads them in its step. Counted, those would explain a parameter that a
forward never used as "cut at ``model = DDP(model)``".
"""

from __future__ import annotations

import itertools
import os
import sys
import sysconfig
import threading
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from autograd_viz.grads.report import Where
from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch import compiled
from autograd_viz.sources.pytorch.caller_line import call_from, caller
from autograd_viz.sources.pytorch.compiled import is_compiling, original
from autograd_viz.sources.pytorch.op_values import new_nodes, tensors
from autograd_viz.sources.pytorch.origins import ORIGIN_KEY, Origin, user_frames

KEPT = 4096
"""Module outputs a forward log keeps (Note [What a forward log holds])."""
KEPT_CUTS = 256
"""Cuts a forward log keeps, with their nodes (Note [What a forward log holds])."""

BACKWARD_CALLS = frozenset({torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad})

CUTS: dict[Any, str] = {
    torch.Tensor.detach: ".detach()",
    torch.Tensor.detach_: ".detach_()",
    torch.Tensor.item: ".item()",
    torch.Tensor.tolist: ".tolist()",
    torch.Tensor.numpy: ".numpy()",
    torch.Tensor.__array__: "a NumPy array (np.asarray)",
    torch.Tensor.__float__: "float()",
    torch.Tensor.__int__: "int()",
    torch.tensor: "torch.tensor(t) (a copy)",
    torch.Tensor.new_tensor: ".new_tensor(t) (a copy)",
}
"""Torch functions whose result carries no gradient back to a tensor that requires grad."""

_DATA = torch._C.TensorBase.data

# Note [Integer results cut]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# An op whose one result is an integer or bool tensor, from an input that requires
# grad, carries no gradient back: ``argmax`` (a mixture-of-experts router's top-1),
# ``argmin``, ``x > 0`` (``gt``), ``.long()``. A parameter whose only way to the loss goes
# through one gets no gradient, and what cut it is that op, at its line: "cut by
# argmax() ...: it gives integers, which carry no gradient", not "what its last use made
# never reaches the loss".
# Ops with several results (``max(x, dim)``, ``topk``: values and indices) keep a
# gradient through their values and are not cuts.


def _integer_result(out: Any) -> bool:
    """Whether ``out`` is one tensor of integers or bools (Note [Integer results cut])."""
    return (
        isinstance(out, torch.Tensor)
        and not out.requires_grad
        and not (out.is_floating_point() or out.is_complex())
    )


def _integer_cut(func: Any, out: torch.Tensor) -> tuple[str, str]:
    """How a cut by ``func`` is named, and what it gives: ``("argmax()", "integers")``,
    ``("gt()", "bools")`` (``x > 0``; the line shows which)."""
    name = getattr(func, "__name__", None) or str(func)
    result = "bools" if out.dtype is torch.bool else "integers"
    return f"{name.strip('_')}()", result


"""``Tensor.data``: the mode sees its getter as ``_DATA.__get__``."""

_WRAPPERS = ("DistributedDataParallel", "DataParallel")
"""Modules whose parameters are named as the module they wrap names them (as DDP does)."""


@dataclass
class Use:
    """What the forward did with one parameter."""

    no_grad: tuple[Where | None, str | None, str] | None = None
    """The first use without grad: line, module, and ``no_grad`` or ``inference_mode``."""
    grad: tuple[Where | None, str | None] | None = None
    """The last use with grad: line and module."""


@dataclass
class Cut:
    """A tensor that required grad, cut on the way to the loss."""

    order: int
    kind: str
    where: Where | None
    node: Any
    """The cut tensor's ``grad_fn`` (``None`` for a leaf), held (Note [What a forward
    log holds])."""
    leaf: int | None
    """``id`` of the cut leaf (a parameter detached itself)."""
    made_in: str | None
    """The module whose output was cut, or that made the cut tensor."""
    result: str | None = None
    """What an op whose result carries no gradient gives: ``"integers"``, ``"bools"``
    (Note [Integer results cut])."""


@dataclass
class Output:
    """A tensor that a module returned."""

    order: int
    module: str
    where: Where | None
    tensor: weakref.ref[torch.Tensor]
    index: int

    @property
    def node(self) -> Any:
        """The output's node, while the output lives."""
        t = self.tensor()
        return None if t is None else t.grad_fn


@dataclass
class Root:
    """A module called from outside any module: the parameters it holds are looked at."""

    module: torch.nn.Module
    paths: dict[int, str]
    """Every module under it (by ``id``) by its path, itself by its class name."""
    parameters: list[tuple[str, str | None, int, torch.nn.Parameter]]
    """``(name, module path, module id, parameter)`` of each parameter under it."""


@dataclass
class ForwardLog:
    """One thread's forward between two backward calls (see the module docstring)."""

    roots: dict[int, Root] = field(default_factory=dict)
    called: set[int] = field(default_factory=set)
    """``id`` of every module that ran."""
    uses: dict[int, Use] = field(default_factory=dict)
    """By the parameter's ``id``."""
    bare: dict[int, weakref.ref[torch.nn.Parameter]] = field(default_factory=dict)
    """Parameters used outside every root module's, while they live (Note [Parameters
    nobody holds])."""
    owned: set[int] = field(default_factory=set)
    """``id`` of every parameter of the roots."""
    cuts: deque[Cut] = field(default_factory=lambda: deque(maxlen=KEPT_CUTS))
    outputs: deque[Output] = field(default_factory=lambda: deque(maxlen=KEPT))
    module_of_node: dict[int, tuple[str, weakref.ref[torch.Tensor]]] = field(default_factory=dict)
    """``id(node)`` → (outermost module that returned it, the tensor it is the node of)."""


_roots_cache: dict[int, tuple[Any, Root]] = {}


def root_of(module: torch.nn.Module) -> Root:
    """The :class:`Root` of ``module`` (cached while the module lives)."""
    cached = _roots_cache.get(id(module))
    if cached is not None and cached[0]() is module:
        return cached[1]
    inner: torch.nn.Module = original(module)
    wrapped = getattr(inner, "module", None)
    while type(inner).__name__ in _WRAPPERS and isinstance(wrapped, torch.nn.Module):
        inner = wrapped
        wrapped = getattr(inner, "module", None)
    paths = {id(module): type(inner).__name__}
    for path, sub in inner.named_modules():
        paths[id(sub)] = path or type(inner).__name__
    parameters: list[tuple[str, str | None, int, torch.nn.Parameter]] = []
    for name, p in inner.named_parameters():
        owner_path, _, _ = name.rpartition(".")
        owner = inner.get_submodule(owner_path) if owner_path else inner
        parameters.append((name, owner_path or type(inner).__name__, id(owner), p))
    root = Root(module, paths, parameters)
    if len(_roots_cache) > 256:
        _roots_cache.clear()
    _roots_cache[id(module)] = (weakref.ref(module), root)
    return root


def _in_place(func: Any) -> bool:
    """Whether ``func`` writes its first argument: an optimizer's step or an initializer
    writing a parameter does not use it (``add_``, ``_foreach_mul_``, ``__iadd__``)."""
    name = getattr(func, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or name in _IN_PLACE_OPERATORS


_IN_PLACE_OPERATORS = frozenset(
    {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__ipow__", "__imatmul__"}
)


def user_line(frame: Any) -> Where | None:
    """The program's line from ``frame`` outwards (Note [The program's line])."""
    found = plumbing = None
    for candidate in user_frames(frame):
        if _installed(candidate.f_code.co_filename) is _STANDARD:
            plumbing = plumbing or candidate  # contextlib's decorators, functools' wrappers
            continue
        found = found or candidate
        if not _installed(candidate.f_code.co_filename):
            found = candidate
            break
    found = found or plumbing
    if found is None:
        return None
    return Where(found.f_code.co_filename, found.f_lineno, found.f_code.co_name)


_INSTALLED = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")
_STDLIB = tuple({os.path.join(sysconfig.get_paths()[key], "") for key in ("stdlib", "platstdlib")})
_STANDARD = "standard"
"""What :func:`_installed` says of the standard library's files: installed, and never the
line shown when another frame is there."""
_installed_files: dict[str, bool | str] = {}


def _installed(filename: str) -> bool | str:
    """Whether ``filename`` is an installed package's; :data:`_STANDARD` for the standard
    library's (truthy: installed too)."""
    known = _installed_files.get(filename)
    if known is None:
        if any(part in filename for part in _INSTALLED):
            known = True
        elif filename.startswith(_STDLIB):
            known = _STANDARD
        else:
            known = False
        _installed_files[filename] = known
    return known


class _Local(threading.local):
    def __init__(self) -> None:
        self.modules: list[tuple[str, Root]] = []
        self.aside_at = -1


class UsesTracker:
    """Fills a :class:`ForwardLog` on the thread that armed it.

    Args:
        backward: called for each backward call seen, ``(func, args, kwargs, frame)``;
            it runs the call and returns its result.
    """

    def __init__(self, backward: Any) -> None:
        self.log = ForwardLog()
        self._backward = backward
        self._owner = threading.get_ident()
        self._local = _Local()
        self._order = itertools.count()
        self._handles: list[Any] = []
        self._hid_warning = False
        self.mode = UsesMode(self)

    # -- arming ------------------------------------------------------------------------
    def arm(self) -> None:
        # Our global module hooks make PyTorch warn at each torch.compile(module); hidden as
        # the bridge hides it, and shown again on disarming unless it was hidden already.
        self._hid_warning = getattr(compiled, "_filter", None) is None
        compiled.hide_global_hooks_warning(True)
        hooks = torch.nn.modules.module
        self._handles += [
            hooks.register_module_forward_pre_hook(self._enter),
            hooks.register_module_forward_hook(self._leave, always_call=True),
        ]
        self.mode.__enter__()

    def disarm(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.mode.__exit__(None, None, None)
        if self._hid_warning:
            compiled.hide_global_hooks_warning(False)

    def new_log(self) -> ForwardLog:
        """Hand over the log and start a new one (a backward call ended)."""
        log, self.log = self.log, ForwardLog()
        return log

    # -- module calls ------------------------------------------------------------------
    def _enter(self, module: torch.nn.Module, args: Any) -> None:
        if is_compiling():
            return
        if threading.get_ident() != self._owner:
            # A function mode belongs to a thread: say once that this one is not watched.
            warn_once(
                f"autograd-viz grads: watches the thread that started it; modules run on "
                f"thread {threading.current_thread().name!r} are not explained"
            )
            return
        local = self._local
        if not local.modules:
            root = root_of(module)
            if id(root.module) not in self.log.roots:
                self.log.roots[id(root.module)] = root
                self.log.owned.update(id(p) for *_, p in root.parameters)
        else:
            root = local.modules[-1][1]
        path = root.paths.get(id(module)) or type(module).__name__
        local.modules.append((path, root))
        self.log.called.add(id(module))
        if torch.is_grad_enabled():
            return
        mode = "inference_mode" if torch.is_inference_mode_enabled() else "no_grad"
        where = user_line(sys._getframe(1))
        for p in module.parameters(recurse=False):
            use = self.log.uses.setdefault(id(p), Use())
            if use.no_grad is None:
                use.no_grad = (where, path, mode)
        # Note [Fast paths] in nan/forward/modules.py: off the stack while the
        # module runs without grad, so that it takes the path it takes unwatched.
        if local.aside_at < 0 and self._mode_on_top():
            torch._C._pop_torch_function_stack()
            local.aside_at = len(local.modules) - 1

    def _leave(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if is_compiling() or threading.get_ident() != self._owner:
            return
        local = self._local
        if not local.modules:
            return
        path, _ = local.modules.pop()
        if local.aside_at == len(local.modules):
            local.aside_at = -1
            torch._C._push_on_torch_function_stack(self.mode)
        if not torch.is_grad_enabled():
            return
        where = None
        for index, t in enumerate(tensors(output)):
            fn = t.grad_fn
            if fn is None:
                continue
            where = where or user_line(sys._getframe(1))
            ref = weakref.ref(t)
            self.log.outputs.append(Output(next(self._order), path, where, ref, index))
            if len(self.log.module_of_node) >= 2 * KEPT:
                self.log.module_of_node.clear()  # a run without backward: stay bounded
            self.log.module_of_node[id(fn)] = (path, ref)

    def _mode_on_top(self) -> bool:
        depth = torch._C._len_torch_function_stack()
        return depth > 0 and torch._C._get_function_stack_at(depth - 1) is self.mode

    @property
    def current_module(self) -> str | None:
        modules = self._local.modules
        return modules[-1][0] if modules else None

    # -- torch functions ---------------------------------------------------------------
    def call(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        frame = caller(sys._getframe(2), func)
        if func in BACKWARD_CALLS:
            return self._backward(func, args, kwargs, frame)
        grad = torch.is_grad_enabled()
        # Note [Uses the program makes]: inside a module, or called by the program itself.
        watched = bool(self._local.modules) or (
            frame is not None and next(user_frames(frame), None) is frame
        )
        used = (
            [
                t
                for t in tensors(args[1:] if _in_place(func) else (args, kwargs))
                if isinstance(t, torch.nn.Parameter)
            ]
            if watched
            else []
        )
        cut = CUTS.get(func) if watched else None
        if watched and cut is None and getattr(func, "__self__", None) is _DATA:
            cut = ".data"
        start = torch._C._autograd._get_sequence_nr()
        out = call_from(frame, func, args, kwargs)
        if used and not isinstance(out, torch.Tensor) and next(tensors(out), None) is None:
            used = []  # a question about it (.dim(), .size()), not a use of its values
        if not grad:
            if used:
                self._used_without_grad(used)
            return out
        made = torch._C._autograd._get_sequence_nr() != start
        if made:
            self._tag(new_nodes(out, start).values())
        if used:
            where = user_line(sys._getframe(2))
            for p in used:
                use = self.log.uses.setdefault(id(p), Use())
                use.grad = (where, self.current_module)
                self._note_bare(p)
        cut_at = 1 if func is torch.Tensor.new_tensor else 0
        if cut is not None and len(args) > cut_at and isinstance(args[cut_at], torch.Tensor):
            self._cut(cut, args[cut_at])
        elif watched and cut is None and _integer_result(out):
            # Note [Integer results cut]
            source = next((t for t in tensors(args) if t.requires_grad), None)
            if source is not None:
                kind, result = _integer_cut(func, out)
                self._cut(kind, source, result)
        return out

    def _used_without_grad(self, used: list[torch.nn.Parameter]) -> None:
        mode = "inference_mode" if torch.is_inference_mode_enabled() else "no_grad"
        where = user_line(sys._getframe(3))
        for p in used:
            use = self.log.uses.setdefault(id(p), Use())
            if use.no_grad is None:
                use.no_grad = (where, self.current_module, mode)
            self._note_bare(p)

    def _note_bare(self, p: torch.nn.Parameter) -> None:
        log = self.log
        key = id(p)
        if not self._local.modules and key not in log.owned and key not in log.bare:

            def forget(_: Any) -> None:  # Note [Parameters nobody holds]
                log.bare.pop(key, None)
                log.uses.pop(key, None)

            log.bare[key] = weakref.ref(p, forget)

    # Note [Parameters nobody holds]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # A parameter used outside every root module is looked at by a weak reference.
    # Models replace parameters as they are built: a transformers BART makes an
    # embedding for its encoder, its decoder and its head, initializes each under
    # ``no_grad``, then ties all three to one shared embedding, and the three first
    # are freed at once. Held by the log they would be three trainable parameters
    # "used only under no_grad" that "got no gradient", which nothing can give
    # them: a parameter that the program no longer holds is no finding. Its uses are
    # forgotten with it, so that a parameter made later at the same address does
    # not inherit them.

    def _cut(self, kind: str, t: torch.Tensor, result: str | None = None) -> None:
        if not t.requires_grad:
            return
        fn = t.grad_fn
        made_in = None
        if fn is not None:
            owner = self.log.module_of_node.get(id(fn))
            returned = owner[1]() if owner is not None else None
            if owner is not None and returned is not None and returned.grad_fn is fn:
                made_in = f"the output of {owner[0]}"
            else:
                metadata: dict[str, Any] = fn.metadata  # type: ignore[assignment]
                origin = metadata.get(ORIGIN_KEY)
                if isinstance(origin, Origin) and origin.module:
                    made_in = f"made in {origin.module}"
        where = user_line(sys._getframe(3))
        leaf = id(t) if fn is None else None
        self.log.cuts.append(Cut(next(self._order), kind, where, fn, leaf, made_in, result))

    def _tag(self, fns: Any) -> None:
        frame = next(user_frames(sys._getframe(3)), None)
        if frame is None:
            return
        origin = Origin(
            frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, self.current_module
        )
        for fn in fns:
            fn.metadata.setdefault(ORIGIN_KEY, origin)


class UsesMode(TorchFunctionMode):
    """Every torch function through :meth:`UsesTracker.call`."""

    def __init__(self, tracker: UsesTracker) -> None:
        super().__init__()
        self.tracker = tracker

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if is_compiling():
            return func(*args, **(kwargs or {}))
        return self.tracker.call(func, args, kwargs or {})
