"""The model's own modules as the backbone of every view: a tree of module calls, folded.

This is the one model of *what to show* that every view reads (``dot``, the
TUI's DAG view, ``animate``, the timeline); no view folds on its own. It has
three parts:

* here, :class:`ModuleTree`: the module calls that enclosed each node's
  creation in the forward (``NodeInfo.scope``) as a tree of :class:`Scope`,
  and the runs of sibling calls with the same inside (GPT-2's 12 blocks, the
  blocks of a ResNet stage, the calls of an unrolled ``GRUCell``) as
  :class:`~autograd_viz.draw.model.folds.FoldGroup` (:mod:`autograd_viz.draw.model.folds`
  says which runs fold). A tree is built once per graph, not per step.
* :mod:`autograd_viz.draw.model.showing`: which module calls are open at a step (a
  level, ``expand``, boxes opened on request, the running or failing node's
  modules), and the :class:`~autograd_viz.draw.model.graph_view.GraphView` with one
  box per closed call or fold, nested clusters for open calls, and box
  summaries computed from the nodes' state.
* :mod:`autograd_viz.draw.model.targets`: every name a view shows (a node id,
  ``Name #id``, a parameter, a module path, a fold) resolved back to what it
  names.

Example:
    >>> tree = ModuleTree.build(view.nodes.items(), view.modules)
    >>> [tree.scopes[i].name for i in tree.roots]
    ['transformer', 'lm_head']
    >>> tree.default_level(150)
    3

Module paths and class names come from the user's program: they are data,
shown as text by every view and never interpreted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from autograd_viz.draw.model.folds import Flow, FoldGroup, fold_name, fold_runs, foldable
from autograd_viz.trace import NodeInfo
from autograd_viz.trace.records import LeafInfo
from autograd_viz.trace.scopes import parameter_chain
from autograd_viz.trace.text import UINT64_MAX

if TYPE_CHECKING:
    from autograd_viz.draw.model.graph_view import GraphView

MAX_BOXES = 150
"""The most boxes a picture has by default (see :meth:`ModuleTree.default_level`)."""

ScopeKey = tuple[tuple[str, int], ...]
"""A node's ``scope``: ``(path, call)`` of each enclosing module call, outermost first."""
NodeInputs = tuple[tuple[tuple[int, ...], str, str], ...]
"""A node's :attr:`~autograd_viz.trace.NodeInfo.inputs`: ``(shape, dtype, device)`` of each
gradient it takes."""


@dataclass(frozen=True, slots=True)
class Scope:
    """One call of one module in the forward: a node of the module tree."""

    index: int
    """Its position in :attr:`ModuleTree.scopes` (parents come before their children)."""
    path: str
    """The module's dotted name in the model (``"transformer.h.3.attn"``); ``""`` for the model."""
    call: int
    """Which call of that module it was (0, 1, ...)."""
    kind: str
    """The module's class name (``"GPT2Attention"``); ``""`` when the trace does not say."""
    parent: int | None
    """The enclosing call, or ``None`` for a call outside any other."""
    depth: int
    """1 for a call outside any other, 2 for the calls inside one, ..."""
    children: tuple[int, ...]
    """The calls made directly inside it, in forward order."""
    nodes: tuple[str, ...]
    """Keys of the nodes created directly in it (not inside a child), in the graph's order."""
    size: int
    """How many nodes it holds, its children's included."""
    signature: int
    """Equal for two calls alike in everything a reader sees: class, parameters (names,
    shapes, dtypes), node names with the shapes, dtypes and devices of the gradients they
    take, how those nodes are wired, and children, recursively (Note [Alike calls])."""
    name: str
    """What views call it and what :mod:`~autograd_viz.draw.model.targets` reads back: the path,
    with ``:call`` when the graph holds several calls of the module (``"cell:3"``)."""
    shapes: bool = True
    """Whether every node inside it was recorded with the shapes of the gradients it takes
    (its :attr:`signature` compares them); ``False``: by their ops only (Note [Alike calls])."""


Item = Scope | FoldGroup
"""What a parent holds in a picture: a call, or a fold of calls."""


