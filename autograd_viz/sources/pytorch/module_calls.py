"""Which module call made each PyTorch node: module paths and call numbers for a trace.

While the bridge is armed, PyTorch's global module hooks
(``register_module_forward_pre_hook`` and ``register_module_forward_hook``)
keep, per thread, the stack of module calls running; :func:`calls_of` tells a
backward graph's nodes which calls made them, and
:class:`~autograd_viz.sources.pytorch.module_names.GraphModules` names those
calls and the parameters for the trace.

Note [Module calls own sequence ranges]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
PyTorch numbers the nodes a thread makes from a per-thread counter
(``_sequence_nr()``), and ``torch._C._autograd._get_sequence_nr()`` reads the
next number without taking it. So each time the stack of module calls
changes (a call starts or returns), the thread notes the next number and the
new stack: the nodes numbered from there up to the next change were made by
exactly that stack, innermost call last. Nothing is done per op and nothing
is written on a node; a graph's nodes are looked up (a binary search each)
when its backward starts, on the thread that calls it. Changes with no node
made in between replace each other, so a forward under ``no_grad`` costs no
memory. The thread's list is bounded (:data:`MAX_CHANGES`); nodes older than
it, or made before the bridge was armed, have no module, and a graph of a
model's parameters with such nodes says so in one warning. A thread first met
in a module call (a live session's program) counts what it made before as
made outside any module.

Note [Nodes made on another thread]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Sequence numbers are per thread, so a node made on a worker thread (a
forward run in a ``threading.Thread``, DataParallel's replicas) must be
looked up in that thread's changes, not in the caller's, where the same
number means another node or nothing. A node does not say which thread made
it, so once module calls run on a second thread, each module call's outputs
are marked on their nodes (``metadata``, as Note [Node ids] in node.py
keeps ids) with the thread that returned them. The graph walk then gives
each node the thread of its mark, else its parent's (the node that sends it
its gradient), if the parent was made after it (a thread numbers its nodes in
the order it makes them), else the caller's. The output of a call made on a
worker carries it there, and the nodes below it follow. A program with one
thread pays nothing for this: no mark, no lookup of one.

Note [Models freed before backward]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A model need not outlive its forward: ``Net()(x).sum().backward()`` frees the
model and its modules before backward starts, and only the graph keeps its
parameters alive. So a model's parameter names are taken when it is first
called outermost (with its modules' paths), as weak references and names,
and a module call whose module is gone is known by its model and its path:
its parameters are named and drawn in it as if it lived. Nothing keeps the
model or a parameter alive; a parameter freed since names nothing.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch.compiled import (
    class_name,
    is_compiling,
    module_paths,
    original,
    unwrapped_path,
)
from autograd_viz.sources.pytorch.module_call_ends import (
    CallEnds,
    first_pre_hook,
    output_node_follows,
)
from engine.calls import CALLS
from engine.events import HUB

if TYPE_CHECKING:
    from autograd_viz.sources.pytorch.node import TorchNode

MAX_CHANGES = 1 << 17
"""Stack changes kept per thread (two per module call that made a node; about 200 bytes
each, so at most about 26 MB); past it the older half is dropped."""

_THREAD_KEY = "autograd_viz.module_thread"
"""The key of a node's ``metadata`` that holds the thread state that made it
(Note [Nodes made on another thread])."""

_get_sequence_nr = torch._C._autograd._get_sequence_nr
_call_ids = itertools.count()
_thread_states = itertools.count()
_several = False
"""Whether module calls were followed on more than one thread: outputs are marked from then on."""


class ModelRoot:
    """An outermost module call's module: its class name and its submodules' names."""

    __slots__ = ("__weakref__", "kind", "kinds", "module", "names", "parameters")

    def __init__(self, module: torch.nn.Module, forget: Callable[[Any], object]) -> None:
        self.module = weakref.ref(module, forget)
        self.kind = class_name(module)
        # A compiled model is named as the model it wraps (Note [Model paths] in
        # module_names.py).
        inner = original(module)
        self.names = {
            key: name
            for key, name in module_paths(module).items()
            if key != id(module) and key != id(inner)
        }
        # Taken while the model lives (Note [Models freed before backward]); weak references,
        # so that an id reused by another tensor once a parameter is freed names nothing.
        # The class of each module, by its path: a view draws a parameter in its module even
        # where no call of that module made a node (Note [A parameter is named by its model]).
        self.kinds = {
            unwrapped_path(path): class_name(sub)
            for path, sub in walk_modules(inner, remove_duplicate=True)
            if path
        }
        self.parameters = tuple(
            (unwrapped_path(qualified), weakref.ref(parameter))
            for qualified, parameter in all_named_parameters(inner)
        )

    def named_parameters(
        self, path: str | None, recurse: bool = True
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """The parameters still alive of the module at ``path`` under this model (``None``:
        the model itself) as they were named when the model was first called, each by its
        path under that module, as ``module.named_parameters(recurse=recurse)`` names it."""
        prefix = "" if path is None else f"{path}."
        for qualified, ref in self.parameters:
            if not qualified.startswith(prefix):
                continue
            attr = qualified[len(prefix) :]
            if not recurse and "." in attr:
                continue
            parameter = ref()
            if parameter is not None:
                yield attr, parameter

    def named_parameters_now(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The model's parameters as its ``named_parameters(remove_duplicate=False)`` names
        them now (a shared parameter once per name, its first name first), or as they were
        named at its first call if it was freed since; paths without a compiled model's
        ``_orig_mod``."""
        module = self.module()
        if module is None:
            yield from self.named_parameters(None)
            return
        for qualified, parameter in all_named_parameters(original(module)):
            yield unwrapped_path(qualified), parameter


