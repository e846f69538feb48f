"""What a picture shows of a model at one step: open modules as clusters, closed ones as boxes.

The second part of the view model (:mod:`autograd_viz.draw.modules` has the
tree). Every view goes through here:

1. :func:`~autograd_viz.draw.choosing.choose` says which module calls are open (drawn as a cluster
   around what they hold) and which folds are opened into their calls: a
   level, ``expand`` (a module opened all the way down, or ``"all"``: every
   node, as without modules), calls and folds opened on request (the TUI's
   Enter), and a focus (the running or failing nodes: their modules open by
   themselves, one level each, so the node is drawn and its neighbours stay
   boxes).
2. :func:`apply` turns a :class:`~autograd_viz.draw.graph_view.GraphView` and
   a :class:`~autograd_viz.draw.choosing.Choice` into the picture: a
   :class:`ModuleBox` node per closed call or fold (a :class:`BoxSummary` of
   what it holds at the step), a :class:`Cluster` per open call, edges between
   boxes merged (``count``).
3. :func:`module_view` does both for a view, with the focus the step gives;
   :func:`show` is what every view calls: a neighbourhood of any name, folded
   chains (graphs without modules), the module view, and a node budget.

Box summaries are sums over the nodes inside, so a box says what its nodes
would: how many, their sequence and topological ranges, dependencies still
to come, and one :class:`BoxStatus`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from autograd_viz.draw import chains, select
from autograd_viz.draw.boxes import ModuleBox, box_node
from autograd_viz.draw.choosing import Choice, choose, focus_of
from autograd_viz.draw.folds import group_of_calls
from autograd_viz.draw.graph_view import GraphView, ViewEdge, ViewNode
from autograd_viz.draw.modules import MAX_BOXES, FoldGroup, ModuleTree, Scope
from autograd_viz.draw.names import Names
from autograd_viz.draw.summaries import (
    NOT_SUMMED,
    BoxStatus,
    BoxSummary,
    CallSums,
    box_status,
    call_sums,
    scope_summaries,
    status_of_calls,
    summarize,
)
from autograd_viz.trace import paused_gc

EXPAND_ALL = "all"
"""``expand=["all"]``: every node, no module boxes (the drawing without modules)."""


@dataclass(frozen=True, slots=True)
class Cluster:
    """An open module call, drawn around what it holds."""

    key: str
    """``c<scope>``."""
    scope: int
    """The call."""
    parent: str | None
    """The enclosing cluster's key, or ``None`` at the top."""
    name: str
    """:attr:`Scope.name`."""
    kind: str
    """The module's class name."""
    summary: BoxSummary
    """What every node inside it adds up to at the step."""


# -- drawing the choice ----------------------------------------------------------------


def show(
    view: GraphView,
    *,
    around: int | str | None = None,
    depth: int = 2,
    collapse: bool = False,
    level: int | None = None,
    expand: Sequence[str] = (),
    focus: Iterable[str] = (),
    max_boxes: int = MAX_BOXES,
    max_nodes: int | None = None,
    follow: bool = True,
    trees: dict[object, ModuleTree] | None = None,
) -> GraphView:
    """What a view draws of ``view``, in order: neighbourhood, folded chains, modules, budget.

    Args:
        view: the graph at a step (every node).
        around: draw only what is within ``depth`` edges of this (a node id,
            ``Name #id``, a parameter, a module path, a fold); a module named
            here is drawn whole, a node with its modules open.
        depth: with ``around``, how many edges away to go.
        collapse: fold repeated chains and the steps of loops that no module
            encloses into one box with a count (:func:`~autograd_viz.draw.chains.collapse`);
            a chain fold named in ``expand`` is drawn whole.
        level: see :func:`choose`; by default the deepest with at most
            ``max_boxes`` boxes.
        expand: modules (or nodes) to draw whole; ``"all"`` draws every node,
            as without modules.
        focus: more node keys to draw with their modules open, besides the
            step's running and failing nodes (:func:`focus_of`).
        max_boxes: the budget of the default level.
        max_nodes: draw at most this many nodes (boxes included), nearest the root.
        follow: open the modules of the step's running and failing nodes
            (:func:`focus_of`), and draw a fold's calls as one box per status (Note [A
            box is one status] in :mod:`~autograd_viz.draw.choosing`); an animation,
            whose boxes stay where they are from frame to frame, does neither.
        trees: module trees built before, kept by the caller from step to step
            (see :func:`module_view`).

    Raises:
        GraphViewError: a name names nothing (or a node name several nodes have).
        ValueError: ``depth`` or ``max_nodes`` is out of range.
    """
    with paused_gc():  # Note [Building a big view skips the collector]
        return _show(
            view, around, depth, collapse, level, expand, focus, max_boxes, max_nodes, follow, trees
        )


