"""Trimming a big graph down to a drawing someone can read.

Three independent steps, applied by :func:`autograd_viz.draw.dot.to_dot` in this
order:

* :func:`around`: the nodes within ``depth`` edges of a node, a parameter or a
  module (any name :mod:`autograd_viz.draw.names` reads);
* :func:`collapse`: each run of a repeating pattern along a chain or the
  steps of an unrolled loop with their side inputs (the ``Tanh → Add → Mm``
  of an RNN) becomes one node that says how many steps it stands for and how
  far the engine got in them;
* :func:`limit`: at most ``max_nodes`` nodes, the ones nearest the root; the
  rest are counted in a notice drawn where they would have been.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import replace

from autograd_viz.draw.graph_view import Fold, GraphView, GraphViewError, ViewEdge, ViewNode
from autograd_viz.draw.modules import ModuleTree
from autograd_viz.draw.names import Names, Target
from autograd_viz.trace.replay import NodeStatus

MAX_PERIOD = 4
"""The longest repeating pattern :func:`collapse` looks for, in nodes."""


# -- a neighbourhood -------------------------------------------------------------------


def find_node(view: GraphView, spec: int | str) -> str:
    """The key of the one node ``spec`` names (any name :mod:`~autograd_viz.draw.names` reads).

    Raises:
        GraphViewError: ``spec`` names nothing, or a module (several nodes).
    """
    target = resolve(view, spec)
    if target.kind not in ("node", "parameter") or len(target.nodes) != 1:
        raise GraphViewError(
            f"{target.label} is {len(target.nodes):,} nodes; name one node (Name #id)"
        )
    return target.nodes[0]


def resolve(view: GraphView, spec: int | str) -> Target:
    """What ``spec`` names in ``view``: a node id, ``Name #id``, a parameter or a module path.

    Raises:
        GraphViewError: it names nothing, or a node name that several nodes have.
    """
    tree = ModuleTree.of_view(view)
    return Names(((k, n.info) for k, n in view.nodes.items()), tree).resolve(spec)


def around(view: GraphView, spec: int | str | Target, depth: int) -> GraphView:
    """The part of ``view`` within ``depth`` edges (either direction) of what ``spec`` names.

    ``spec`` is any name :mod:`~autograd_viz.draw.names` reads (a node, a
    parameter, a module: then every node inside it is a centre), or a
    :class:`~autograd_viz.draw.names.Target` already resolved.

    Raises:
        GraphViewError: ``spec`` names nothing, or a node name several nodes have.
        ValueError: ``depth`` is negative.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"depth must be a non-negative integer, got {depth!r}")
    target = spec if isinstance(spec, Target) else resolve(view, spec)
    neighbours = _undirected(view.edges)
    distance = dict.fromkeys(target.nodes, 0)
    frontier = deque(target.nodes)
    while frontier:
        key = frontier.popleft()
        if distance[key] == depth:
            continue
        for other in neighbours.get(key, ()):
            if other not in distance:
                distance[other] = distance[key] + 1
                frontier.append(other)
    name = view.nodes[target.nodes[0]].info.name if target.kind == "node" else target.text
    edges = "edge" if depth == 1 else "edges"
    notice = f"showing the {len(distance):,} nodes within {depth} {edges} of {name}"
    return _keep(view, [k for k in view.nodes if k in distance], notice)


# -- folding repeated chains and loop steps ----------------------------------------------


def collapse(view: GraphView, min_repeats: int = 3) -> GraphView:
    """Fold every run of at least ``min_repeats`` repetitions of a pattern along a spine.

    See Note [Folding the steps of a loop]. When nothing repeats, the view is
    the same but says so in a notice.
    """
    if min_repeats < 2:
        raise ValueError(f"min_repeats must be at least 2, got {min_repeats}")
    spine, sides = _spines(view)
    names = {k: n.info.name for k, n in view.nodes.items()}

    def signature(key: str) -> tuple[object, ...]:
        # The module call is part of it: a chain folds inside one call, never across
        # calls, which the module view folds as calls (autograd_viz.draw.showing).
        side = tuple(sorted(names[s] for s in sides.get(key, ())))
        return (names[key], side, view.nodes[key].info.scope)

    runs = [
        run
        for chain in _chains(spine, view.nodes)
        for run in _repeating_runs(chain, view.nodes, min_repeats, key=signature)
    ]
    if not runs:
        notice = (
            f"nothing to fold: no pattern of up to {MAX_PERIOD} nodes repeats "
            f"{min_repeats} times along a chain or the steps of a loop"
        )
        return replace(view, notices=(*view.notices, notice))
    nodes = dict(view.nodes)
    rename: dict[str, str] = {}
    folded = 0
    for run, period in runs:
        members = [view.nodes[k] for key in run for k in (key, *sides.get(key, ()))]
        first = members[0]
        nodes[first.key] = replace(first, fold=_fold(members, period, run, sides, names))
        for member in members[1:]:
            del nodes[member.key]
            rename[member.key] = first.key
        folded += len(members)
    edges: dict[tuple[str, str], ViewEdge] = {}
    for edge in view.edges:
        if _same_run(edge, rename):
            continue  # a link inside a run
        moved = replace(
            edge, tail=rename.get(edge.tail, edge.tail), head=rename.get(edge.head, edge.head)
        )
        pair = (moved.tail, moved.head)
        seen = edges.get(pair)
        if seen is None:
            edges[pair] = moved
        else:  # the same shared input of every step: one edge for all of them
            edges[pair] = replace(
                seen,
                delivered=seen.delivered or moved.delivered,
                pruned=seen.pruned and moved.pruned,
            )
    boxes = tuple(b for b in view.boxes if b.node not in rename)  # the fold stands for them
    notice = f"folded {folded:,} nodes of repeated chains into {len(runs):,}"
    return replace(
        view,
        nodes=nodes,
        edges=tuple(edges.values()),
        boxes=boxes,
        elided_near=tuple(dict.fromkeys(rename.get(k, k) for k in view.elided_near)),
        notices=(*view.notices, notice),
    )


