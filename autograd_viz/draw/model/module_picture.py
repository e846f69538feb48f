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

from autograd_viz.draw.model.boxes import box_node
from autograd_viz.draw.model.choosing import Choice, one_status
from autograd_viz.draw.model.compact import join_boxes, tuck_parameters, unwrap
from autograd_viz.draw.model.drawn import NOT_SUMMED, BoxSummary, Cluster, ModuleBox, Stack
from autograd_viz.draw.model.folds import group_of_calls
from autograd_viz.draw.model.graph_view import GraphView, ViewEdge, ViewNode
from autograd_viz.draw.model.joins import joined_name
from autograd_viz.draw.model.picture_edges import EdgePlan, edge_plan, steps_of
from autograd_viz.draw.model.running_totals import RunningSums
from autograd_viz.draw.model.stacks import StackPlan, call_statuses
from autograd_viz.draw.model.totals import CallSums, scope_summaries
from autograd_viz.draw.model.tree import FoldGroup, ModuleTree, Scope


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
    stacks: tuple[StackPlan, ...] = ()
    """The folds drawn as stacks, outermost first (Note [A fold is drawn as a stack])."""
    joined: dict[str, FoldGroup] = field(default_factory=dict)
    """The boxes other calls joined, by box key: their calls as a group of one repetition
    (Note [A small call joins its neighbour] in :mod:`~autograd_viz.draw.model.joins`)."""
    hidden: frozenset[str] = frozenset()
    """The nodes of the calls stacks do not draw (each stands in for one drawn)."""
    tucked: dict[str, str] = field(default_factory=dict)
    """The ``AccumulateGrad`` nodes of parameters counted in their frame's label, not drawn,
    with the frame's key (Note [Parameters in a frame's label] in compact.py)."""

    @property
    def empty(self) -> bool:
        """Nothing is boxed or clustered: the picture is the view itself."""
        return not self.boxes and not self.clusters

    @property
    def summed(self) -> dict[str, FoldGroup]:
        """The groups of calls whose summaries the picture reads: closed folds, joined
        boxes, and each stack's fold (by ``s<group>``)."""
        stacks = {f"s{s.group.index}": s.group for s in self.stacks}
        return {**self.groups, **self.joined, **stacks}


def layout(tree: ModuleTree, choice: Choice, view: GraphView | None = None) -> Layout:
    """Which box or cluster each node of ``tree`` falls in under ``choice`` (stacks and
    joins, where the choice asks for them, need the ``view``)."""
    drawn: dict[str, str] = {}
    inside: dict[str, str] = {}
    clusters: dict[str, tuple[Scope, str | None]] = {}
    boxes: dict[str, tuple[Scope | FoldGroup, str | None]] = {}
    opened_of: dict[int, FoldGroup] = {}
    stacked: list[tuple[FoldGroup, int]] = []
    stacking = choice.stacked and view is not None
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
            if stacking and len(held) == 1 and item.period == 1:
                (r,) = held  # Note [A fold is drawn as a stack] in stacks.py
                if item.scopes[r] in choice.open:
                    stacked.append((item, r))
                    stack.append((tree.scopes[item.scopes[r]], parent))
                else:
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
    joined: dict[str, FoldGroup] = {}
    plans: tuple[StackPlan, ...] = ()
    tucked: dict[str, str] = {}
    if stacking:
        assert view is not None
        infos = {k: n.info for k, n in view.nodes.items()}
        plans = tuple(StackPlan(f"c{g.scopes[r]}", g, r, tree, infos) for g, r in stacked)
        if choice.compact:  # see compact.py
            joined = join_boxes(tree, view, infos, clusters, drawn, inside, boxes)
            unwrap(tree, {p.key for p in plans}, clusters, drawn, inside, boxes)
            tucked = tuck_parameters(view, clusters, drawn, inside)
    groups = {k: item for k, (item, _) in boxes.items() if isinstance(item, FoldGroup)}
    hidden = frozenset(k for plan in plans for k in plan.counterpart)
    return Layout(
        choice.level,
        drawn,
        inside,
        clusters,
        boxes,
        groups,
        steps_of(tree, boxes),
        opened_of,
        plans,
        joined,
        hidden,
        tucked,
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
    laid = layout(tree, choice, view)
    if laid.empty:
        return view
    if summed:
        summaries, group_summaries = scope_summaries(view, tree, laid.summed, sums)
    else:
        summaries = [NOT_SUMMED] * len(tree.scopes)
        group_summaries = dict.fromkeys(laid.summed, NOT_SUMMED)
    return fill(view, tree, laid, summaries, group_summaries)


def fill(
    view: GraphView,
    tree: ModuleTree,
    laid: Layout,
    summaries: Sequence[BoxSummary],
    group_summaries: Mapping[str, BoxSummary],
    plan: EdgePlan | None = None,
) -> GraphView:
    """The picture of ``view`` laid out by ``laid``, boxes and clusters summed as given
    (``plan``: the edges' :func:`~autograd_viz.draw.model.picture_edges.edge_plan`, if made
    already)."""
    boxes, drawn, hidden, joined = laid.boxes, laid.drawn, laid.hidden, laid.joined
    tucked = laid.tucked
    nodes: dict[str, ViewNode] = {}
    boxed = drawn.get
    for key, node in view.nodes.items():
        shown = boxed(key)
        if shown is None:
            if key not in hidden and key not in tucked:
                nodes[key] = node
        elif shown not in nodes:
            closed = boxes[shown][0]
            calls = joined[shown].scopes if shown in joined else _scopes(closed)
            members = [m for i in calls for m in tree.members(i)]
            if isinstance(closed, FoldGroup) or shown in joined:
                summary = group_summaries[shown]
            else:
                summary = summaries[closed.index]
            leaves = sum(1 for m in members if view.nodes[m].info.leaf is not None)
            nodes[shown] = _box_node(node, shown, closed, members, summary, leaves)
            if shown in joined:
                nodes[shown] = _joined_node(nodes[shown], tree, joined[shown], closed)
    if plan is None:
        plan = edge_plan(view.edges, drawn, tree, laid.steps, laid.stacks, view.nodes, laid.tucked)
    stacks = {stack.key: stack for stack in laid.stacks}
    counted: dict[str, list[str]] = {}
    for key, frame in tucked.items():
        counted.setdefault(frame, []).append(key)
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
                _stack(stacks.get(key), tree, summaries, group_summaries),
                _parameter_names(view, scope, counted.get(key, ())),
            )
            for key, (scope, parent) in laid.clusters.items()
        },
        (*view.notices, _notice(laid, len(view.nodes))) if boxes else view.notices,
    )


