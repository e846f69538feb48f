"""A choice of open and closed module calls made into a picture of one step.

:func:`apply` is the second half of the view model (:mod:`autograd_viz.draw.model.showing`
chooses; this draws the choice). It works in two parts: a :class:`Layout`,
made from the module tree and the choice alone, says which box or cluster each
node falls in; :func:`fill` makes the step's picture from it and the box
summaries. A caller that draws one graph step after step with the same choice
(an animation's frames) keeps a :class:`StepPictures`, and each later step
costs what changed since the one before (Note [A picture from the step before]).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from autograd_viz.draw.model.boxes import ModuleBox, box_node
from autograd_viz.draw.model.choosing import Choice
from autograd_viz.draw.model.folds import group_of_calls
from autograd_viz.draw.model.graph_view import GraphView, ViewEdge, ViewNode
from autograd_viz.draw.model.running_totals import RunningSums
from autograd_viz.draw.model.totals import NOT_SUMMED, BoxSummary, CallSums, scope_summaries
from autograd_viz.draw.model.tree import FoldGroup, ModuleTree, Scope


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
    stands_for: str = ""
    """For a call drawn open while its fold's other calls are a box: the fold it is one call
    of, ``blocks.{0..11} × 12`` (Note [A fold shows its inside once] in choosing.py)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each node of a graph goes under one :class:`Choice`; the same at every step."""

    level: int
    """The choice's level."""
    drawn: dict[str, str]
    """The key of each node inside a box -> the box's key."""
    inside: dict[str, str]
    """The key of each drawn node, box or cluster -> its innermost cluster."""
    clusters: dict[str, tuple[Scope, str | None]]
    """Each open call by cluster key, with its parent cluster's key."""
    boxes: dict[str, tuple[Scope | FoldGroup, str | None]]
    """Each closed call or fold by box key, with its cluster's key."""
    groups: dict[str, FoldGroup]
    """The closed folds among ``boxes``."""
    steps: dict[int, int]
    """The repetition of each call inside a closed fold, by scope index (Note [Rolled loops])."""
    opened_of: dict[int, FoldGroup] = field(default_factory=dict)
    """The fold of each call drawn open while others of its fold are a box, by scope index."""

    @property
    def empty(self) -> bool:
        """Nothing is boxed or clustered: the picture is the view itself."""
        return not self.boxes and not self.clusters


