"""Trimming a big graph down to a drawing someone can read.

Three independent steps, applied by :func:`autograd_viz.draw.render.dot.to_dot` in this
order:

* :func:`around`: the nodes within ``depth`` edges of a node, a parameter or a
  module (any name :mod:`autograd_viz.draw.model.targets` reads);
* :func:`collapse`: each run of a repeating pattern along a chain or the
  steps of an unrolled loop with their side inputs (the ``Tanh → Add → Mm``
  of an RNN) becomes one node that says how many steps it stands for and how
  far the engine got in them;
* :func:`limit`: at most ``max_nodes`` nodes, the ones nearest the root; the
  rest are counted in a notice drawn where they would have been.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Container, Iterable, Sequence
from dataclasses import replace

from autograd_viz.draw.model.chains import MAX_PERIOD, chain_folds, collapse
from autograd_viz.draw.model.folds import FoldGroup, group_of_calls
from autograd_viz.draw.model.graph_view import GraphView, GraphViewError, ViewEdge
from autograd_viz.draw.model.targets import Names, Target
from autograd_viz.draw.model.tree import ModuleTree

# -- a neighbourhood -------------------------------------------------------------------


def find_node(view: GraphView, spec: int | str) -> str:
    """The key of the one node ``spec`` names (any name :mod:`~autograd_viz.draw.model.targets`
    reads).

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
    """What ``spec`` names in ``view``: a node id, ``Name #id``, a parameter, a module path,
    a fold of calls or a folded chain.

    Raises:
        GraphViewError: it names nothing, or a node name that several nodes have.
    """
    return names_of_view(view).resolve(spec)


def names_of_view(view: GraphView) -> Names:
    """Every name ``view`` can show, read back: its nodes, modules, folds and chain folds."""
    tree = ModuleTree.of_view(view)
    return Names(
        ((k, n.info) for k, n in view.nodes.items()),
        tree,
        chains=lambda: {c.name: c.members for c in chain_folds(view)},
    )


def around(
    view: GraphView,
    spec: int | str | Target,
    depth: int,
    together: Sequence[Collection[str]] = (),
) -> GraphView:
    """The part of ``view`` within ``depth`` edges (either direction) of what ``spec`` names:
    :func:`around_carrying`'s view."""
    return around_carrying(view, spec, depth, together)[0]


def around_carrying(
    view: GraphView,
    spec: int | str | Target,
    depth: int,
    together: Sequence[Collection[str]] = (),
) -> tuple[GraphView, frozenset[str]]:
    """The part of ``view`` within ``depth`` edges (either direction) of what ``spec`` names.

    ``spec`` is any name :mod:`~autograd_viz.draw.model.targets` reads (a node, a
    parameter, a module: then every node inside it is a centre), or a
    :class:`~autograd_viz.draw.model.targets.Target` already resolved.

    ``together`` are sets of nodes that count as one: reaching one of them
    reaches them all, at one distance, and keeps them all (the other calls of a
    fold the centre is in, drawn as one box: Note [Around a fold]).

    Returns:
        The neighbourhood, and the nodes it holds only because they count as one with a
        node reached (:func:`say_carried` says what became of them in the picture).

    Raises:
        GraphViewError: ``spec`` names nothing, or a node name several nodes have.
        ValueError: ``depth`` is negative.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"depth must be a non-negative integer, got {depth!r}")
    target = spec if isinstance(spec, Target) else resolve(view, spec)
    neighbours = _undirected(view.edges)
    member_of = {key: i for i, keys in enumerate(together) for key in keys}
    distance: dict[str, int] = {}
    frontier: deque[str] = deque()

    carried: set[str] = set()  # nodes kept because they are counted with one reached

    def reach(key: str, at: int) -> None:
        group = member_of.get(key)
        for one in (key,) if group is None else together[group]:
            if one not in distance:
                distance[one] = at
                frontier.append(one)
                if one != key:
                    carried.add(one)

    for key in target.nodes:
        reach(key, 0)
    while frontier:
        key = frontier.popleft()
        if distance[key] == depth:
            continue
        for other in neighbours.get(key, ()):
            if other not in distance:
                reach(other, distance[key] + 1)
    name = view.nodes[target.nodes[0]].info.name if target.kind == "node" else target.text
    if name != name.strip():  # " a" is not "a": quoted, as the TUI's status shows it
        name = f"'{name}'"
    edges = "edge" if depth == 1 else "edges"
    notice = f"{NEAR} {len(distance) - len(carried):,} nodes within {depth} {edges} of {name}"
    # What the alike calls carried along are drawn as is said once the picture is made
    # (say_carried): their fold may be opened there, or split by status.
    near = _keep(view, [k for k in view.nodes if k in distance], notice)
    return near, frozenset(carried)


NEAR = "showing the"
"""How the line :func:`around` adds to a view's notices starts."""