def _show(
    view: GraphView,
    around: int | str | None,
    depth: int,
    collapse: bool,
    level: int | None,
    expand: Sequence[str],
    focus: Iterable[str],
    max_boxes: int,
    max_nodes: int | None,
    follow: bool,
    trees: dict[object, ModuleTree] | None,
) -> GraphView:
    focused = [*(focus_of(view) if follow else ()), *focus]
    expanded = list(expand)
    kept: list[str] = []  # nodes of chain folds named in expand: drawn whole
    if collapse and expand and EXPAND_ALL not in expand:
        names = select.names_of_view(view)
        for name in expand:
            target = names.resolve(name)
            if target.kind == "chain":
                kept.extend(target.nodes)
                expanded.remove(name)
    whole: ModuleTree | None = None  # the whole graph's, for a neighbourhood
    if around is not None:
        names = select.names_of_view(view)
        target = names.resolve(around)
        whole = names.tree
        view = select.around(view, target, depth, together=select.other_repetitions(whole, target))
        if target.scopes:
            expanded.append(target.text)
        else:
            focused.extend(target.nodes)
    if collapse:
        view = chains.collapse(view, keep=kept)
    drawn = [k for k in focused if k in view.nodes]
    view = module_view(
        view,
        level=level,
        expand=expanded,
        focus=drawn,
        max_boxes=max_boxes,
        trees=trees,
        split=around is not None,
        by_status=follow,
        # See Note [A neighbourhood keeps the whole graph's folds] in select.py.
        tree=None if whole is None else select.restricted(whole, view.nodes),
    )
    if max_nodes is not None:
        view = select.limit(view, max_nodes)
    return view


def module_view(
    view: GraphView,
    *,
    level: int | None = None,
    expand: Sequence[str] = (),
    focus: Iterable[str] | None = None,
    max_boxes: int = MAX_BOXES,
    trees: dict[object, ModuleTree] | None = None,
    split: bool = False,
    by_status: bool = True,
    tree: ModuleTree | None = None,
) -> GraphView:
    """``view`` drawn at module level: the usual entry point of every view.

    Args:
        view: the graph at a step (every node).
        level: see :func:`choose`.
        expand: names of modules (or nodes) to show whole (any name
            :class:`~autograd_viz.draw.names.Names` reads); ``"all"`` draws every
            node, as without modules.
        focus: node keys whose modules open; by default the step's
            (:func:`focus_of`).
        max_boxes: the budget of the default level.
        trees: where to keep the tree of each graph drawn, for the next step of the
            same graph (an animation's frames, the TUI's steps): the tree does not
            change with the step, and building it walks every node.
        split: draw a fold holding a module or node opened as the repetitions holding
            it and one box for the others, not as all its calls (see :func:`choose`).
        by_status: draw a fold whose calls stand at different statuses as one box per
            status (Note [A box is one status] in :mod:`~autograd_viz.draw.choosing`).
        tree: the tree of ``view``'s nodes, made by the caller (``trees`` is then not read).

    Raises:
        GraphViewError: a name in ``expand`` names nothing.
    """
    if EXPAND_ALL in expand:
        return view
    known = (tuple(t.id for t in view.tasks), tuple(view.nodes))
    if tree is None and trees is not None:
        tree = trees.get(known)
    if tree is None:
        tree = ModuleTree.of_view(view)
        if trees is not None:
            trees[known] = tree
    if not tree.scopes:
        return view
    targets = []
    if expand:
        names = Names(
            ((k, n.info) for k, n in view.nodes.items()),
            tree,
            chains=lambda: {c.name: c.members for c in chains.chain_folds(view)},
        )
        targets = [names.resolve(name) for name in expand]
    sums = None
    if tree.groups and by_status and any(t.status is not None for t in view.tasks):
        sums = call_sums(view, tree)  # read for each call's status, then for the boxes
    chosen = choose(
        tree,
        level=level,
        expand=targets,
        focus=focus_of(view) if focus is None else focus,
        max_boxes=max_boxes,
        split=split,
        status=None if sums is None else status_of_calls(view, tree, sums),
    )
    return apply(view, tree, chosen, sums=sums)