class ModuleTree:
    """The module calls of one drawn graph: a tree of :class:`Scope`, with its folds.

    Build it with :meth:`build` (the tree of part of a graph, with the whole graph's folds:
    :func:`~autograd_viz.draw.model.select.restricted`); it does not change with the step.
    """

    scopes: tuple[Scope, ...]
    """Every module call, parents before children."""
    roots: tuple[int, ...]
    """The calls made outside any other, in forward order."""
    outside: tuple[str, ...]
    """Keys of the nodes created outside any module."""
    groups: tuple[FoldGroup, ...]
    """Every run of sibling calls with the same inside."""
    scope_of: Mapping[str, int]
    """The innermost call of each node created inside one, by node key."""
    group_of: Mapping[int, int]
    """The fold group of each folded call, by scope index."""
    folded: frozenset[int]
    """The folded calls and every call inside them: a level never opens these (a fold
    opened shows its calls closed, one box each; Note [What a level opens] in choosing.py)."""
    items: Mapping[int | None, tuple[Item, ...]]
    """What each call holds (``None``: the top), folds in place of their runs, in forward order."""
    weights: Mapping[str, int]
    """Boxes each node is drawn as: 2 for a leaf's ``AccumulateGrad`` (its tensor's box too)."""

    def __init__(
        self,
        scopes: Sequence[Scope],
        roots: Sequence[int],
        outside: Sequence[str],
        scope_of: Mapping[str, int],
        weights: Mapping[str, int],
        edges: Iterable[tuple[str, str]] = (),
        groups: Sequence[FoldGroup] | None = None,
    ) -> None:
        self.scopes = tuple(scopes)
        self.roots = tuple(roots)
        self.outside = tuple(outside)
        self.scope_of = scope_of
        self.weights = weights
        if groups is None:  # found here; given, they were found on a bigger graph
            runs = list(fold_runs(self.scopes, self.roots))
            flow = Flow(edges, scope_of) if runs else None
            groups = [g for g in runs if not flow or foldable(g, self.descendants, flow, weights)]
        self.groups = tuple(replace(group, index=i) for i, group in enumerate(groups))
        self.group_of = {i: g.index for g in self.groups for i in g.scopes}
        self.folded = frozenset(
            d for g in self.groups for i in g.scopes for d in self.descendants(i)
        )
        self.items = {
            parent: tuple(self._items(children))
            for parent, children in (
                (None, self.roots),
                *((s.index, s.children) for s in self.scopes if s.children),
            )
        }
        # default_level by its arguments: a tree is not changed once made, and an
        # animation asks the same question of the same tree at every frame.
        self._levels: dict[tuple[int, frozenset[int]], int] = {}

    @classmethod
    def build(
        cls,
        nodes: Iterable[tuple[str, NodeInfo]],
        modules: Mapping[str, str] | None = None,
        edges: Iterable[tuple[str, str]] = (),
    ) -> ModuleTree:
        """The tree of the module calls that ``nodes`` were created in.

        Args:
            nodes: ``(key, info)`` of every node drawn, in the graph's order
                (``GraphView.nodes.items()``).
            modules: class names by module path (``GraphTaskInfo.modules``).
            edges: ``(tail, head)`` keys of the graph's edges; with them, a run of
                calls folds only where the gradient does not leave it and come back
                (Note [What folds] in :mod:`~autograd_viz.draw.model.folds`); without
                them, every run folds.
        """
        return _build(nodes, modules or {}, edges)

    @classmethod
    def of_view(cls, view: GraphView) -> ModuleTree:
        """The tree of a :class:`~autograd_viz.draw.model.graph_view.GraphView`'s nodes and
        edges."""
        return cls.build(
            ((k, n.info) for k, n in view.nodes.items()),
            view.modules,
            ((e.tail, e.head) for e in view.edges),
        )

    def __len__(self) -> int:
        return len(self.scopes)

    def members(self, index: int) -> list[str]:
        """Keys of every node inside the call ``index``, its children's included."""
        out: list[str] = []
        stack = [index]
        while stack:
            scope = self.scopes[stack.pop()]
            out.extend(scope.nodes)
            stack.extend(reversed(scope.children))
        return out

    def ancestors(self, index: int) -> list[int]:
        """The call ``index`` and every call enclosing it, innermost first."""
        out = []
        current: int | None = index
        while current is not None:
            out.append(current)
            current = self.scopes[current].parent
        return out

    def descendants(self, index: int) -> list[int]:
        """The call ``index`` and every call made inside it."""
        out = []
        stack = [index]
        while stack:
            current = stack.pop()
            out.append(current)
            stack.extend(self.scopes[current].children)
        return out

    @property
    def max_depth(self) -> int:
        """The deepest call's depth (0 for a graph without modules)."""
        return max((s.depth for s in self.scopes), default=0)

    def count(
        self, level: int, unfolded: frozenset[int] = frozenset(), limit: int | None = None
    ) -> int:
        """Boxes a picture at ``level`` draws, every fold closed but ``unfolded``.

        At level ``L`` the calls of depth ``<= L`` are open (clusters around
        what they hold) and the others are one box each; a closed fold is one
        box, an unfolded one a box per call; a node counts :attr:`weights`
        boxes. Counting stops past ``limit``.
        """
        total = sum(self.weights[k] for k in self.outside)
        stack = list(self.items.get(None, ()))
        while stack:
            if limit is not None and total > limit:
                break
            item = stack.pop()
            if isinstance(item, FoldGroup):
                total += 1 if item.index not in unfolded else len(item.scopes)
                continue
            for scope in (item,) if isinstance(item, Scope) else self._scopes_of(item):
                if scope.depth > level:
                    total += 1
                    continue
                total += sum(self.weights[k] for k in scope.nodes)
                stack.extend(self.items.get(scope.index, ()))
        return total

    def default_level(
        self, max_boxes: int = MAX_BOXES, unfolded: frozenset[int] = frozenset()
    ) -> int:
        """The deepest level whose picture has at most ``max_boxes`` boxes (0 if none has).

        ``unfolded`` are the fold groups drawn as their calls (see :meth:`count`).
        """
        known = self._levels.get((max_boxes, unfolded))
        if known is not None:
            return known
        best = 0
        for level in range(1, self.max_depth + 1):
            if self.count(level, unfolded, max_boxes) > max_boxes:
                break
            best = level
        self._levels[max_boxes, unfolded] = best
        return best

    def _scopes_of(self, group: FoldGroup) -> list[Scope]:
        return [self.scopes[i] for i in group.scopes]

    def _items(self, children: Sequence[int]) -> Iterable[Item]:
        done: set[int] = set()
        for child in children:
            group = self.group_of.get(child)
            if group is None:
                yield self.scopes[child]
            elif group not in done:
                done.add(group)
                yield self.groups[group]


