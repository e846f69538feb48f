"""Which module call made each PyTorch node: module paths and call numbers for a trace.

While the bridge is armed, PyTorch's global module hooks
(``register_module_forward_pre_hook`` and ``register_module_forward_hook``)
keep, per thread, the stack of module calls running, and :func:`scopes_of`
tells a backward graph's nodes which calls made them.

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
it, or made before the bridge was armed or on another thread, have no module,
and a graph of a model's parameters with such nodes says so in one warning.

Note [Model paths]
~~~~~~~~~~~~~~~~~~
Paths are the model's own names (``transformer.h.3.attn``, from
``named_modules()`` of the outermost module called). The outermost module's
own path is the variable the code calling backward binds it to (``model``,
``criterion``: Note [Finding the user's modules] in ``naming.py``), else its
class name (``GPT2LMHeadModel``; ``MLP#2`` for a second one). When two
outermost modules with parameters made one graph, inner paths start with
their model's path (``block.0``, ``head``), as parameter names do. A
parameter's ``AccumulateGrad`` gets the scope of the first call, in this
graph, of the module that owns it, or of the innermost called module above
it; its leaf is named after that module's path (``layers.0.linear1.weight``),
so a parameter's name is its module's path and its attribute.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from autograd_viz.sources.modules import RawScope, number_calls
from autograd_viz.trace.records import Scope

if TYPE_CHECKING:
    from autograd_viz.sources.pytorch.graph import TorchNode

MAX_CHANGES = 1 << 18
"""Stack changes kept per thread; past it the older half is dropped."""

_get_sequence_nr = torch._C._autograd._get_sequence_nr
_call_ids = itertools.count()


class _Root:
    """An outermost module call's module: its class name and its submodules' names."""

    __slots__ = ("__weakref__", "kind", "module", "names")

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = weakref.ref(module)
        self.kind = type(module).__name__
        self.names = {id(m): name for name, m in module.named_modules() if name}


class _Call:
    """One module call: its module, its model and path in it, its call id."""

    __slots__ = ("call_id", "kind", "module", "path", "root")

    def __init__(self, root: _Root, path: str | None, module: torch.nn.Module) -> None:
        self.root = root
        self.path = path
        """The path under the model; ``None`` for the outermost module itself."""
        self.kind = type(module).__name__
        self.module = weakref.ref(module)
        self.call_id = next(_call_ids)


Calls = tuple[_Call, ...]


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.stack: Calls = ()
        self.starts: list[int] = []
        """The next sequence number at each change of the stack, ascending."""
        self.stacks: list[Calls | None] = []
        """The stack from that change on; ``None`` from where following stopped."""


_LOCAL = _ThreadState()
_roots: weakref.WeakKeyDictionary[torch.nn.Module, _Root] = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_handles: list[Any] = []
_warned: set[str] = set()


def arm() -> None:
    """Start following module calls (the bridge calls it when it is armed)."""
    with _lock:
        if _handles:
            return
        hooks = torch.nn.modules.module
        _handles.append(hooks.register_module_forward_pre_hook(_enter))
        _handles.append(hooks.register_module_forward_hook(_leave, always_call=True))
        _note(_LOCAL, ())  # followed from here on this thread, outside any module


def disarm() -> None:
    """Stop following module calls; what was noted stays for graphs made meanwhile."""
    with _lock:
        for handle in _handles:
            handle.remove()
        _handles.clear()
        local = _LOCAL
        if local.starts:
            _note(local, None)  # nodes this thread makes from here on were not followed
            local.stack = ()


def _note(local: _ThreadState, stack: Calls | None) -> None:
    local.stack = stack or ()
    seq = _get_sequence_nr()
    starts = local.starts
    if starts and starts[-1] == seq:
        local.stacks[-1] = stack  # no node was made since the last change
        return
    if len(starts) >= MAX_CHANGES:
        del starts[: MAX_CHANGES // 2]
        del local.stacks[: MAX_CHANGES // 2]
    starts.append(seq)
    local.stacks.append(stack)


def _enter(module: torch.nn.Module, args: Any) -> None:
    try:
        local = _LOCAL
        stack = local.stack
        if stack:
            root = stack[0].root
            call = _Call(root, root.names.get(id(module)) or type(module).__name__, module)
        else:
            root = _roots.get(module)  # type: ignore[assignment]
            if root is None:
                root = _roots[module] = _Root(module)
            call = _Call(root, None, module)
        _note(local, (*stack, call))
    except Exception as exc:  # noqa: BLE001 - never break the user's forward for a view
        _warn_once(f"autograd-viz: cannot follow a module call ({exc!r}); modules may be missing")


def _leave(module: torch.nn.Module, args: Any, output: Any) -> None:
    try:
        local = _LOCAL
        stack = local.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i].module() is module:
                _note(local, stack[:i])
                return
    except Exception as exc:  # noqa: BLE001 - never break the user's forward for a view
        _warn_once(f"autograd-viz: cannot follow a module call ({exc!r}); modules may be missing")


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def calls_of(sequence_nrs: Iterable[int]) -> list[Calls | None]:
    """The module calls that made the nodes numbered ``sequence_nrs`` on this thread.

    ``None`` for a number older than what this thread noted (made before the
    bridge was armed or after it was disarmed, long ago, or on another thread).
    """
    local = _LOCAL
    starts, stacks = local.starts, local.stacks
    out: list[Calls | None] = []
    for seq in sequence_nrs:
        i = bisect.bisect_right(starts, seq) - 1
        out.append(stacks[i] if i >= 0 else None)
    return out


class GraphModules:
    """The module calls that made one backward graph, named for its trace.

    Built on the thread that calls backward, once the graph is walked and each
    node has its calls (:func:`calls_of`).
    """

    def __init__(
        self,
        nodes: Sequence[TorchNode],
        variables: Callable[[], Mapping[int, str]] = dict,
    ) -> None:
        distinct = {id(n.calls): n.calls for n in nodes if n.calls}
        self._owners = _owners(distinct.values())
        distinct.update((id(calls), calls) for calls in self._owners.values())
        self._named, self._prefixed = _named(distinct, variables)
        self._found: dict[int, tuple[Calls, str]] | None = None

    def parameter_names(self) -> dict[int, str]:
        """``id(parameter)`` → its name under the models this graph's forward called
        (``layers.0.linear1.weight``; prefixed with the model's path when two models made
        the graph, as their modules' paths are)."""
        return {key: name for key, (_calls, name) in self._parameters().items()}

    def _parameters(self) -> dict[int, tuple[Calls, str]]:
        """``id(parameter)`` → the calls down to its owner's first call, and its name.

        The owner is the module holding it if that module was called, else the
        innermost called module above it (``MultiheadAttention`` reads its
        ``out_proj.weight`` without calling ``out_proj``).
        """
        found = self._found
        if found is not None:
            return found
        found = self._found = {}
        called = []
        for calls in self._owners.values():
            call = calls[-1]
            module = call.module()
            if module is None:
                continue
            # A lone model's own parameters read as named_parameters() names them.
            alone = call.path is None and not self._prefixed
            called.append((calls, module, None if alone else self._named[id(calls)][-1][0]))
        for recurse in (False, True):
            for calls, module, path in sorted(called, key=lambda c: -len(c[0])):
                for attr, parameter in module.named_parameters(recurse=recurse):
                    if id(parameter) not in found:
                        found[id(parameter)] = (calls, attr if path is None else f"{path}.{attr}")
        return found

    def scopes(self, nodes: Sequence[TorchNode]) -> tuple[list[Scope], dict[str, str]]:
        """Each node's scope (call numbers within this graph) and every path's class name;
        an ``AccumulateGrad`` gets its parameter's owner's."""
        owners = {key: calls for key, (calls, _name) in self._parameters().items()}
        raw: list[tuple[RawScope, bool]] = []
        untracked = 0
        parameters = False
        named = self._named
        for node in nodes:
            variable = node.variable
            if variable is not None:
                parameters = parameters or isinstance(variable, torch.nn.Parameter)
                owner = owners.get(id(variable))
                raw.append((named[id(owner)] if owner else (), True))
                continue
            calls = node.calls
            if calls is None:
                untracked += node.fn is not None
            raw.append((named[id(calls)] if calls else (), False))
        if untracked and parameters:
            _warn_once(
                "autograd-viz: nodes of a backward graph were made where no module call was "
                "followed (before recording began, or on another thread); they have no module: "
                "record the forward pass too"
            )
        return number_calls(raw)


def _owners(stacks: Iterable[Calls]) -> dict[int, Calls]:
    """``id(module)`` → the calls down to its first call, for every module that was called
    and still lives, in forward order."""
    first: dict[int, Calls] = {}
    for calls in stacks:
        for depth, call in enumerate(calls):
            module = call.module()
            if module is None:
                continue
            known = first.get(id(module))
            if known is None or call.call_id < known[-1].call_id:
                first[id(module)] = calls if depth == len(calls) - 1 else calls[: depth + 1]
    return dict(sorted(first.items(), key=lambda item: item[1][-1].call_id))


def _named(
    distinct: dict[int, Calls], variables: Callable[[], Mapping[int, str]]
) -> tuple[dict[int, RawScope], bool]:
    """Each distinct stack of calls as ``(path, call id, class)`` entries, by ``id()`` of
    the stack; and whether inner paths start with their model's path (Note [Model paths])."""
    first: dict[_Root, int] = {}
    for calls in distinct.values():
        for call in calls:
            root = call.root
            if call.call_id < first.get(root, call.call_id + 1):
                first[root] = call.call_id
    bound = variables() if first else {}
    roots: dict[_Root, str] = {}
    taken: set[str] = set()
    with_parameters = 0
    for root in sorted(first, key=first.__getitem__):
        module = root.module()
        name = bound.get(id(module)) if module is not None else None
        if name is None or name == "self" or name in taken:
            name = root.kind
            count = 1
            while name in taken:
                count += 1
                name = f"{root.kind}#{count}"
        taken.add(name)
        roots[root] = name
        if module is not None and next(module.parameters(), None) is not None:
            with_parameters += 1
    prefixed = with_parameters > 1  # two models' inner paths could collide
    entries: dict[int, tuple[str, int, str]] = {}
    out: dict[int, RawScope] = {}
    for key, calls in distinct.items():
        named: list[tuple[str, int, str]] = []
        for call in calls:
            entry = entries.get(id(call))
            if entry is None:
                name = roots[call.root]
                path = (
                    name
                    if call.path is None
                    else (f"{name}.{call.path}" if prefixed else call.path)
                )
                entry = entries[id(call)] = (path, call.call_id, call.kind)
            named.append(entry)
        out[key] = tuple(named)
    return out, prefixed