def walk_modules(
    root: torch.nn.Module, remove_duplicate: bool
) -> Iterator[tuple[str, torch.nn.Module]]:
    """``root.named_modules(remove_duplicate=...)``: every module under ``root`` with its
    path, in the same order, walked without recursion, and never into a module that is
    already on the path to it.

    PyTorch's own walk recurses once per level, and without ``remove_duplicate``
    it never ends on a module registered as its own child or descendant
    (``m.add_module("me", m)``): a cycle is cut where it closes, and the names
    of everything else are kept.
    """
    seen: set[int] = set()
    on_path: set[int] = set()
    path: list[int] = []
    stack: list[tuple[str, torch.nn.Module] | None] = [("", root)]
    while stack:
        item = stack.pop()
        if item is None:  # every module under the last one on the path was walked
            on_path.discard(path.pop())
            continue
        prefix, module = item
        if remove_duplicate:
            if id(module) in seen:
                continue
            seen.add(id(module))
        yield prefix, module
        path.append(id(module))
        on_path.add(id(module))
        stack.append(None)
        children = [
            (f"{prefix}.{name}" if prefix else name, child)
            for name, child in module._modules.items()
            if child is not None and id(child) not in on_path
        ]
        stack.extend(reversed(children))


def named_parameters_once(
    root: torch.nn.Module, submodules: set[int] | None = None
) -> Iterator[tuple[str, torch.nn.Parameter]]:
    """``root.named_parameters()``: each parameter once, by its first name, in the same
    order, walked without recursion (:func:`walk_modules`); ``submodules``, if given, gets
    the ``id`` of every module under ``root`` on the way."""
    seen: set[int] = set()
    for prefix, module in walk_modules(root, remove_duplicate=True):
        if submodules is not None and module is not root:
            submodules.add(id(module))
        for name, parameter in module._parameters.items():
            if parameter is not None and id(parameter) not in seen:
                seen.add(id(parameter))
                yield (f"{prefix}.{name}" if prefix else name), parameter


def all_named_parameters(root: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Parameter]]:
    """``root.named_parameters(remove_duplicate=False)``: a parameter shared by two modules
    once per name, in the same order, a cycle of modules cut (:func:`walk_modules`)."""
    for prefix, module in walk_modules(root, remove_duplicate=False):
        for name, parameter in module._parameters.items():
            if parameter is not None:
                yield (f"{prefix}.{name}" if prefix else name), parameter


Call = tuple["ModelRoot", "str | None", str, int, "weakref.ref[torch.nn.Module]"]
"""One module call: its model's root, its path under the model (``None`` for the outermost
module itself), its class name, its call id and its module (weakly). A plain tuple: one is
made per module call while recording."""

Calls = tuple[Call, ...]


class _ThreadState:
    __slots__ = ("before", "stack", "stacks", "starts")

    def __init__(self) -> None:
        self.before: Calls | None = None
        """The calls of nodes numbered before the first change: ``None`` (not followed),
        or ``()`` for a thread first met in a module call while the hooks were on."""
        self.stack: Calls = ()
        """The module calls running on this thread, outermost first."""
        self.starts: list[int] = []
        """The next sequence number at each change of the stack, ascending."""
        self.stacks: list[Calls | None] = []
        """The stack from that change on; ``None`` from where following stopped."""