# Note [Captions say what is drawn]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A line under a picture is read as a statement about that picture, so it is
# made from the picture, not from what was asked for. ``--around`` carries the
# other repetitions of a fold it reaches along (Note [Around a fold]) so that
# they fold into one box; whether they do is known only once the picture is
# made (a fold left with one repetition is no fold, a running node opens its
# call, a fold splits by status), so the neighbourhood's line says "folded"
# only of the nodes drawn inside a folded box, and counts only the nodes drawn.


def say_carried(picture: GraphView, keys: Collection[str]) -> GraphView:
    """``picture`` with :func:`around`'s line saying what became of the nodes ``keys`` it
    carried along: folded into boxes with their count, or drawn as they are (Note
    [Captions say what is drawn])."""
    if not keys:
        return picture
    folded: set[str] = set()
    drawn: set[str] = set()
    for key, node in picture.nodes.items():
        if node.box is None:
            drawn.add(key)
        else:
            drawn.update(node.box.members)
            if node.box.count > 1:
                folded.update(node.box.members)
    shown = sum(1 for k in keys if k in drawn)
    inside = sum(1 for k in keys if k in folded)
    if not shown:
        return picture
    if inside == shown:
        clause = f", with the alike calls they reach folded ({shown:,} nodes more)"
    elif inside:
        clause = (
            f", with the alike calls they reach ({shown:,} nodes more, {inside:,} of them folded)"
        )
    else:
        clause = f", with the alike calls they reach ({shown:,} nodes more)"
    notices = list(picture.notices)
    for i, line in enumerate(notices):
        if line.startswith(NEAR):
            head, sep, rest = line.partition("; ")
            notices[i] = f"{head}{clause}{sep}{rest}"
            break
    return replace(picture, notices=tuple(notices))


# Note [Around a fold]
# ~~~~~~~~~~~~~~~~~~~~
# ``--around transformer.h.6.attn`` asks about one block; drawing the fold it is
# in as its twelve calls (eleven boxes and h.6 open), or the twelve calls whole
# when the name is the fold itself, makes the neighbourhood as big as the
# model. Around a name, a fold holding it is drawn as the repetition that holds
# it (the first, for the fold itself), opened, and the other repetitions as one
# box with their count (``transformer.h.{0..5,7..11}`` ×11). In the search for
# the neighbourhood those other repetitions count as one node: reaching one of
# their nodes reaches the box, and what is next to any of them is one edge
# further (``select.around``'s ``together``).