def apply(
    view: GraphView,
    tree: ModuleTree,
    choice: Choice,
    *,
    summed: bool = True,
    sums: CallSums | None = None,
) -> GraphView:
    """``view`` with each closed call or fold as one :class:`ModuleBox` node, open calls clusters.

    Node keys of the boxes and clusters come from the tree (stable from step
    to step); edges into, out of and between boxes are merged into one per
    pair of drawn nodes, with their ``count``. ``summed=False`` skips adding up
    the boxes' summaries (most of a big picture's time): each is :data:`NOT_SUMMED`;
    ``sums`` are the calls' :func:`~autograd_viz.draw.summaries.call_sums`, if made already
    (they are then used up).
    """
    drawn: dict[str, str] = {}  # key of each node inside a box -> the box's key
    inside: dict[str, str] = {}  # drawn key -> innermost cluster
    clusters: dict[str, tuple[Scope, str | None]] = {}
    boxes: dict[str, tuple[Scope | FoldGroup, str | None]] = {}
    stack: list[tuple[Scope | FoldGroup, str | None]] = [
        (item, None) for item in reversed(tree.items.get(None, ()))
    ]
    while stack:
        item, parent = stack.pop()
        if isinstance(item, FoldGroup):
            if item.index in choice.unfolded:
                stack.extend((tree.scopes[i], parent) for i in reversed(item.scopes))
                continue
            held = choice.held.get(item.index, frozenset())
            parts = choice.parts.get(item.index)
            if not held and not parts:
                _close(tree, item, f"f{item.index}", parent, drawn, inside, boxes)
                continue
            # Note [Around a fold] in select.py; Note [A box is one status] in choosing.py
            repetitions = item.repetitions()
            opened = [i for r, calls in enumerate(repetitions) if r in held for i in calls]
            stack.extend((tree.scopes[i], parent) for i in reversed(opened))
            rest = frozenset(range(len(repetitions))) - held
            for n, part in enumerate(parts or (rest,)):
                calls = [i for r, c in enumerate(repetitions) if r in part and r in rest for i in c]
                if calls:
                    some = group_of_calls(tree.scopes, item.index, item.parent, calls, item.period)
                    key = f"f{item.index}" if n == 0 else f"f{item.index}_{n}"
                    _close(tree, some, key, parent, drawn, inside, boxes)
        elif item.index in choice.open:
            key = f"c{item.index}"
            clusters[key] = (item, parent)
            inside.update(dict.fromkeys(item.nodes, key))
            stack.extend((child, key) for child in reversed(tree.items.get(item.index, ())))
        else:
            _close(tree, item, f"m{item.index}", parent, drawn, inside, boxes)
    if not boxes and not clusters:
        return view
    closed_groups = {k: item for k, (item, _) in boxes.items() if isinstance(item, FoldGroup)}
    if summed:
        summaries, group_summaries = scope_summaries(view, tree, closed_groups, sums)
    else:
        summaries = [NOT_SUMMED] * len(tree.scopes)
        group_summaries = dict.fromkeys(closed_groups, NOT_SUMMED)
    nodes: dict[str, ViewNode] = {}
    boxed = drawn.get
    for key, node in view.nodes.items():
        shown = boxed(key)
        if shown is None:
            nodes[key] = node
        elif shown not in nodes:
            closed = boxes[shown][0]
            members = [m for i in _scopes(closed) for m in tree.members(i)]
            if isinstance(closed, FoldGroup):
                summary = group_summaries[shown]
            else:
                summary = summaries[closed.index]
            nodes[shown] = _box_node(node, shown, closed, members, summary)
    folded = len(drawn)
    stand = "1 box stands" if len(boxes) == 1 else f"{len(boxes):,} boxes stand"
    notice = (
        f"drawn by module (level {choice.level}): {stand} for {folded:,} of "
        f"{len(view.nodes):,} nodes"
    )
    return replace(
        view,
        nodes=nodes,
        edges=tuple(_merge_edges(view.edges, drawn, tree, _steps(tree, boxes))),
        boxes=tuple(b for b in view.boxes if drawn.get(b.node, b.node) == b.node),
        elided_near=tuple(dict.fromkeys(drawn.get(k, k) for k in view.elided_near)),
        notices=(*view.notices, notice) if boxes else view.notices,
        clusters={
            key: Cluster(
                key,
                scope.index,
                parent,
                scope.name,
                scope.kind,
                summaries[scope.index],
            )
            for key, (scope, parent) in clusters.items()
        },
        cluster_of=inside,
    )


