"""What the nodes inside a module box add up to at one step.

A box (a closed module call, a fold of calls) or a cluster (an open call)
says what its nodes would: how many, their sequence and topological ranges,
their dependencies still to come, the edges into it from outside and how
many of those have delivered, how many nodes are in each status, and one
:class:`BoxStatus`. :func:`summarize` adds up any set of nodes;
:func:`scope_summaries` adds up every module call of a tree at once, in time
linear in the graph (children's sums go into their parents'), which is what a
picture of 100,000 nodes needs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from autograd_viz.draw.model.drawn import BoxStatus, BoxSummary
from autograd_viz.draw.model.graph_view import GraphView, ViewEdge, ViewNode
from autograd_viz.draw.model.tree import FoldGroup, ModuleTree
from autograd_viz.trace.replay import NodeStatus
from autograd_viz.trace.summary import TensorSummary
from autograd_viz.trace.text import UINT64_MAX

_NO_SEQUENCE_NRS = (UINT64_MAX, UINT64_MAX)


class _Sum:
    """A summary while it is added up."""

    __slots__ = (
        "dependencies",
        "inputs",
        "nodes",
        "non_finite",
        "remaining",
        "seq",
        "statuses",
        "topo",
        "waiting",
    )

    def __init__(self) -> None:
        self.nodes = self.remaining = self.dependencies = self.non_finite = 0
        self.inputs = self.waiting = 0
        self.seq: list[int] = []  # [low, high] once a node is in
        self.topo: list[int] = []
        self.statuses: Counter[str] = Counter()

    def add_node(self, node: ViewNode) -> None:
        info = node.info
        self.nodes += 1
        self.remaining += node.remaining
        self.dependencies += info.dependencies
        self.non_finite += node.non_finite
        self.statuses["not run" if node.status is None else node.status] += 1
        if info.sequence_nr != UINT64_MAX:
            _widen(self.seq, info.sequence_nr, info.sequence_nr)
        _widen(self.topo, info.topological_nr, info.topological_nr)

    def add(self, other: _Sum) -> None:
        self.nodes += other.nodes
        self.remaining += other.remaining
        self.dependencies += other.dependencies
        self.non_finite += other.non_finite
        # What Counter.update does with a mapping, without its checks: this runs for every
        # call at every step of an animation.
        statuses = self.statuses
        for status, n in other.statuses.items():
            statuses[status] = statuses.get(status, 0) + n
        if other.seq:
            _widen(self.seq, *other.seq)
        if other.topo:
            _widen(self.topo, *other.topo)

    def add_input(self, edge: ViewEdge) -> None:
        self.inputs += 1
        self.waiting += waits(edge)

    def done(self) -> BoxSummary:
        return BoxSummary(
            nodes=self.nodes,
            sequence_nrs=(self.seq[0], self.seq[1]) if self.seq else _NO_SEQUENCE_NRS,
            topological_nrs=(self.topo[0], self.topo[1]) if self.topo else (0, 0),
            remaining=self.remaining,
            dependencies=self.dependencies,
            inputs=self.inputs,
            waiting_inputs=self.waiting,
            statuses=ordered_statuses(self.statuses),
            non_finite=self.non_finite,
            status=box_status(self.statuses, self.non_finite),
        )


_STATUS_ORDER = ("not run", *(s.value for s in NodeStatus))


def ordered_statuses(statuses: Mapping[str, int]) -> dict[str, int]:
    """``statuses`` as a summary lists them: in one fixed order (not run, then as
    :class:`NodeStatus` lists them), statuses no node is in left out."""
    return {status: statuses[status] for status in _STATUS_ORDER if statuses.get(status)}


def status_key(node: ViewNode) -> str:
    """The status a node is counted under in a summary (``"not run"`` before backward)."""
    return "not run" if node.status is None else node.status


def node_non_finite(node: ViewNode) -> bool:
    """:attr:`ViewNode.non_finite`, as the summaries count it (Note on :func:`call_sums`)."""
    slots, outputs = node.slots, node.outputs
    return bool((slots and _non_finite(slots)) or (outputs and _non_finite(outputs)))


def _non_finite(summaries: tuple[TensorSummary | None, ...]) -> bool:
    """``ViewNode.non_finite`` for one tuple of summaries, without a property call per summary."""
    for summary in summaries:
        if summary is not None and (summary.nan_count or summary.inf_count):
            return True
    return False


def _widen(span: list[int], low: int, high: int) -> None:
    if not span:
        span.extend((low, high))
    else:
        span[0] = min(span[0], low)
        span[1] = max(span[1], high)


def summarize(nodes: Sequence[ViewNode], incoming: Mapping[str, Sequence[ViewEdge]]) -> BoxSummary:
    """What ``nodes`` add up to; ``incoming`` has every edge into each node, by head key."""
    keys = {n.key for n in nodes}
    total = _Sum()
    for node in nodes:
        total.add_node(node)
        for edge in incoming.get(node.key, ()):
            if edge.tail not in keys:
                total.add_input(edge)
    return total.done()


class CallSums:
    """What the nodes inside each module call of a tree add up to at one step, their
    inputs aside: made once by :func:`call_sums`, read by :func:`status_of_calls` and
    then by :func:`scope_summaries` (which adds the inputs: it reads them once)."""

    __slots__ = ("sums",)

    def __init__(self, sums: list[_Sum]) -> None:
        self.sums = sums


def scope_summaries(
    view: GraphView,
    tree: ModuleTree,
    groups: Mapping[str, FoldGroup] | None = None,
    sums: CallSums | None = None,
) -> tuple[list[BoxSummary], dict[str, BoxSummary]]:
    """The summary of every module call of ``tree``, and of the fold ``groups``, at ``view``'s step.

    ``groups`` are the folds drawn, by box key: a fold drawn as several boxes (Note [A
    box is one status] in :mod:`~autograd_viz.draw.model.choosing`) is one group per box.
    ``sums``: :func:`call_sums` of the same view and tree, if made already.

    Returns:
        One summary per scope (by index), and one per group asked for (by its key).
    """
    totals = (sums or call_sums(view, tree)).sums
    scope_of = tree.scope_of.get
    # A group's own sum: its calls' sums, its inputs those from outside every call of it.
    wanted = dict(groups or {})
    in_group = groups_by_call(wanted)
    group_sums = {g: _Sum() for g in wanted}
    ancestors: dict[int | None, frozenset[int]] = {None: frozenset()}
    for edge in view.edges:
        head = scope_of(edge.head)
        if head is None:
            continue
        tail = scope_of(edge.tail)
        if tail == head:  # inside one call (most edges): into none of the calls around it
            continue
        around = ancestors.get(tail)
        if around is None:
            around = ancestors[tail] = frozenset(tree.ancestors(tail))  # type: ignore[arg-type]
        calls, into_groups = input_of(tree, in_group, head, around)
        for index in calls:
            totals[index].add_input(edge)
        for group in into_groups:
            group_sums[group].add_input(edge)
    for group, total in group_sums.items():
        for index in wanted[group].scopes:
            total.add(totals[index])
    return [s.done() for s in totals], {g: s.done() for g, s in group_sums.items()}


def groups_by_call(groups: Mapping[str, FoldGroup]) -> dict[int, str]:
    """The fold group (by key) each call of ``groups`` belongs to, by scope index."""
    return {i: key for key, g in groups.items() for i in g.scopes}


def input_of(
    tree: ModuleTree, in_group: Mapping[int, str], head: int, around: frozenset[int]
) -> tuple[list[int], list[str]]:
    """The calls, and the fold groups of ``in_group``, that an edge into call ``head`` is an
    input of, when the calls around its tail are ``around`` (its tail's call and every call
    enclosing it): those around its head up to the first around its tail."""
    calls: list[int] = []
    groups: list[str] = []
    current: int | None = head
    while current is not None and current not in around:
        calls.append(current)
        group = in_group.get(current)
        if group is not None and not any(in_group.get(a) == group for a in around):
            groups.append(group)
        current = tree.scopes[current].parent
    return calls, groups


def waits(edge: ViewEdge) -> bool:
    """Whether ``edge`` is an input still to come: not delivered, and not pruned."""
    return not edge.delivered and not edge.pruned


def call_sums(view: GraphView, tree: ModuleTree) -> CallSums:
    """What every module call of ``tree`` holds at ``view``'s step, its children's included
    (their inputs aside), in time linear in the graph."""
    scopes = tree.scopes
    sums = [_Sum() for _ in scopes]
    nodes = view.nodes
    # The hot loop of a big picture: one pass per call over its own nodes, the sums kept
    # in locals and stored once per call, no property calls for the nodes (most of them)
    # that hold no gradient summary.
    for scope in scopes:
        if not scope.nodes:
            continue
        count = remaining = dependencies = non_finite = 0
        statuses: dict[NodeStatus | None, int] = {}
        topo_low, topo_high = UINT64_MAX, -1
        seq_low, seq_high = UINT64_MAX, -1
        for key in scope.nodes:
            node = nodes.get(key)
            if node is None:
                continue
            info = node.info
            count += 1
            remaining += node.remaining
            dependencies += info.dependencies
            if (node.slots and _non_finite(node.slots)) or (
                node.outputs and _non_finite(node.outputs)
            ):
                non_finite += 1
            status = node.status
            statuses[status] = statuses.get(status, 0) + 1
            # Comparisons, not min() and max(): two calls fewer per node.
            topo = info.topological_nr
            if topo < topo_low:  # noqa: PLR1730
                topo_low = topo
            if topo > topo_high:  # noqa: PLR1730
                topo_high = topo
            seq = info.sequence_nr
            if seq != UINT64_MAX:  # a leaf's AccumulateGrad: no place in the forward's order
                if seq < seq_low:  # noqa: PLR1730
                    seq_low = seq
                if seq > seq_high:  # noqa: PLR1730
                    seq_high = seq
        if not count:
            continue
        total = sums[scope.index]
        total.nodes, total.remaining, total.dependencies = count, remaining, dependencies
        total.non_finite = non_finite
        for status, n in statuses.items():
            total.statuses["not run" if status is None else status] += n
        total.topo = [topo_low, topo_high]
        if seq_high >= 0:
            total.seq = [seq_low, seq_high]
    for scope in reversed(scopes):  # children have larger indices than their parents
        if scope.parent is not None:
            sums[scope.parent].add(sums[scope.index])
    return CallSums(sums)


def status_of_calls(
    view: GraphView, tree: ModuleTree, sums: CallSums | None = None
) -> Callable[[int], BoxStatus]:
    """Each module call's status at ``view``'s step, by scope index (``sums``: its
    :func:`call_sums`, if made already)."""
    totals = (sums or call_sums(view, tree)).sums

    def status(index: int) -> BoxStatus:
        total = totals[index]
        return box_status(total.statuses, total.non_finite)

    return status


# box_status runs for every module call at every step of an animation: its sets are
# made once, not per call (an enum member's .value is a property call).
_FAILED = NodeStatus.FAILED.value
_DONE = NodeStatus.DONE.value
_RAN = frozenset((NodeStatus.DONE.value, NodeStatus.PRUNED.value))
_IDLE = frozenset(("not run", NodeStatus.WAITING.value, NodeStatus.PRUNED.value))


def box_status(statuses: Mapping[str, int], non_finite: int = 0) -> BoxStatus:
    """One word for nodes in these statuses (see :class:`BoxStatus`)."""
    if non_finite or statuses.get(_FAILED):
        return BoxStatus.FAILED
    counted = {s for s, n in statuses.items() if n}
    if _DONE in counted and counted <= _RAN:
        return BoxStatus.DONE
    if counted <= _IDLE:
        return BoxStatus.NOT_STARTED
    return BoxStatus.RUNNING


__all__ = [
    "CallSums",
    "box_status",
    "call_sums",
    "groups_by_call",
    "input_of",
    "node_non_finite",
    "ordered_statuses",
    "scope_summaries",
    "status_key",
    "status_of_calls",
    "summarize",
    "waits",
]
