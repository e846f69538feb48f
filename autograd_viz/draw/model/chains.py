"""Folding repeated chains and the steps of loops that no module encloses into one box.

:func:`collapse` finds each run of a repeating pattern along a chain, or the
steps of an unrolled loop with their side inputs (the ``Tanh → Add → Mm`` of
an RNN), and draws it as one :class:`~autograd_viz.draw.model.drawn.ModuleBox`: the
same kind of box as a closed module call or a fold of calls, with a name
(:func:`chain_name`), a count and a summary of what it holds. The name reads
back (:func:`chain_folds` gives every chain fold's name and nodes to
:class:`~autograd_viz.draw.model.targets.Names`), so what a ``--collapse`` picture
shows can be typed into ``--around``, ``--expand`` and the TUI's ``/``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from autograd_viz.draw.model.boxes import box_node
from autograd_viz.draw.model.drawn import BoxSummary, ModuleBox
from autograd_viz.draw.model.graph_view import GraphView, ViewEdge, ViewNode
from autograd_viz.draw.model.totals import summarize

MAX_PERIOD = 4
"""The longest repeating pattern :func:`collapse` looks for, in nodes."""
MIN_REPEATS = 3
"""The fewest repetitions :func:`collapse` folds by default."""


@dataclass(frozen=True, slots=True)
class ChainFold:
    """One run of a repeated pattern along a spine, before it is drawn."""

    name: str
    """What it is called: :func:`chain_name`."""
    members: tuple[str, ...]
    """Keys of the nodes it holds, spine nodes each followed by their side nodes."""
    repeats: int
    """How many times the pattern repeats."""
    pattern: tuple[str, ...]
    """The node names of one repetition, each with its side inputs (``"X +AccumulateGrad"``)."""


def chain_folds(view: GraphView, min_repeats: int = MIN_REPEATS) -> list[ChainFold]:
    """Every run :func:`collapse` would fold in ``view`` (Note [Folding the steps of a loop]).

    Raises:
        ValueError: ``min_repeats`` is below 2.
    """
    if min_repeats < 2:
        raise ValueError(f"min_repeats must be at least 2, got {min_repeats}")
    spine, sides = _spines(view)
    names = {k: n.info.name for k, n in view.nodes.items()}

    def signature(key: str) -> tuple[object, ...]:
        # The module call is part of it: a chain folds inside one call, never across
        # calls, which the module view folds as calls (autograd_viz.draw.model.showing).
        side = tuple(sorted(names[s] for s in sides.get(key, ())))
        return (names[key], side, view.nodes[key].info.scope)

    out = []
    for chain in _chains(spine, view.nodes):
        for run, period in _repeating_runs(chain, min_repeats, signature):
            pattern = []
            for key in run[:period]:
                side = sorted(names[s] for s in sides.get(key, ()))
                pattern.append(names[key] + "".join(f" +{name}" for name in side))
            ids = (view.nodes[run[0]].info.id, view.nodes[run[-1]].info.id)
            out.append(
                ChainFold(
                    chain_name([names[k] for k in run[:period]], ids),
                    tuple(k for key in run for k in (key, *sides.get(key, ()))),
                    len(run) // period,
                    tuple(pattern),
                )
            )
    return out


def chain_name(names: Sequence[str], ids: tuple[int, int]) -> str:
    """A chain fold's name: one repetition's node names and the ids of its first and last
    spine nodes, ``"(TanhBackward0, AddBackward0, MmBackward0) #93..#6"`` or
    ``"MulBackward0 #40..#2"``; unique in a graph, since the first node is in one fold only."""
    body = names[0] if len(names) == 1 else f"({', '.join(names)})"
    return f"{body} #{ids[0]}..#{ids[1]}"


def collapse(
    view: GraphView, min_repeats: int = MIN_REPEATS, keep: Collection[str] = ()
) -> GraphView:
    """Fold every run of at least ``min_repeats`` repetitions of a pattern along a spine.

    See Note [Folding the steps of a loop]. Each run becomes one node whose
    ``box`` is a :class:`~autograd_viz.draw.model.drawn.ModuleBox` (its name, count,
    members and summary at the step). Runs holding a node of ``keep`` stay
    drawn whole (``--expand`` of a chain fold's name). When nothing repeats,
    the view is the same but says so in a notice.

    Raises:
        ValueError: ``min_repeats`` is below 2.
    """
    kept = set(keep)
    runs = [r for r in chain_folds(view, min_repeats) if kept.isdisjoint(r.members)]
    if not runs:
        notice = (
            f"nothing to fold: no pattern of up to {MAX_PERIOD} nodes repeats "
            f"{min_repeats} times along a chain or the steps of a loop"
        )
        return replace(view, notices=(*view.notices, notice))
    incoming: dict[str, list[ViewEdge]] = {}
    for edge in view.edges:
        incoming.setdefault(edge.head, []).append(edge)
    nodes = dict(view.nodes)
    rename: dict[str, str] = {}
    folded = 0
    for run in runs:
        members = [view.nodes[k] for k in run.members]
        first = members[0]
        nodes[first.key] = _box_node(first, run, summarize(members, incoming))
        for member in members[1:]:
            del nodes[member.key]
            rename[member.key] = first.key
        folded += len(members)
    edges: dict[tuple[str, str], ViewEdge] = {}
    for edge in view.edges:
        if rename.get(edge.tail, edge.tail) == rename.get(edge.head, edge.head):
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
                delivered=seen.delivered and moved.delivered,
                pruned=seen.pruned and moved.pruned,
                grad=None,
                count=seen.count + moved.count,
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


def _box_node(first: ViewNode, run: ChainFold, summary: BoxSummary) -> ViewNode:
    """The drawn node of a chain fold; it keeps its first node's key, device and graph task."""
    box = ModuleBox(
        first.key, run.name, "", run.repeats, (), None, run.members, summary, run.pattern
    )
    return box_node(first, box)


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
            and tail.box is None
            and head.box is None
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
    chain: Sequence[str], min_repeats: int, key: Callable[[str], Hashable]
) -> Iterable[tuple[list[str], int]]:
    """``(keys, period)`` of each maximal run of a repeated pattern of ``key`` along ``chain``."""
    names = [key(k) for k in chain]
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


__all__ = ["MAX_PERIOD", "MIN_REPEATS", "ChainFold", "chain_folds", "chain_name", "collapse"]