_tls = threading.local()  # a plain local: a subclass's attributes cost twice as much to read


def _local() -> _ThreadState:
    """This thread's state."""
    try:
        state: _ThreadState = _tls.state
    except AttributeError:
        state = _new_state()
    return state


def _new_state() -> _ThreadState:
    """A state for this thread; from the second thread's on, module outputs are marked."""
    global _several
    state = _tls.state = _ThreadState()
    if next(_thread_states) >= 1:
        _several = True
    return state


_roots: dict[int, ModelRoot] = {}
"""``id(module)`` → the :class:`ModelRoot` of a module called outermost; an entry dies with its
module."""
_lock = threading.Lock()
_handles: list[Any] = []


_armed = False


def arm() -> None:
    """Start following module calls (the bridge calls it when it is armed)."""
    global _armed
    with _lock:
        _armed = True
        if not CALLS.idle:
            _hook()


def disarm() -> None:
    """Stop following module calls; what was noted stays for graphs made meanwhile."""
    global _armed
    with _lock:
        _armed = False
        _unhook()


def _follow(idle: bool) -> None:
    """Whether a recorded backward call is coming (Note [Backward calls] in engine/calls.py).

    PyTorch's global module hooks put every module call on its slow path, so
    while every recorder waits for a call it does not keep, they come off,
    unless somebody else listens (a recorder of every call, a live session).
    """
    with _lock:
        if not _armed:
            return
        if idle and not HUB.active:
            _unhook()
        else:
            _hook()


CALLS.idle_changed.append(_follow)


def _hook() -> None:
    if _handles:
        return
    hooks = torch.nn.modules.module
    enter = hooks.register_module_forward_pre_hook(_enter)
    first_pre_hook(enter)  # Note [Where a module call ends] in module_call_ends.py
    leave = hooks.register_module_forward_hook(_leave, always_call=True)
    _ENDS.last_global(leave)
    _handles.extend((enter, leave))
    _note(_local(), ())  # followed from here on this thread, outside any module


def _unhook() -> None:
    if not _handles:
        return
    for handle in _handles:
        handle.remove()
    _handles.clear()
    _ENDS.close()
    local = _local()
    if local.starts:
        _note(local, None)  # nodes this thread makes from here on were not followed