# -- building --------------------------------------------------------------------------


class _Growing:
    """A scope while the tree is built."""

    __slots__ = (
        "call",
        "children",
        "first",
        "index",
        "names",
        "nodes",
        "parent",
        "path",
        "shapes",
    )

    def __init__(self, index: int, path: str, call: int, parent: int | None) -> None:
        self.index = index
        self.path = path
        self.call = call
        self.parent = parent
        self.children: list[int] = []
        self.nodes: list[str] = []
        self.names: list[tuple[str, NodeInputs]] = []  # (name, inputs) of each node but leaves
        self.first = UINT64_MAX  # the smallest sequence_nr inside: forward order
        self.shapes = True  # every node inside has its inputs' shapes


def _build(
    nodes: Iterable[tuple[str, NodeInfo]],
    modules: Mapping[str, str],
    edges: Iterable[tuple[str, str]],
) -> ModuleTree:
    edge_list = list(edges)  # read twice: for likeness, then for folds
    growing: list[_Growing] = []
    index: dict[ScopeKey, int] = {}  # every prefix of every scope seen -> its scope
    outside: list[str] = []
    scope_of: dict[str, int] = {}
    weights: dict[str, int] = {}
    last: ScopeKey | None = None
    inner = -1
    scope: _Growing | None = None
    infos: dict[str, NodeInfo] = {}
    parameters: dict[str, set[tuple[str, tuple[int, ...], str]]] = {}  # by module path
    # One pass over every node of a big graph; neighbours in the graph's order mostly share
    # their scope, so the scope found for one is tried first for the next.
    for key, info in nodes:
        infos[key] = info
        leaf = info.leaf
        weights[key] = 1 if leaf is None else 2
        chain = info.scope
        if not chain:
            outside.append(key)
            continue
        if leaf is not None and leaf.name:
            chain = parameter_chain(chain, leaf.name)
        if chain is not last or scope is None:
            found = index.get(chain)
            inner = _add_prefixes(chain, index, growing) if found is None else found
            scope, last = growing[inner], chain
        scope_of[key] = inner
        scope.nodes.append(key)
        # A parameter's AccumulateGrad is made by the first call that uses it: the
        # calls of an unrolled cell are alike but for it, so it is no part of their inside;
        # the parameter is its module's, whichever call made it (Note [Alike calls]).
        if leaf is None:
            scope.names.append((info.name, info.inputs))
            if not info.inputs:
                scope.shapes = False
        else:
            parameter = _parameter(leaf, scope.path)
            if parameter is not None:
                parameters.setdefault(scope.path, set()).add(parameter)
        # AccumulateGrad's sequence_nr is UINT64_MAX; it says nothing about order.
        scope.first = min(scope.first, info.sequence_nr)
    # Children before parents: a scope's index is above its parent's.
    sizes = [len(g.nodes) for g in growing]
    for g in reversed(growing):
        if g.parent is not None:
            parent = growing[g.parent]
            sizes[g.parent] += sizes[g.index]
            parent.first = min(parent.first, g.first)
            parent.shapes = parent.shapes and g.shapes
    for g in growing:
        g.children.sort(key=lambda c: (growing[c].first, c))
    signatures = _signatures(growing, modules, parameters, infos, edge_list)
    depths: list[int] = []
    for g in growing:
        depths.append(1 if g.parent is None else depths[g.parent] + 1)
    calls: dict[str, int] = {}
    for g in growing:
        calls[g.path] = calls.get(g.path, 0) + 1
    scopes = [
        Scope(
            index=g.index,
            path=g.path,
            call=g.call,
            kind=modules.get(g.path, ""),
            parent=g.parent,
            depth=depths[g.index],
            children=tuple(g.children),
            nodes=tuple(g.nodes),
            size=sizes[g.index],
            signature=signatures[g.index],
            name=scope_name(g.path, g.call, calls[g.path] > 1, modules.get(g.path, "")),
            shapes=g.shapes,
        )
        for g in growing
    ]
    roots = sorted((g.index for g in growing if g.parent is None), key=lambda i: growing[i].first)
    return ModuleTree(scopes, roots, outside, scope_of, weights, edge_list)