# Note [Folding the steps of a loop]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# An unrolled loop such as ``h = (h @ W + x).tanh()`` is not a chain: each
# step also takes a side input (``x``, its own leaf) and a shared one (``W``,
# whose AccumulateGrad every step feeds). Its steps still follow one another
# along a spine: Tanh → Add → Mm → Tanh → ... So:
#
# - A node *owns* a neighbour it sends a gradient to when nothing else sends
#   that neighbour one (and both are in one graph task, on one device). Owned
#   links form a forest.
# - Each node's spine goes on through the owned neighbour with the tallest
#   owned subtree; what else it owns (whole subtrees: ``x``'s AccumulateGrad)
#   are its side nodes, folded with it.
# - A node's signature is its name and its side nodes' names; a run of at
#   least ``min_repeats`` repetitions of 1 to MAX_PERIOD signatures along a
#   spine folds into one node. Shared inputs stay outside, reached by one
#   edge from the fold. A strict chain has no side nodes: the same rule.


def _same_run(edge: ViewEdge, rename: Mapping[str, str]) -> bool:
    return rename.get(edge.tail, edge.tail) == rename.get(edge.head, edge.head)


def _spines(view: GraphView) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """Each node's next node along its spine, and its side nodes (Note [Folding the steps ...])."""
    in_edges: Counter[str] = Counter(e.head for e in view.edges)
    owned: dict[str, list[str]] = {}
    for edge in view.edges:
        tail, head = view.nodes[edge.tail], view.nodes[edge.head]
        if (
            in_edges[edge.head] == 1
            and edge.tail != edge.head
            and tail.graph_task == head.graph_task
            and tail.info.device == head.info.device
            and tail.fold is None
            and head.fold is None
        ):
            owned.setdefault(edge.tail, []).append(edge.head)
    # Heights and sizes of the owned subtrees, children before parents.
    order: list[str] = []
    has_owner = {h for heads in owned.values() for h in heads}
    stack = [k for k in view.nodes if k not in has_owner]
    while stack:
        key = stack.pop()
        order.append(key)
        stack.extend(owned.get(key, ()))
    height: dict[str, tuple[int, int]] = {}
    for key in reversed(order):
        below = [height[c] for c in owned.get(key, ())]
        height[key] = (
            1 + max((h for h, _ in below), default=0),
            1 + sum(size for _, size in below),
        )
    spine: dict[str, str] = {}
    sides: dict[str, tuple[str, ...]] = {}
    for key in order:
        children = owned.get(key, ())
        if not children:
            continue
        nxt = max(children, key=lambda c: height[c])
        spine[key] = nxt
        side: list[str] = []
        todo = [c for c in children if c != nxt]
        while todo:
            child = todo.pop()
            side.append(child)
            todo.extend(owned.get(child, ()))
        if side:
            sides[key] = tuple(side)
    return spine, sides


def _chains(spine: Mapping[str, str], nodes: Mapping[str, ViewNode]) -> Iterable[list[str]]:
    """Every maximal path along spine links, from a node no spine link reaches."""
    reached = set(spine.values())
    for key in nodes:
        if key in reached or key not in spine:
            continue
        chain = [key]
        while chain[-1] in spine:
            chain.append(spine[chain[-1]])
        yield chain


def _repeating_runs(
    chain: Sequence[str],
    nodes: Mapping[str, ViewNode],
    min_repeats: int,
    key: Callable[[str], Hashable] | None = None,
) -> Iterable[tuple[list[str], int]]:
    """``(keys, period)`` of each maximal run of a repeated pattern along ``chain``.

    The pattern is of node names, or of ``key(node key)`` when given.
    """
    names = [key(k) if key is not None else nodes[k].info.name for k in chain]
    i = 0
    while i < len(names):
        best_period, best_repeats = 0, 0
        for period in range(1, MAX_PERIOD + 1):
            pattern = names[i : i + period]
            repeats = 0
            while names[i + repeats * period : i + (repeats + 1) * period] == pattern:
                repeats += 1
            if repeats >= min_repeats and repeats * period > best_repeats * best_period:
                best_period, best_repeats = period, repeats
        if best_period:
            length = best_period * best_repeats
            yield list(chain[i : i + length]), best_period
            i += length
        else:
            i += 1