def _note(local: _ThreadState, stack: Calls | None, ahead: int = 0) -> None:
    """The stack changes to ``stack`` from the next sequence number on, or ``ahead`` numbers
    later (a node PyTorch makes for the call that ends: Note [Where a module call ends])."""
    local.stack = stack or ()
    seq = _get_sequence_nr() + ahead
    starts = local.starts
    while starts and starts[-1] >= seq:
        # No node was made since the last change (or a node said to come did not).
        starts.pop()
        local.stacks.pop()
    if len(starts) >= MAX_CHANGES:
        del starts[: MAX_CHANGES // 2]
        del local.stacks[: MAX_CHANGES // 2]
        local.before = None
    starts.append(seq)
    local.stacks.append(stack)


def _root(module: torch.nn.Module) -> ModelRoot:
    key = id(module)
    root = _roots.get(key)
    if root is None or root.module() is not module:
        # The dict is bound now: at interpreter exit this module's globals may be gone
        # before the weakref's callback runs.
        roots = _roots
        root = _roots[key] = ModelRoot(module, lambda _ref: roots.pop(key, None))
    return root


# Note [A submodule called outermost]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A checkpointed block runs its forward again inside the backward (a reentrant
# checkpoint's backward call, or a non-reentrant one's unpack hook), with no call
# of its model around it: named as a model of its own, a GPT-2's three blocks
# were three frames named `GPT2Attention`. A module called outermost that is a
# submodule of a model called before (and still alive) is named by that model's
# path for it (`transformer.h.2`), as are the calls inside it; a module that is
# no model's submodule is a model of its own, as before.


def _outermost(module: torch.nn.Module) -> tuple[ModelRoot, str | None]:
    """The model and path of a module called outside any module call (Note [A submodule
    called outermost])."""
    key = id(module)
    for root in list(_roots.values()):
        path = root.names.get(key)
        if path is None:
            continue
        model = root.module()
        if model is not None and _submodule(model, path) is module:
            return root, path
    return _root(module), None


def _submodule(model: torch.nn.Module, path: str) -> torch.nn.Module | None:
    """``model``'s submodule at ``path`` (the path of its own model: a compiled model's
    has no ``_orig_mod``), ``None`` if there is none."""
    try:
        return original(model).get_submodule(path)
    except (AttributeError, TypeError):
        return None


def _enter(module: torch.nn.Module, args: Any) -> None:
    if is_compiling():
        return  # Dynamo traces this hook (Note [Compiled regions] in compiled.py)
    try:
        try:
            local: _ThreadState = _tls.state
        except AttributeError:
            # A thread first met here, the hooks on: what it made before ran outside modules
            # as far as can be told (the thread that armed them has its mark instead).
            local = _new_state()
            local.before = ()
        stack = local.stack
        kind = class_name(module)
        if stack:
            root: ModelRoot = stack[0][0]
            path = root.names.get(id(module))
            if path is None:  # not a submodule of the model: made in a forward, or lent
                outer = stack[-1][1]
                path = kind if outer is None else f"{outer}.{kind}"
        else:
            root, path = _outermost(module)
        _note(local, (*stack, (root, path, kind, next(_call_ids), weakref.ref(module))))
        _ENDS.opened(module)
    except Exception as exc:  # noqa: BLE001 - never break the user's forward for a view
        warn_once(f"autograd-viz: cannot follow a module call ({exc!r}); modules may be missing")


def _leave(module: torch.nn.Module, args: Any, output: Any) -> None:
    if is_compiling() or _ENDS.owns(module):
        return  # ended by its own last hook, after the module's own forward hooks
    _end(module, args, output)


def _end(module: torch.nn.Module, args: Any, output: Any) -> None:
    """A call of ``module`` ends, once every forward hook of it has run."""
    if is_compiling():
        return
    try:
        local = _local()
        stack = local.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][4]() is module:
                _note(local, stack[:i], 1 if output_node_follows(module, output) else 0)
                if _several:
                    _mark(local, output)
                return
    except Exception as exc:  # noqa: BLE001 - never break the user's forward for a view
        warn_once(f"autograd-viz: cannot follow a module call ({exc!r}); modules may be missing")


_ENDS = CallEnds(_end)
"""Ends module calls after the module's own forward hooks (Note [Where a module call ends])."""


def _mark(local: _ThreadState, output: Any) -> None:
    """Mark the nodes of a module call's output tensors as made on this thread."""
    if isinstance(output, torch.Tensor):
        values: Iterable[Any] = (output,)
    elif isinstance(output, tuple | list):
        values = output
    elif isinstance(output, dict):
        values = output.values()
    else:
        return
    for value in values:
        if isinstance(value, torch.Tensor):
            fn: Any = value.grad_fn  # torch's stubs type metadata as a method
            if fn is not None:
                fn.metadata[_THREAD_KEY] = local


def thread_modules() -> object:
    """What this thread noted of its module calls, for :func:`calls_of` on another thread."""
    return _local()


def calls_of(nodes: Sequence[TorchNode], caller: object | None = None) -> list[Calls | None]:
    """The module calls that made each of ``nodes``, given in the graph walk's order
    (a node after the node that found it); on the thread that calls backward, or
    later anywhere with that thread's ``caller`` (:func:`thread_modules`).

    A node made on another thread is looked up in that thread's changes (Note
    [Nodes made on another thread]). ``None`` for a node made where no module
    call was followed (before the bridge was armed or after it was disarmed,
    or long ago), and for leaves and a ``GraphRoot``.
    """
    if not isinstance(caller, _ThreadState):
        caller = _local()
    if not _several:
        return [
            _lookup(caller, n.sequence_nr) if n.fn is not None and n.variable is None else None
            for n in nodes
        ]
    made_by: dict[int, _ThreadState] = {}  # id(node) -> the thread state its parent gave it
    out: list[Calls | None] = []
    for node in nodes:
        fn = node.fn
        if fn is None or node.variable is not None:
            out.append(None)
            continue
        seq = node.sequence_nr
        state = fn.metadata.get(_THREAD_KEY)
        if not isinstance(state, _ThreadState):
            state = made_by.get(id(node), caller)
        out.append(_lookup(state, seq))
        for edge in node.next_edges:
            if edge is not None and edge[0].sequence_nr < seq:
                made_by.setdefault(id(edge[0]), state)
    return out


def _lookup(local: _ThreadState, seq: int) -> Calls | None:
    i = bisect.bisect_right(local.starts, seq) - 1
    return local.stacks[i] if i >= 0 else local.before