def other_repetitions(tree: ModuleTree, target: Target) -> list[list[str]]:
    """For each fold holding ``target``, the nodes of its repetitions that do not hold it
    (Note [Around a fold]); for a fold named itself, of all but its first.

    They are what :func:`around` takes as ``together``.
    """
    held: dict[int, set[int]] = {}
    if target.group is not None:
        starts: Sequence[int] = tree.groups[target.group].repetitions()[0]
    else:
        inner = (tree.scope_of.get(k) for k in target.nodes)
        starts = target.scopes or [i for i in dict.fromkeys(inner) if i is not None]
    for index in starts:
        for ancestor in tree.ancestors(index):
            group_index = tree.group_of.get(ancestor)
            if group_index is not None:
                group = tree.groups[group_index]
                held.setdefault(group_index, set()).add(
                    group.scopes.index(ancestor) // group.period
                )
    out = []
    for group_index, reps in held.items():
        repetitions = tree.groups[group_index].repetitions()
        rest = [
            k
            for r, calls in enumerate(repetitions)
            if r not in reps
            for i in calls
            for k in tree.members(i)
        ]
        # One repetition left is no fold: carried along, it would only be drawn bigger.
        if rest and len(repetitions) - len(reps) >= 2:
            out.append(rest)
    return out


def restricted(tree: ModuleTree, keys: Container[str]) -> ModuleTree:
    """The tree of the nodes ``keys`` only (a neighbourhood), with ``tree``'s folds where
    they still hold (Note [A neighbourhood keeps the whole graph's folds]).

    A call none of whose nodes is kept is left out; the others keep their names, and a
    fold keeps those of its repetitions whose every node is kept, if two or more are.
    """
    old = tree.scopes
    nodes = [tuple(k for k in s.nodes if k in keys) for s in old]
    sizes = [len(n) for n in nodes]
    for scope in reversed(old):  # children after their parents
        if scope.parent is not None:
            sizes[scope.parent] += sizes[scope.index]
    index: dict[int, int] = {}
    for scope in old:
        if sizes[scope.index]:
            index[scope.index] = len(index)
    scopes = [
        replace(
            s,
            index=index[s.index],
            parent=None if s.parent is None else index[s.parent],
            children=tuple(index[c] for c in s.children if c in index),
            nodes=nodes[s.index],
            size=sizes[s.index],
        )
        for s in old
        if s.index in index
    ]
    groups: list[FoldGroup] = []
    for group in tree.groups:
        whole = [r for r in group.repetitions() if all(sizes[i] == old[i].size for i in r)]
        if len(whole) >= 2:
            parent = None if group.parent is None else index[group.parent]
            calls = [index[i] for r in whole for i in r]
            groups.append(group_of_calls(scopes, len(groups), parent, calls, group.period))
    return ModuleTree(
        scopes,
        [index[i] for i in tree.roots if i in index],
        [k for k in tree.outside if k in keys],
        {k: index[i] for k, i in tree.scope_of.items() if k in keys},
        {k: w for k, w in tree.weights.items() if k in keys},
        groups=groups,
    )


# Note [A neighbourhood keeps the whole graph's folds]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# ``--around transformer.h.6.attn`` keeps part of h.6 and, through ``together``,
# every node of the eleven other blocks. Folds found again on what is kept
# would compare the part of h.6 with the whole blocks, find them unlike, and
# cut the run at h.6: two boxes, ``h.{0..5}`` ×6 and ``h.{7..11}`` ×5. The
# calls are alike in the model, whatever part of them a picture keeps, so the
# neighbourhood is drawn with the folds found on the whole graph: a fold keeps
# its whole repetitions (the part of h.6 is drawn open beside them), and one
# box stands for the eleven, ``h.{0..5,7..11}`` ×11.


# -- a node budget ---------------------------------------------------------------------


def limit(view: GraphView, max_nodes: int, why: str = "") -> GraphView:
    """At most ``max_nodes`` nodes: breadth first from the nodes nothing points to (the roots).

    ``why``, if given, is said after the count of what is shown (a box of a module picture
    counts as one node).

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
    if why:
        notice = f"showing {shown:,} of {len(view.nodes):,} boxes and nodes, nearest the root {why}"
    else:
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


__all__ = [
    "MAX_PERIOD",
    "around",
    "around_carrying",
    "collapse",
    "find_node",
    "limit",
    "names_of_view",
    "other_repetitions",
    "resolve",
    "restricted",
    "say_carried",
]