def _scopes(item: Scope | FoldGroup) -> tuple[int, ...]:
    return item.scopes if isinstance(item, FoldGroup) else (item.index,)


def _close(
    tree: ModuleTree,
    item: Scope | FoldGroup,
    key: str,
    parent: str | None,
    drawn: dict[str, str],
    inside: dict[str, str],
    boxes: dict[str, tuple[Scope | FoldGroup, str | None]],
) -> None:
    boxes[key] = (item, parent)
    for index in _scopes(item):
        drawn.update(dict.fromkeys(tree.members(index), key))
    if parent is not None:
        inside[key] = parent


def _box_node(
    first: ViewNode,
    key: str,
    item: Scope | FoldGroup,
    members: Sequence[str],
    summary: BoxSummary,
) -> ViewNode:
    """The drawn node of a box; it keeps its first node's device and graph task."""
    group = item.index if isinstance(item, FoldGroup) else None
    box = ModuleBox(
        key,
        item.name,
        item.kind,
        item.count if isinstance(item, FoldGroup) else 1,
        _scopes(item),
        group,
        tuple(members),
        summary,
        shapes=item.shapes,
    )
    return box_node(first, box)


def _steps(
    tree: ModuleTree, boxes: Mapping[str, tuple[Scope | FoldGroup, str | None]]
) -> dict[int, int]:
    """The repetition of each call inside a closed fold, by scope index (Note [Rolled loops])."""
    step: dict[int, int] = {}
    for item, _parent in boxes.values():
        if isinstance(item, FoldGroup):
            for r, calls in enumerate(item.repetitions()):
                for index in calls:
                    step.update(dict.fromkeys(tree.descendants(index), r))
    return step


# Note [Rolled loops]
# ~~~~~~~~~~~~~~~~~~~
# A closed fold is a loop drawn rolled, as torchview and torchlens draw an
# RNN: the edges by which one repetition passes its gradient to the next (an
# unrolled cell's hidden state, a block's output) become one edge from the box
# to itself, with their count, and the edges inside one repetition vanish
# into the box like any module's, as do the later repetitions' edges into a
# parameter the first one holds (shared weights are no recurrence).


def _merge_edges(
    edges: Iterable[ViewEdge], drawn: Mapping[str, str], tree: ModuleTree, steps: Mapping[int, int]
) -> Iterable[ViewEdge]:
    """Edges between drawn nodes: as they are between nodes, one per pair where a box is;
    a fold's edges between its repetitions, one edge from the box to itself."""
    merged: dict[tuple[str, str], ViewEdge] = {}
    order: list[tuple[str, str] | ViewEdge] = []
    scope_of, weights, boxed = tree.scope_of.get, tree.weights, drawn.get
    for edge in edges:
        tail, head = boxed(edge.tail, edge.tail), boxed(edge.head, edge.head)
        if tail == head and (tail != edge.tail or head != edge.head):
            if not steps:
                continue  # inside one box
            inner = scope_of(edge.tail)
            outer = scope_of(edge.head)
            if inner == outer:
                continue  # inside one call, so one repetition
            one = steps.get(inner)  # type: ignore[arg-type]
            other = steps.get(outer)  # type: ignore[arg-type]
            # A parameter's AccumulateGrad sits in the call that first used it; the later
            # calls using it are sharing, not a loop.
            if one is None or other is None or one == other or weights[edge.head] != 1:
                continue  # inside one box (one repetition of a fold)
        if tail == edge.tail and head == edge.head:
            order.append(edge)
            continue
        pair = (tail, head)
        seen = merged.get(pair)
        if seen is None:
            merged[pair] = replace(edge, tail=tail, head=head)
            order.append(pair)
        else:
            merged[pair] = replace(
                seen,
                delivered=seen.delivered and edge.delivered,
                pruned=seen.pruned and edge.pruned,
                grad=None,
                count=seen.count + 1,
            )
    for entry in order:
        yield merged[entry] if isinstance(entry, tuple) else entry


__all__ = [
    "EXPAND_ALL",
    "NOT_SUMMED",
    "BoxStatus",
    "BoxSummary",
    "Choice",
    "Cluster",
    "ModuleBox",
    "apply",
    "box_status",
    "choose",
    "focus_of",
    "module_view",
    "show",
    "summarize",
]