def _stands_for(group: FoldGroup | None) -> str:
    """What an open call of a fold says it is one of: ``1 of blocks.{0..11} × 12``."""
    return "" if group is None else f"1 of {group.name} × {group.count:,}"


def _parameter_names(view: GraphView, scope: Scope, keys: Sequence[str]) -> tuple[str, ...]:
    """The names below ``scope`` of the parameters behind ``keys``."""
    cut = len(scope.path) + 1 if scope.path else 0
    names = []
    for key in keys:
        leaf = view.nodes[key].info.leaf
        name = leaf.name if leaf is not None and leaf.name else key
        names.append(name[cut:] if name.startswith(scope.path + ".") else name)
    return tuple(names)


def _stack(
    plan: StackPlan | None,
    tree: ModuleTree,
    summaries: Sequence[BoxSummary],
    group_summaries: Mapping[str, BoxSummary],
) -> Stack | None:
    """What the stack drawn around a call says (Note [A fold is drawn as a stack])."""
    if plan is None:
        return None
    group = plan.group
    return Stack(
        group.index,
        group.name,
        group.kind,
        group.count,
        tree.scopes[group.scopes[plan.drawn]].name,
        call_statuses(
            [one_status(summaries[i].status for i in calls) for calls in group.repetitions()]
        ),
        group_summaries[f"s{group.index}"],
        len(plan.counterpart),
        group.shapes,
    )


def _joined_node(
    node: ViewNode, tree: ModuleTree, group: FoldGroup, anchor: Scope | FoldGroup
) -> ViewNode:
    """A box that calls joined, saying which (Note [A small call joins its neighbour])."""
    assert node.box is not None and isinstance(anchor, Scope)
    parent = None if anchor.parent is None else tree.scopes[anchor.parent]
    joined = tuple(
        (joined_name(tree.scopes[i], parent), tree.scopes[i].kind)
        for i in group.scopes
        if i != anchor.index
    )
    return replace(node, box=replace(node.box, joined=joined, scopes=group.scopes))


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
    gone = laid.hidden | laid.tucked.keys()
    return replace(
        view,
        nodes=nodes,
        edges=edges,
        boxes=tuple(
            b for b in view.boxes if drawn.get(b.node, b.node) == b.node and b.node not in gone
        ),
        elided_near=tuple(
            dict.fromkeys(drawn.get(k, k) for k in view.elided_near if k not in gone)
        ),
        notices=notices,
        clusters=clusters,
        cluster_of=laid.inside,
    )


BY_MODULE = "drawn by module"
"""How the line that counts a module picture's boxes starts."""


def _notice(laid: Layout, nodes: int) -> str:
    stacked = (
        len(laid.stacks),
        sum(s.group.count - 1 for s in laid.stacks),
        len(laid.hidden),
    )
    return by_module_line(
        laid.level, len(laid.boxes), len(laid.drawn), nodes, stacked, len(laid.tucked)
    )


def by_module_line(
    level: int,
    boxes: int,
    folded: int,
    nodes: int,
    stacked: tuple[int, int, int] = (0, 0, 0),
    counted: int = 0,
) -> str:
    """The line under a module picture: ``boxes`` boxes stand for ``folded`` of ``nodes``;
    ``stacked``: how many stacks, the calls they do not draw, and those calls' nodes;
    ``counted``: parameters counted in their frames' labels, not drawn."""
    stand = "1 box stands" if boxes == 1 else f"{boxes:,} boxes stand"
    line = f"{BY_MODULE} (level {level}): {stand} for {folded:,} of {nodes:,} nodes"
    stacks, calls, hidden = stacked
    if stacks:
        draw = "1 stack draws" if stacks == 1 else f"{stacks:,} stacks draw"
        more = "1 more" if calls == 1 else f"{calls:,} more"
        line += f"; {draw} one call for {more} ({hidden:,} nodes)"
    if counted:
        some = "1 parameter" if counted == 1 else f"{counted:,} parameters"
        line += f"; {some} counted in frame labels"
    return line


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
# ``apply`` makes, field for field (tests/viz/draw/test_running_sums.py).


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
        laid = layout(tree, choice, view)
        if laid.empty:
            self._last = None
            return view
        if (
            laid.stacks or laid.joined or laid.tucked
        ):  # the default picture of one step: nothing to keep
            self._last = None
            return apply(view, tree, choice)
        sums = RunningSums(view, tree, laid.groups)
        plan = edge_plan(view.edges, laid.drawn, tree, laid.steps)
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
        plan: EdgePlan,
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


__all__ = [
    "BY_MODULE",
    "Layout",
    "StepPictures",
    "apply",
    "by_module_line",
    "fill",
    "layout",
]