def layout(tree: ModuleTree, choice: Choice) -> Layout:
    """Which box or cluster each node of ``tree`` falls in under ``choice``."""
    drawn: dict[str, str] = {}
    inside: dict[str, str] = {}
    clusters: dict[str, tuple[Scope, str | None]] = {}
    boxes: dict[str, tuple[Scope | FoldGroup, str | None]] = {}
    opened_of: dict[int, FoldGroup] = {}
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
            opened_of.update(dict.fromkeys(opened, item))
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
    groups = {k: item for k, (item, _) in boxes.items() if isinstance(item, FoldGroup)}
    return Layout(
        choice.level, drawn, inside, clusters, boxes, groups, _steps(tree, boxes), opened_of
    )


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
    ``sums`` are the calls' :func:`~autograd_viz.draw.model.totals.call_sums`, if made already
    (they are then used up).
    """
    laid = layout(tree, choice)
    if laid.empty:
        return view
    if summed:
        summaries, group_summaries = scope_summaries(view, tree, laid.groups, sums)
    else:
        summaries = [NOT_SUMMED] * len(tree.scopes)
        group_summaries = dict.fromkeys(laid.groups, NOT_SUMMED)
    return fill(view, tree, laid, summaries, group_summaries)


def fill(
    view: GraphView,
    tree: ModuleTree,
    laid: Layout,
    summaries: Sequence[BoxSummary],
    group_summaries: Mapping[str, BoxSummary],
    plan: _EdgePlan | None = None,
) -> GraphView:
    """The picture of ``view`` laid out by ``laid``, boxes and clusters summed as given
    (``plan``: the edges' :func:`_edge_plan`, if made already)."""
    boxes, drawn = laid.boxes, laid.drawn
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
            leaves = sum(1 for m in members if view.nodes[m].info.leaf is not None)
            nodes[shown] = _box_node(node, shown, closed, members, summary, leaves)
    if plan is None:
        plan = _edge_plan(view.edges, drawn, tree, laid.steps)
    return _picture(
        view,
        laid,
        nodes,
        plan.edges(view.edges),
        {
            key: Cluster(
                key,
                scope.index,
                parent,
                scope.name,
                scope.kind,
                summaries[scope.index],
                _stands_for(laid.opened_of.get(scope.index)),
            )
            for key, (scope, parent) in laid.clusters.items()
        },
        (*view.notices, _notice(laid, len(view.nodes))) if boxes else view.notices,
    )


def _stands_for(group: FoldGroup | None) -> str:
    """What an open call of a fold says it is one of: ``1 of blocks.{0..11} × 12``."""
    return "" if group is None else f"1 of {group.name} × {group.count:,}"


def _picture(
    view: GraphView,
    laid: Layout,
    nodes: dict[str, ViewNode],
    edges: tuple[ViewEdge, ...],
    clusters: dict[str, Cluster],
    notices: tuple[str, ...],
) -> GraphView:
    """``view`` with its drawn nodes, edges, clusters and notices; its tensors and the nodes
    near what a neighbourhood left out moved to the boxes holding them."""
    drawn = laid.drawn
    return replace(
        view,
        nodes=nodes,
        edges=edges,
        boxes=tuple(b for b in view.boxes if drawn.get(b.node, b.node) == b.node),
        elided_near=tuple(dict.fromkeys(drawn.get(k, k) for k in view.elided_near)),
        notices=notices,
        clusters=clusters,
        cluster_of=laid.inside,
    )


BY_MODULE = "drawn by module"
"""How the line that counts a module picture's boxes starts."""


def _notice(laid: Layout, nodes: int) -> str:
    return by_module_line(laid.level, len(laid.boxes), len(laid.drawn), nodes)


def by_module_line(level: int, boxes: int, folded: int, nodes: int) -> str:
    """The line under a module picture: ``boxes`` boxes stand for ``folded`` of ``nodes``."""
    stand = "1 box stands" if boxes == 1 else f"{boxes:,} boxes stand"
    return f"{BY_MODULE} (level {level}): {stand} for {folded:,} of {nodes:,} nodes"


# Note [A picture from the step before]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# An animation draws one graph at every step with one choice (its boxes stay
# where they are), and a step changes a few nodes and edges. StepPictures keeps
# the last step's view, picture and running sums (running_sums.py); the next
# step of the same graph, tree and choice is the last picture with only this
# replaced: the nodes that changed and are drawn as themselves, the boxes and
# clusters whose summary moved (and a box whose first node changed), and the
# merged edges one of whose edges changed. Anything else about the graph that
# differs (another node set, an edge between other nodes, a node's snapshot or
# graph task) makes the picture from scratch. The result is the picture
# ``apply`` makes, field for field (tests/viz/test_running_sums.py).


class StepPictures:
    """Pictures of one graph's steps under one choice, each made from the one before.

    See Note [A picture from the step before].
    """

    __slots__ = ("_last", "trees")

    def __init__(self) -> None:
        self.trees: dict[object, ModuleTree] = {}
        """The module tree of each graph drawn (its node set): it does not change with the step."""
        self._last: _Last | None = None

    def apply(self, view: GraphView, tree: ModuleTree, choice: Choice) -> GraphView:
        """:func:`apply` of ``view`` (summed), from the last picture when it can be."""
        last = self._last
        if last is not None and last.tree is tree and last.choice == choice:
            picture = last.next(view)
            if picture is not None:
                return picture
        laid = layout(tree, choice)
        if laid.empty:
            self._last = None
            return view
        sums = RunningSums(view, tree, laid.groups)
        plan = _edge_plan(view.edges, laid.drawn, tree, laid.steps)
        picture = fill(view, tree, laid, sums.summaries, sums.groups, plan)
        self._last = _Last(tree, choice, laid, sums, plan, view, picture)
        return picture


class _Last:
    """The last step StepPictures drew, and what the next step is made from."""

    __slots__ = ("choice", "firsts", "laid", "picture", "plan", "sums", "tree", "view")

    def __init__(
        self,
        tree: ModuleTree,
        choice: Choice,
        laid: Layout,
        sums: RunningSums,
        plan: _EdgePlan,
        view: GraphView,
        picture: GraphView,
    ) -> None:
        self.tree, self.choice, self.laid, self.sums = tree, choice, laid, sums
        self.plan, self.view, self.picture = plan, view, picture
        self.firsts: dict[str, str] = {}  # box key -> its first node's key (its device, task)
        for key in view.nodes:
            shown = laid.drawn.get(key)
            if shown is not None:
                self.firsts.setdefault(shown, key)

    def next(self, view: GraphView) -> GraphView | None:
        """The picture of ``view``, a later step of the same graph; ``None`` if it is not."""
        before = self.view
        if view.nodes.keys() != before.nodes.keys() or len(view.edges) != len(before.edges):
            return None
        old_nodes = before.nodes
        nodes = []
        for key, node in view.nodes.items():
            old = old_nodes[key]
            if node is not old and node != old:
                if node.info != old.info or node.graph_task != old.graph_task:
                    return None
                nodes.append((old, node))
        edges = []
        for i, (edge, old_edge) in enumerate(zip(view.edges, before.edges, strict=True)):
            if edge is not old_edge and edge != old_edge:
                if (edge.tail, edge.head, edge.input_nr) != (
                    old_edge.tail,
                    old_edge.head,
                    old_edge.input_nr,
                ):
                    return None
                edges.append((i, old_edge, edge))
        if view.notices != before.notices:
            return None
        laid, picture = self.laid, self.picture
        scopes, groups = self.sums.move(nodes, edges)
        drawn_nodes = dict(picture.nodes)
        for _, node in nodes:
            if node.key not in laid.drawn:
                drawn_nodes[node.key] = node
        firsts_changed = {laid.drawn.get(node.key) for _, node in nodes}
        for key, (closed, _) in laid.boxes.items():
            if isinstance(closed, FoldGroup):
                moved = key in groups
                summary = self.sums.groups.get(key)
            else:
                moved = closed.index in scopes
                summary = self.sums.summaries[closed.index]
            if moved or key in firsts_changed:
                box = drawn_nodes[key].box
                assert box is not None and summary is not None
                first = view.nodes[self.firsts[key]]
                drawn_nodes[key] = box_node(first, replace(box, summary=summary))
        clusters = dict(picture.clusters)
        for key, (scope, _) in laid.clusters.items():
            if scope.index in scopes:
                clusters[key] = replace(clusters[key], summary=self.sums.summaries[scope.index])
        drawn_edges = picture.edges
        if edges:
            drawn_edges = self.plan.redrawn(view.edges, drawn_edges, [i for i, _, _ in edges])
        self.view = view
        self.picture = picture = _picture(
            view, laid, drawn_nodes, drawn_edges, clusters, picture.notices
        )
        return picture


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
    parameters: int = 0,
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
        parameters=parameters,
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


class _EdgePlan:
    """Which of a view's edges make each drawn edge: one edge as it is, or several merged
    between a pair of drawn nodes (Note [Rolled loops]). The same at every step of a graph."""

    __slots__ = ("drawn_of", "sources")

    def __init__(self, sources: list[tuple[str, str, list[int]] | int]) -> None:
        self.sources = sources
        """Per drawn edge: the index of the view's edge drawn as it is, or the pair of drawn
        nodes and the indices of the edges merged into it."""
        self.drawn_of: dict[int, int] = {}
        """The view's edge index -> the drawn edge it is part of (none: inside a box)."""
        for n, source in enumerate(sources):
            for i in (source,) if isinstance(source, int) else source[2]:
                self.drawn_of[i] = n

    def edges(self, edges: Sequence[ViewEdge]) -> tuple[ViewEdge, ...]:
        """The drawn edges of ``edges``."""
        return tuple(self._edge(edges, source) for source in self.sources)

    def redrawn(
        self, edges: Sequence[ViewEdge], drawn: tuple[ViewEdge, ...], changed: Sequence[int]
    ) -> tuple[ViewEdge, ...]:
        """``drawn`` (the drawn edges of an earlier step) with those made of ``changed`` edges
        made again from ``edges``."""
        again = {self.drawn_of[i] for i in changed if i in self.drawn_of}
        if not again:
            return drawn
        out = list(drawn)
        for n in again:
            out[n] = self._edge(edges, self.sources[n])
        return tuple(out)

    @staticmethod
    def _edge(edges: Sequence[ViewEdge], source: tuple[str, str, list[int]] | int) -> ViewEdge:
        if isinstance(source, int):
            return edges[source]
        tail, head, indices = source
        merged = replace(edges[indices[0]], tail=tail, head=head)
        for i in indices[1:]:
            edge = edges[i]
            merged = replace(
                merged,
                delivered=merged.delivered and edge.delivered,
                pruned=merged.pruned and edge.pruned,
                grad=None,
                count=merged.count + 1,
            )
        return merged


def _edge_plan(
    edges: Sequence[ViewEdge], drawn: Mapping[str, str], tree: ModuleTree, steps: Mapping[int, int]
) -> _EdgePlan:
    """Edges between drawn nodes: as they are between nodes, one per pair where a box is;
    a fold's edges between its repetitions, one edge from the box to itself."""
    merged: dict[tuple[str, str], tuple[str, str, list[int]]] = {}
    sources: list[tuple[str, str, list[int]] | int] = []
    scope_of, weights, boxed = tree.scope_of.get, tree.weights, drawn.get
    for i, edge in enumerate(edges):
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
            sources.append(i)
            continue
        seen = merged.get((tail, head))
        if seen is None:
            seen = merged[tail, head] = (tail, head, [])
            sources.append(seen)
        seen[2].append(i)
    return _EdgePlan(sources)


__all__ = [
    "BY_MODULE",
    "Cluster",
    "Layout",
    "StepPictures",
    "apply",
    "by_module_line",
    "fill",
    "layout",
]