def scope_name(path: str, call: int, several: bool, kind: str = "") -> str:
    """What a module call is called in every view: its path, with ``:call`` if there are several.

    The model itself (path ``""``) is called by its class name.
    """
    base = path if path else (kind or "model")
    return f"{base}:{call}" if several else base


def kind_shown(name: str, kind: str) -> str:
    """The class to show beside a module call's name: none when the name is the class
    already (the model, named by its class: ``LlamaForCausalLM``, not ``LlamaForCausalLM
    LlamaForCausalLM``)."""
    return "" if name.partition(":")[0] == kind else kind


# Note [Parameters of a compiled model]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The module hooks stand aside while compiled code runs (Note [Compiled
# regions] in sources/pytorch/compiled.py), so every node of
# ``torch.compile(model)``'s backward is made in the model's one call: its
# ``CompiledFunctionBackward`` (or the ops of an eager backend) and each
# parameter's ``AccumulateGrad``, which otherwise sits in the call of the
# module owning the parameter. The parameters still carry their modules in
# their names (``fc.weight``, ``transformer.h.3.attn.c_attn.weight``), so a
# parameter made in the outermost call alone is drawn in its module's call
# (``fc``; ``transformer``, ``transformer.h``, ... down to its module), call 0:
# the module tree shows the model's modules, each holding its parameters, and
# the compiled region's own node stays in the model's call. A parameter of
# the model itself (``pos_embedding``) stays there too. The same holds below
# any call: a parameter read outside its module's call (stacked by the parent,
# tied, read by a hook) is made in the call that read it and drawn in the
# module its name points to (Note [A parameter is named by its model] in
# sources/pytorch/module_names.py).


def _add_prefixes(chain: ScopeKey, index: dict[ScopeKey, int], growing: list[_Growing]) -> int:
    parent: int | None = None
    for depth in range(1, len(chain) + 1):
        prefix = chain[:depth]
        found = index.get(prefix)
        if found is None:
            path, call = prefix[-1]
            found = len(growing)
            growing.append(_Growing(found, path, call, parent))
            if parent is not None:
                growing[parent].children.append(found)
            index[prefix] = found
        parent = found
    assert parent is not None
    return parent


# Note [Alike calls]
# ~~~~~~~~~~~~~~~~~~
# A fold draws several calls as one box, so they must be alike in everything a
# reader of the box would see on opening any of them: the same module class,
# the same parameters (names below the module, shapes, dtypes), the same ops on
# the same tensors, wired the same way, and the same children. Ops alone are not
# enough: a ResNet's stages run the same blocks at 64, 128, 256 and 512
# channels, and MobileNetV3's inverted residual holds a 1×1 expanding conv and a
# 5×5 depthwise conv whose gradients have one shape (120 channels each) but
# whose weights are ``(120, 40, 1, 1)`` and ``(120, 1, 5, 5)``.
#
# So a call's signature is built children first from its class, its module's
# parameters (every call of one module shares them: an unrolled cell's
# ``AccumulateGrad`` is made by its first call only), each node's name with the
# shape, dtype and device of each gradient it takes (``NodeInfo.inputs``, which
# every trace records, whatever its values tier), and its children's
# signatures. Two siblings whose signatures agree then have their insides
# compared as graphs (:func:`_inside`): their nodes in forward order
# (``sequence_nr``), the call each is made in, and where each edge inside goes
# (a node of the call by its place, a parameter by its name below the call);
# edges out of the call are how it is wired in, which the picture draws around
# the box (a stack's first block, whose input needs no gradient, is alike the
# others). Only sibling calls can fold, so only they pay for that walk. A
# node recorded without its gradients' shapes (a graph snapshot that could not
# read a tensor's metadata) is compared by its name alone, and a fold holding
# such a node says that its calls were compared by their ops only
# (``FoldGroup.shapes``).

