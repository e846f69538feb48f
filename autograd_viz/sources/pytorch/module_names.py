"""Naming the module calls that made one backward graph, and its parameters, for the trace.

:mod:`~autograd_viz.sources.pytorch.module_calls` follows module calls while the
forward runs; :class:`GraphModules` turns the calls that made a graph's nodes
into the paths, call numbers and parameter names a trace keeps.

Note [Model paths]
~~~~~~~~~~~~~~~~~~
Paths are the model's own names (``transformer.h.3.attn``, from
``named_modules()`` of the outermost module called); a module called inside
the model that is none of its submodules (a loss made in ``forward``) is
named by its class under the module that called it (``CrossEntropyLoss``
made in the model's own ``forward``, ``encoder.GELU`` in ``encoder``'s). The
outermost module's own path is the variable the code calling backward binds it to (``model``,
``criterion``: Note [Finding the user's modules] in ``naming.py``), else its
class name (``GPT2LMHeadModel``; ``MLP#2`` for a second one); its class name
too where the variable's name is one of the inner paths (a ``LlamaForCausalLM``
bound to ``model`` holds its ``LlamaModel`` as ``model``). When two
outermost modules with parameters made one graph, inner paths start with
their model's path (``block.0``, ``head``), as parameter names do. A
parameter is named and placed by its model (Note [A parameter is named by its
model]). A compiled
model (``torch.compile(model)``, an ``OptimizedModule``) is named as the model
it wraps: its class, the variable bound to ``model`` if any, and paths without
the ``_orig_mod`` it holds the model under (``fc.bias``), as ``compiled.fc``
reaches ``model.fc`` (``module_paths`` in ``compiled.py``).

Note [A parameter is named by its model]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A parameter is not always used by the module that holds it:
``torch.stack([m.weight for m in self.heads])`` in the parent's ``forward``,
``F.linear(x, self.wte.weight)`` (weight tying), a forward hook reading
another module's parameter. So a parameter of a model called outermost is
named as the model's ``named_parameters()`` names it (``heads.2.weight``; a
parameter shared by two modules by its first name, ``transformer.wte.weight``
for GPT-2's tied ``lm_head.weight``), whichever call used it, and its
``AccumulateGrad`` gets the calls down to the first call, in this graph, of
the module its name points to, or of the innermost called module above it
(the parent that stacked the heads' weights). Views then draw it in the
module its name points to (``parameter_chain`` in ``trace/scopes.py``), so a
parameter's name is its module's path and its attribute in every view. Only
parameters of modules lent to a model (called in it, none of its
submodules) are named under the call that holds them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from autograd_viz.sources.call_numbers import RawScope, number_calls
from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch.compiled import original, unwrapped_path
from autograd_viz.sources.pytorch.module_calls import MAX_CHANGES, Call, Calls, ModelRoot
from autograd_viz.trace.records import Scope

if TYPE_CHECKING:
    from autograd_viz.sources.pytorch.node import TorchNode


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
        called = _distinct_calls(distinct.values())
        self._owners = _owners(called)
        self._named, self._prefixed, self._models = _named(called, distinct.values(), variables)
        """The named scope of each call, by ``id()`` of the call (its innermost)."""
        self._leaves = {id(n.variable) for n in nodes if n.variable is not None}
        self._found: dict[int, tuple[Call, str]] | None = None
        self._aliases: dict[int, list[str]] = {}
        self._places: list[tuple[ModelRoot, str, str | None]] = []
        """Each parameter named by its model: the model, its name there and the model's path
        where paths start with it."""

    def parameter_names(self) -> dict[int, str]:
        """``id(parameter)`` → its name under the models this graph's forward called
        (``layers.0.linear1.weight``; prefixed with the model's path when two models made
        the graph, as their modules' paths are)."""
        return {key: name for key, (_calls, name) in self._parameters().items()}

    def parameter_aliases(self) -> dict[int, tuple[str, ...]]:
        """``id(parameter)`` → its other names under the models this graph's forward called,
        for a parameter two modules share (GPT-2's ``lm_head.weight`` for its
        ``transformer.wte.weight``: Note [A parameter is named by its model])."""
        self._parameters()
        return {key: tuple(names) for key, names in self._aliases.items()}

    def _parameters(self) -> dict[int, tuple[Call, str]]:
        """``id(parameter)`` → the call it is drawn in (the innermost of its calls), and its
        name, for every parameter that is a leaf of this graph (Note [A parameter is named
        by its model]).

        A parameter of a model called outermost is named as the model's
        ``named_parameters()`` names it; its call is the first call of
        the module its name points to, or of the innermost called module above it
        (``MultiheadAttention`` reads its ``out_proj.weight`` without calling
        ``out_proj``). A parameter of a module lent to the model (called in it, none of
        its submodules) is named under that module's call.
        """
        found = self._found
        if found is not None:
            return found
        found = self._found = {}
        wanted = self._leaves
        if not wanted:
            return found
        aliases = self._aliases
        first: dict[tuple[ModelRoot, str | None], Call] = {}
        for call in self._owners.values():  # forward order: each module's first call
            first.setdefault((call[0], call[1]), call)
        for root in dict.fromkeys(call[0] for call in self._owners.values()):
            model = None
            for qualified, parameter in root.named_parameters_now():
                key = id(parameter)
                if key not in wanted:
                    continue
                if model is None:
                    model = self._models[root]
                name = f"{model}.{qualified}" if self._prefixed else qualified
                known = found.get(key)
                if known is None:
                    found[key] = (_innermost_called(first, root, qualified), name)
                    self._places.append((root, qualified, model if self._prefixed else None))
                elif name != known[1] and name not in aliases.get(key, ()):
                    aliases.setdefault(key, []).append(name)
        if len(found) < len(wanted):
            self._lent(found, wanted)
        return found

    def _lent(self, found: dict[int, tuple[Call, str]], wanted: set[int]) -> None:
        """Name the parameters still unnamed under the called modules that hold them,
        innermost first: modules lent to a model, whose paths are their class names."""
        called: list[tuple[Call, Callable[..., Iterator[tuple[str, Any]]], str | None]] = []
        for call in self._owners.values():
            root, inner, _kind, _id, ref = call
            module = ref()
            # A module freed since its call (a model never bound to a variable) names its
            # parameters as they were named when it ran (Note [Models freed before backward]).
            named = (
                module.named_parameters
                if module is not None
                else functools.partial(root.named_parameters, inner)
            )
            # A lone model's own parameters read as named_parameters() names them.
            alone = inner is None and not self._prefixed
            called.append((call, named, None if alone else self._named[id(call)][-1][0]))
        scopes = self._named
        called.sort(key=lambda c: -len(scopes[id(c[0])]))  # innermost first
        for recurse in (False, True):
            for call, named, path in called:
                for qualified, parameter in named(recurse=recurse):
                    key = id(parameter)
                    if key in wanted and key not in found:
                        attr = unwrapped_path(qualified)  # a compiled model's, as the model's
                        found[key] = (call, attr if path is None else f"{path}.{attr}")

    def scopes(self, nodes: Sequence[TorchNode]) -> tuple[list[Scope], dict[str, str]]:
        """Each node's scope (call numbers within this graph) and every path's class name;
        an ``AccumulateGrad`` gets its parameter's owner's."""
        owners = {key: call for key, (call, _name) in self._parameters().items()}
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
            raw.append((named[id(calls[-1])] if calls else (), False))
        if untracked and parameters:
            warn_once(
                "autograd-viz: nodes of a backward graph were made where no module call was "
                "followed (before recording began, on another thread, or more than "
                f"{MAX_CHANGES // 2:,} module calls ago); they have no module: record the "
                "forward pass too"
            )
        scopes, kinds = number_calls(raw)
        walked: set[tuple[ModelRoot, str]] = set()
        for root, qualified, model in self._places:
            # The modules a view draws a parameter in below the calls that made it
            # (parameter_chain in trace/scopes.py) have their classes too; each once, not
            # once per parameter under it (a module tree may be thousands deep).
            path = qualified.rpartition(".")[0]
            while path and (root, path) not in walked:
                walked.add((root, path))
                kind = root.kinds.get(path)
                if kind is not None:
                    kinds.setdefault(path if model is None else f"{model}.{path}", kind)
                path = path.rpartition(".")[0]
        return scopes, kinds


def _innermost_called(
    first: Mapping[tuple[ModelRoot, str | None], Call], root: ModelRoot, qualified: str
) -> Call:
    """The first call of the module that holds the parameter ``qualified`` of ``root``'s
    model, or of the innermost module above it that was called."""
    path: str | None = qualified.rpartition(".")[0] or None
    while path is not None:
        calls = first.get((root, path))
        if calls is not None:
            return calls
        path = path.rpartition(".")[0] or None
    # Without the model's own call, only submodules called outermost (Note [A submodule
    # called outermost] in module_calls.py): the first of them (``first`` is in call order).
    return first.get((root, None)) or next(c for (r, _), c in first.items() if r is root)


def _distinct_calls(stacks: Iterable[Calls]) -> list[Call]:
    """Each call of ``stacks`` once.

    A stack is its outer stack and one call more, and a call is always made on the
    same outer stack, so each stack is read from its innermost call outwards until a
    call met before: one step per distinct call, however deep calls nest (Note
    [Scopes share their outer calls] in ``autograd_viz/sources/call_numbers.py``).
    """
    seen: set[int] = set()
    out: list[Call] = []
    for calls in stacks:
        depth = len(calls) - 1
        while depth >= 0 and id(calls[depth]) not in seen:
            seen.add(id(calls[depth]))
            out.append(calls[depth])
            depth -= 1
    return out


def _owners(called: Iterable[Call]) -> dict[object, Call]:
    """``id(module)`` (a freed module's: its model's and its path) → its first call, for every
    module that was called, in forward order."""
    first: dict[object, Call] = {}
    for call in called:
        root, path, _kind, call_id, ref = call
        module = ref()
        # A freed module by its place in its model (Note [Models freed before backward]).
        key = id(module) if module is not None else (id(root), path)
        known = first.get(key)
        if known is None or call_id < known[3]:
            first[key] = call
    return dict(sorted(first.items(), key=lambda item: item[1][3]))


def _off_inner_paths(roots: dict[ModelRoot, str], taken: set[str]) -> None:
    """A model named as one of the inner paths (``model`` for a ``LlamaForCausalLM`` whose
    own ``model`` is its ``LlamaModel``) takes its class name instead: unprefixed, the two
    would be one path, and a view would draw them as two calls of one module."""
    inner = {path for root in roots for path in root.kinds}
    for root, bound in roots.items():
        if bound not in inner:
            continue
        taken.discard(bound)
        name = _class_name(root, taken | inner)
        taken.add(name)
        roots[root] = name


def _class_name(root: ModelRoot, taken: set[str]) -> str:
    """``root``'s class name, numbered past the names in ``taken`` (``MLP#2``)."""
    name, count = root.kind, 1
    while name in taken:
        count += 1
        name = f"{root.kind}#{count}"
    return name


def _named(
    called: list[Call],
    stacks: Iterable[Calls],
    variables: Callable[[], Mapping[int, str]],
) -> tuple[dict[int, RawScope], bool, dict[ModelRoot, str]]:
    """The named scope of each call, ``(path, call id, class)`` entries outermost first, by
    ``id()`` of the call; whether inner paths start with their model's path (Note
    [Model paths]); and each model's own path."""
    first: dict[ModelRoot, int] = {}
    for root, _path, _kind, call_id, _ref in called:
        if call_id < first.get(root, call_id + 1):
            first[root] = call_id
    bound = variables() if first else {}
    roots: dict[ModelRoot, str] = {}
    taken: set[str] = set()
    with_parameters = 0
    for root in sorted(first, key=first.__getitem__):
        module = root.module()
        name = None
        if module is not None:  # a compiled model by its model's variable, if one is bound
            name = bound.get(id(original(module))) or bound.get(id(module))
        if name is None or name == "self" or name in taken:
            name = _class_name(root, taken)
        taken.add(name)
        roots[root] = name
        if (
            next(module.parameters(), None) is not None
            if module is not None
            else any(ref() is not None for _name, ref in root.parameters)
        ):
            with_parameters += 1
    prefixed = with_parameters > 1  # two models' inner paths could collide
    if not prefixed:
        _off_inner_paths(roots, taken)
    out: dict[int, RawScope] = {}
    for calls in stacks:
        # From the innermost call outwards to one named before, then inwards again.
        depth = len(calls) - 1
        while depth >= 0 and id(calls[depth]) not in out:
            depth -= 1
        named: RawScope = out[id(calls[depth])] if depth >= 0 else ()
        for call in calls[depth + 1 :]:
            root, inner, kind, call_id, _ref = call
            name = roots[root]
            path = name if inner is None else (f"{name}.{inner}" if prefixed else inner)
            named = out[id(call)] = (*named, (path, call_id, kind))
    return out, prefixed, roots
