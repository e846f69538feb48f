"""Box summaries kept up to date from one step to the next, at the cost of what changed.

An animation draws one graph at hundreds of steps with the same boxes and
clusters; from one step to the next a few nodes change status and a few edges
deliver. What a summary holds splits in two (Note [What changes in a summary]):
the counts that depend only on the graph, added up once, and the few that
depend on the step, which :class:`RunningSums` moves by each changed node's and
edge's difference, in every call and fold it counts in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from autograd_viz.draw.model.drawn import BoxSummary
from autograd_viz.draw.model.graph_view import GraphView, ViewEdge, ViewNode
from autograd_viz.draw.model.totals import (
    box_status,
    groups_by_call,
    input_of,
    node_non_finite,
    ordered_statuses,
    scope_summaries,
    status_key,
    waits,
)
from autograd_viz.draw.model.tree import FoldGroup, ModuleTree

# Note [What changes in a summary]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A box's node count, its sequence and topological ranges, its dependencies and
# the edges into it are the graph's: the same at every step of one graph task.
# Its dependencies still to come, its nodes' statuses, its nodes holding NaN or
# Inf and its inputs not yet delivered are the step's. Each is a sum over the
# box's nodes (or inputs), so a step's summary is the last one plus, for each
# node (edge) that changed, the new node's share less the old one's, in every
# call enclosing the node and in the fold holding such a call. A status whose
# count falls to zero leaves the summary, and statuses are listed in one fixed
# order (summaries.ordered_statuses), so the result is the summary made from
# scratch, field for field: tests/viz/draw/test_running_sums.py compares them.


class _Moving:
    """The step's part of one summary, while it moves."""

    __slots__ = ("non_finite", "remaining", "statuses", "waiting")

    def __init__(self, summary: BoxSummary) -> None:
        self.remaining = summary.remaining
        self.waiting = summary.waiting_inputs
        self.non_finite = summary.non_finite
        self.statuses: dict[str, int] = dict(summary.statuses)

    def move_node(self, old: ViewNode, new: ViewNode) -> None:
        self.remaining += new.remaining - old.remaining
        self.non_finite += node_non_finite(new) - node_non_finite(old)
        was, now = status_key(old), status_key(new)
        if was != now:
            statuses = self.statuses
            statuses[was] -= 1
            statuses[now] = statuses.get(now, 0) + 1

    def summary(self, before: BoxSummary) -> BoxSummary:
        statuses = ordered_statuses(self.statuses)
        return replace(
            before,
            remaining=self.remaining,
            waiting_inputs=self.waiting,
            statuses=statuses,
            non_finite=self.non_finite,
            status=box_status(statuses, self.non_finite),
        )


class RunningSums:
    """Every module call's summary and each fold group's, for one graph, step after step.

    Made from one step's view (added up from scratch); :meth:`move` takes the
    next step's view of the same graph and returns which calls and groups
    changed. See Note [What changes in a summary].
    """

    def __init__(
        self, view: GraphView, tree: ModuleTree, groups: Mapping[str, FoldGroup] | None = None
    ) -> None:
        self.tree = tree
        self.summaries, self.groups = scope_summaries(view, tree, groups)
        self._in_group = groups_by_call(groups or {})
        self._edge_targets: dict[int, tuple[list[int], list[str]]] = {}

    def move(
        self,
        nodes: Iterable[tuple[ViewNode, ViewNode]],
        edges: Iterable[tuple[int, ViewEdge, ViewEdge]],
    ) -> tuple[set[int], set[str]]:
        """Move the summaries by ``nodes`` (old, new) and ``edges`` (index, old, new) that
        changed; returns the calls (by index) and the groups (by key) whose summary changed.

        A node or edge must be the same one of the same graph, at another step.
        """
        moving: dict[int, _Moving] = {}
        moving_groups: dict[str, _Moving] = {}
        scope_of, ancestors = self.tree.scope_of.get, self.tree.ancestors
        for old, new in nodes:
            scope = scope_of(new.key)
            if scope is None:
                continue
            for index in ancestors(scope):
                _at(moving, self.summaries, index).move_node(old, new)
                group = self._in_group.get(index)
                if group is not None:
                    _at(moving_groups, self.groups, group).move_node(old, new)
        for i, old_edge, new_edge in edges:
            change = waits(new_edge) - waits(old_edge)
            if not change:
                continue
            scopes, groups = self._targets(i, new_edge)
            for index in scopes:
                _at(moving, self.summaries, index).waiting += change
            for group in groups:
                _at(moving_groups, self.groups, group).waiting += change
        for index, sums in moving.items():
            self.summaries[index] = sums.summary(self.summaries[index])
        for group, sums in moving_groups.items():
            self.groups[group] = sums.summary(self.groups[group])
        return set(moving), set(moving_groups)

    def _targets(self, index: int, edge: ViewEdge) -> tuple[list[int], list[str]]:
        """The calls and groups an edge is an input of (as
        :func:`~autograd_viz.draw.model.totals.scope_summaries` counts them), kept by index."""
        known = self._edge_targets.get(index)
        if known is None:
            tree = self.tree
            head = tree.scope_of.get(edge.head)
            tail = tree.scope_of.get(edge.tail)
            known = ([], [])
            if head is not None and tail != head:
                around = frozenset(() if tail is None else tree.ancestors(tail))
                known = input_of(tree, self._in_group, head, around)
            self._edge_targets[index] = known
        return known


def _at(moving: dict[Any, _Moving], summaries: Any, key: Any) -> _Moving:
    """The moving part of ``summaries[key]`` (a call's by index, a group's by key)."""
    sums = moving.get(key)
    if sums is None:
        sums = moving[key] = _Moving(summaries[key])
    return sums


__all__ = ["RunningSums"]
