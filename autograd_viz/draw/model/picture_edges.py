"""The edges of a module picture: which edges of the graph make each drawn edge.

Part of :mod:`autograd_viz.draw.model.module_picture`: an edge between two nodes drawn as
themselves is drawn as it is; edges into, out of and between boxes are merged into one per
pair of drawn ends; a closed fold's edges from one repetition to the next are one edge from
its box to itself, and a stack's one edge from its drawn call's exit to its entry (Notes
[Rolled loops] and [A fold is drawn as a stack] in :mod:`~autograd_viz.draw.model.stacks`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from autograd_viz.draw.model.folds import FoldGroup
from autograd_viz.draw.model.graph_view import ViewEdge, ViewNode
from autograd_viz.draw.model.stacks import StackPlan, route
from autograd_viz.draw.model.tree import ModuleTree, Scope


def steps_of(
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


class EdgePlan:
    """Which of a view's edges make each drawn edge: one edge as it is, or several merged
    between a pair of drawn nodes (Note [Rolled loops]). The same at every step of a graph."""

    __slots__ = ("drawn_of", "rolled", "sources")

    def __init__(
        self, sources: list[tuple[str, str, list[int]] | int], rolled: Mapping[int, int]
    ) -> None:
        self.sources = sources
        """Per drawn edge: the index of the view's edge drawn as it is, or the pair of drawn
        nodes and the indices of the edges merged into it."""
        self.rolled = rolled
        """The drawn edges that draw a stack's loop, with the calls the stack stands for."""
        self.drawn_of: dict[int, int] = {}
        """The view's edge index -> the drawn edge it is part of (none: inside a box)."""
        for n, source in enumerate(sources):
            for i in (source,) if isinstance(source, int) else source[2]:
                self.drawn_of[i] = n

    def edges(self, edges: Sequence[ViewEdge]) -> tuple[ViewEdge, ...]:
        """The drawn edges of ``edges``."""
        return tuple(self._edge(edges, n) for n in range(len(self.sources)))

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
            out[n] = self._edge(edges, n)
        return tuple(out)

    def _edge(self, edges: Sequence[ViewEdge], n: int) -> ViewEdge:
        source = self.sources[n]
        if isinstance(source, int):
            return edges[source]
        tail, head, indices = source
        merged = replace(edges[indices[0]], tail=tail, head=head, rolled=self.rolled.get(n, 0))
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


def edge_plan(
    edges: Sequence[ViewEdge],
    drawn: Mapping[str, str],
    tree: ModuleTree,
    steps: Mapping[int, int],
    stacks: Sequence[StackPlan] = (),
    nodes: Mapping[str, ViewNode] | None = None,
    tucked: Mapping[str, str] | None = None,
) -> EdgePlan:
    """Edges between drawn nodes: as they are between nodes, one per pair where a box is;
    a fold's edges between its repetitions, one edge from the box to itself; a stack's edges
    moved onto its drawn call, those between its calls one edge (``nodes``: the view's, whose
    ``sequence_nr`` say which of them leaves the drawn call last); none into ``tucked``
    parameters."""
    merged: dict[tuple[str, str], tuple[str, str, list[int]]] = {}
    sources: list[tuple[str, str, list[int]] | int] = []
    loops: dict[str, list[tuple[int, str, str]]] = {}
    scope_of, weights, boxed = tree.scope_of.get, tree.weights, drawn.get
    for i, edge in enumerate(edges):
        ends = edge.tail, edge.head
        if tucked and edge.head in tucked:
            continue  # into a parameter counted in its frame's label
        if stacks:  # Note [A fold is drawn as a stack] in stacks.py
            routed = route(stacks, *ends)
            if routed is None:
                continue  # inside a call not drawn: the drawn call draws it
            if routed[2] is not None:
                loops.setdefault(routed[2].key, []).append((i, routed[0], routed[1]))
                continue
            ends = routed[0], routed[1]
        tail, head = boxed(ends[0], ends[0]), boxed(ends[1], ends[1])
        if tail == head and (tail != ends[0] or head != ends[1]):
            if not steps:
                continue  # inside one box
            inner = scope_of(ends[0])
            outer = scope_of(ends[1])
            if inner == outer:
                continue  # inside one call, so one repetition
            one = steps.get(inner)  # type: ignore[arg-type]
            other = steps.get(outer)  # type: ignore[arg-type]
            # A parameter's AccumulateGrad sits in the call that first used it; the later
            # calls using it are sharing, not a loop.
            if one is None or other is None or one == other or weights[ends[1]] != 1:
                continue  # inside one box (one repetition of a fold)
        if tail == edge.tail and head == edge.head:
            sources.append(i)
            continue
        seen = merged.get((tail, head))
        if seen is None:
            seen = merged[tail, head] = (tail, head, [])
            sources.append(seen)
        seen[2].append(i)
    rolled: dict[int, int] = {}
    counts = {stack.key: stack.group.count for stack in stacks}
    for key, edges_of_loop in loops.items():
        # Drawn from where the drawn call's gradient leaves last (its earliest op in the
        # forward) to where it enters.
        if nodes is None:
            first = edges_of_loop[0]
        else:
            first = min(edges_of_loop, key=lambda e: nodes[edges[e[0]].tail].info.sequence_nr)
        rolled[len(sources)] = counts[key]
        sources.append(
            (boxed(first[1], first[1]), boxed(first[2], first[2]), [e[0] for e in edges_of_loop])
        )
    return EdgePlan(sources, rolled)


__all__ = ["EdgePlan", "edge_plan", "steps_of"]