def _fold(
    members: Sequence[ViewNode],
    period: int,
    run: Sequence[str],
    sides: Mapping[str, Sequence[str]],
    names: Mapping[str, str],
) -> Fold:
    statuses: Counter[str] = Counter(
        "not run" if m.status is None else m.status.value for m in members
    )
    seqs = [m.info.sequence_nr for m in members]
    topos = [m.info.topological_nr for m in members]
    pattern = []
    for key in run[:period]:
        side = sorted(names[s] for s in sides.get(key, ()))
        pattern.append(names[key] + "".join(f" +{name}" for name in side))
    return Fold(
        pattern=tuple(pattern),
        repeats=len(run) // period,
        members=tuple(m.key for m in members),
        statuses=dict(statuses),
        sequence_nrs=(min(seqs), max(seqs)),
        topological_nrs=(min(topos), max(topos)),
    )


def fold_status(fold: Fold) -> NodeStatus | None:
    """The one status a folded chain is drawn with: the most urgent among its members."""
    return drawn_status(fold.statuses)


def drawn_status(statuses: Mapping[str, int]) -> NodeStatus | None:
    """The one status nodes in ``statuses`` are drawn with together: the most urgent."""
    for status in (NodeStatus.FAILED, NodeStatus.RUNNING, NodeStatus.QUEUED, NodeStatus.PARTIAL):
        if statuses.get(status.value):
            return status
    counted = {s for s, n in statuses.items() if n}
    if not counted or counted == {"not run"}:
        return None
    if len(counted) == 1:
        return NodeStatus(counted.pop())
    if NodeStatus.DONE.value in counted and NodeStatus.WAITING.value in counted:
        return NodeStatus.PARTIAL
    if counted <= {NodeStatus.DONE.value, NodeStatus.PRUNED.value}:
        return NodeStatus.DONE
    return NodeStatus.WAITING


# -- a node budget ---------------------------------------------------------------------


def limit(view: GraphView, max_nodes: int) -> GraphView:
    """At most ``max_nodes`` nodes: breadth first from the nodes nothing points to (the roots).

    Raises:
        ValueError: ``max_nodes`` is not a positive integer.
    """
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
        raise ValueError(f"max_nodes must be a positive integer, got {max_nodes!r}")
    if len(view.nodes) <= max_nodes:
        return view
    children: dict[str, list[str]] = {}
    for edge in view.edges:
        children.setdefault(edge.tail, []).append(edge.head)
    has_parent = {edge.head for edge in view.edges}
    order: dict[str, None] = {}
    queue = deque(k for k in view.nodes if k not in has_parent)
    while queue and len(order) < max_nodes:
        key = queue.popleft()
        if key in order:
            continue
        order[key] = None
        queue.extend(children.get(key, ()))
    for key in view.nodes:  # nodes no root reaches (another graph task's leftovers)
        if len(order) >= max_nodes:
            break
        order.setdefault(key, None)
    shown = len(order)
    notice = f"showing {shown:,} of {len(view.nodes):,} nodes, nearest the root first"
    return _keep(view, [k for k in view.nodes if k in order], notice)


# -- shared ----------------------------------------------------------------------------


def _undirected(edges: Iterable[ViewEdge]) -> dict[str, list[str]]:
    neighbours: dict[str, list[str]] = {}
    for edge in edges:
        neighbours.setdefault(edge.tail, []).append(edge.head)
        neighbours.setdefault(edge.head, []).append(edge.tail)
    return neighbours


def _keep(view: GraphView, keys: Sequence[str], notice: str) -> GraphView:
    """``view`` with only the nodes ``keys``; what is left out is counted and marked."""
    kept = set(keys)
    left_out = len(view.nodes) - len(kept)
    if left_out == 0:
        return view
    frontier: dict[str, None] = {}
    for edge in view.edges:
        if (edge.tail in kept) != (edge.head in kept):
            frontier[edge.tail if edge.tail in kept else edge.head] = None
    frontier.update(dict.fromkeys(k for k in view.elided_near if k in kept))
    tasks_kept = {view.nodes[k].graph_task for k in kept}
    return replace(
        view,
        tasks=tuple(t for t in view.tasks if t.id in tasks_kept),
        nodes={k: view.nodes[k] for k in keys},
        edges=tuple(e for e in view.edges if e.tail in kept and e.head in kept),
        boxes=tuple(b for b in view.boxes if b.node in kept),
        elided=view.elided + left_out,
        elided_near=tuple(frontier),
        notices=(*view.notices, f"{notice}; {left_out:,} more not shown"),
    )