Parameter = tuple[str, tuple[int, ...], str]
"""A parameter as a call's likeness reads it: its name below the module, shape and dtype."""


def _parameter(leaf: LeafInfo, path: str) -> Parameter | None:
    """``leaf`` as seen from inside the module at ``path``: named below it, or ``None`` where
    it is no parameter of that module or one inside it (an input that needs a gradient, made
    in the call that first read it; Note [Alike calls])."""
    name = leaf.name
    if not name:
        return None
    if path:
        if not name.startswith(path + "."):
            return None
        name = name[len(path) + 1 :]
    return name, tuple(leaf.shape), leaf.dtype


def _signatures(
    growing: Sequence[_Growing],
    modules: Mapping[str, str],
    parameters: Mapping[str, set[Parameter]],
    infos: Mapping[str, NodeInfo],
    edges: Sequence[tuple[str, str]],
) -> list[int]:
    """Equal numbers for calls alike in class, parameters, nodes, wiring and children
    (Note [Alike calls])."""
    interned: dict[tuple[object, ...], int] = {}
    out = [0] * len(growing)
    for g in reversed(growing):  # children first
        key: tuple[object, ...] = (
            modules.get(g.path, ""),
            tuple(sorted(parameters.get(g.path, ()))),
            tuple(sorted(g.names)),
            tuple(out[c] for c in g.children),
        )
        out[g.index] = interned.setdefault(key, len(interned))
    # Siblings with one signature so far are compared as graphs.
    sibling_lists = [[g.index for g in growing if g.parent is None]]
    sibling_lists.extend(g.children for g in growing if len(g.children) > 1)
    heads: dict[str, list[str]] | None = None
    for siblings in sibling_lists:
        seen: dict[int, int] = {}
        for c in siblings:
            seen[out[c]] = seen.get(out[c], 0) + 1
        twins = [c for c in siblings if seen[out[c]] > 1]
        if not twins:
            continue
        if heads is None:
            heads = {}
            for tail, head in edges:
                heads.setdefault(tail, []).append(head)
        for c in twins:
            key = (out[c], _inside(growing, c, infos, heads))  # a pair: never a key above
            out[c] = interned.setdefault(key, len(interned))
    return out


def _inside(
    growing: Sequence[_Growing],
    index: int,
    infos: Mapping[str, NodeInfo],
    heads: Mapping[str, list[str]],
) -> tuple[object, ...]:
    """The graph inside the call ``index``, written so that alike calls write it alike."""
    path = growing[index].path
    calls: list[int] = []
    stack = [index]
    while stack:  # forward order, depth first: the place of each call inside
        current = stack.pop()
        calls.append(current)
        stack.extend(reversed(growing[current].children))
    ops: list[tuple[int, str, int, str]] = []
    for place, call in enumerate(calls):
        for key in growing[call].nodes:
            info = infos[key]
            if info.leaf is None:
                ops.append((info.sequence_nr, info.name, place, key))
    ops.sort()
    local = {op[3]: i for i, op in enumerate(ops)}
    written: list[tuple[object, ...]] = []
    for _seq, name, place, key in ops:
        to: list[object] = []
        for head in heads.get(key, ()):
            at = local.get(head)
            if at is not None:
                to.append(at)
                continue
            # An edge out of the call is its wiring to the rest of the model, not its inside:
            # a stack's first block, whose input needs no gradient, is alike the others.
            # A parameter of the module or one below it is inside, whichever call made it.
            leaf = infos[head].leaf if head in infos else None
            parameter = None if leaf is None else _parameter(leaf, path)
            if parameter is not None:
                to.append(parameter)
        written.append((place, name, infos[key].inputs, tuple(to)))
    return tuple(written)


__all__ = [
    "MAX_BOXES",
    "FoldGroup",
    "Item",
    "ModuleTree",
    "Scope",
    "ScopeKey",
    "fold_name",
    "scope_name",
]
