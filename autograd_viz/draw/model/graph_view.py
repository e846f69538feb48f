"""What a drawing of the backward graph shows: its nodes, edges and their state at one step.

A :class:`GraphView` is the drawing's model, independent of Graphviz. It is
built from one of two things, both trace types:

* an :class:`~autograd_viz.trace.records.UnrunGraph` (:func:`from_graph`): the
  graph the forward pass built, before any backward call, as a source read it
  from tensors; every node is waiting with all its dependencies to come;
* an :class:`~autograd_viz.trace.replay.ExecutionState` (:func:`from_state`): one
  graph task (and the reentrant graph tasks its nodes started) at a step of
  a trace, with each node's status, remaining dependencies and input buffer,
  and which edges have delivered their gradient.

:mod:`autograd_viz.draw.model.select` trims a view (a neighbourhood, folded
chains, a node budget); :mod:`autograd_viz.draw.render.dot` draws it.

Every node gets a key that names it in the drawing. Keys are stable: they
follow the order in which a depth-first walk from the root discovers the
nodes, never the process-wide node ids, so the same graph always gives the
same DOT text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import FrozenInstanceError, dataclass, field
from typing import TYPE_CHECKING, Any

from autograd_viz.draw.model.drawn import TensorBox
from autograd_viz.trace import GraphTaskInfo, NodeInfo, TraceEvent, paused_gc
from autograd_viz.trace.records import GraphViewError, UnrunGraph
from autograd_viz.trace.replay import ExecutionState, NodeState, NodeStatus

if TYPE_CHECKING:
    from autograd_viz.draw.model.drawn import Cluster, ModuleBox
    from autograd_viz.trace.summary import TensorSummary


# Note [View nodes and edges are values]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A view of a 100,000-node trace is as many ViewNodes and ViewEdges, built anew
# at each step drawn, and they are values: nothing changes one once built (a
# changed one is made with dataclasses.replace). A frozen dataclass says so,
# but sets each field through object.__setattr__, which made building them
# six times slower than plain slots assignment (a third of a big `dot`). So
# the fields are a plain slotted dataclass (_NodeFields, _EdgeFields), built
# at its speed, and the object then takes the class ViewNode (ViewEdge): the
# same slots, no field of its own, and a __setattr__ that refuses, as a
# frozen dataclass's does. The loops that build a big view build the fields
# and set the class themselves.


def _frozen(self: object, name: str, value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_del(self: object, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


@dataclass(slots=True)
class _NodeFields:
    """The fields of a :class:`ViewNode` (Note [View nodes and edges are values])."""

    key: str
    """The node's name in the drawing (stable, see the module docstring)."""
    info: NodeInfo
    """The snapshot: name, numbers, device, edges, saved tensors, leaf."""
    graph_task: int
    """The graph task it is drawn in (0 for a graph that has not run)."""
    status: NodeStatus | None
    """Its status at the step; ``None`` before any backward call."""
    remaining: int
    """Dependencies still to come."""
    slots: tuple[TensorSummary | None, ...] = ()
    """Its input buffer (the gradient gathered in each slot so far)."""
    outputs: tuple[TensorSummary | None, ...] | None = None
    """The gradients it returned, once it ran."""
    captured: bool = False
    """A ``grad()`` result is (or will be) taken from its input buffer."""
    error: str | None = None
    """``ExcType: message`` if it failed."""
    thread: str | None = None
    """The engine thread that ran it."""
    released: bool = False
    """Its saved tensors were freed."""
    box: ModuleBox | None = None
    """Set when this node stands for several: a closed module call, a fold of calls
    (:mod:`autograd_viz.draw.model.showing`) or a folded chain
    (:mod:`autograd_viz.draw.model.chains`);
    its other fields are its first node's."""


class ViewNode(_NodeFields):
    """One node of the drawing: a value, never changed once built (assigning a field raises
    ``FrozenInstanceError``; Note [View nodes and edges are values]).

    Its fields are :class:`_NodeFields`'s, in that order.
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> ViewNode:
        node = _NodeFields(*args, **kwargs)
        node.__class__ = cls
        return node  # type: ignore[return-value]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Built by ``__new__``."""

    __setattr__ = _frozen
    __delattr__ = _frozen_del

    @property
    def non_finite(self) -> bool:
        """Whether a gradient in its buffer or among its outputs holds NaN or Inf."""
        return any(s is not None and not s.finite for s in (*self.slots, *(self.outputs or ())))


@dataclass(slots=True)
class _EdgeFields:
    """The fields of a :class:`ViewEdge` (Note [View nodes and edges are values])."""

    tail: str
    """Key of the node that sends the gradient."""
    head: str
    """Key of the node that receives it."""
    output_nr: int
    """Which output of ``tail`` (which forward input) it is."""
    input_nr: int
    """Which input slot of ``head`` it fills."""
    delivered: bool = False
    """The gradient has gone along it (a ``dependency_decrement``)."""
    pruned: bool = False
    """exec_info pruning means no gradient goes along it."""
    grad: TensorSummary | None = None
    """The gradient it carries, once ``tail`` ran."""
    count: int = 1
    """How many edges of the graph it stands for (edges into or out of a module box)."""
    rolled: int = 0
    """For the edge that draws a stack's loop rolled, how many calls the stack stands for
    (Note [A fold is drawn as a stack] in :mod:`~autograd_viz.draw.model.stacks`); else 0."""


class ViewEdge(_EdgeFields):
    """An edge of the backward graph: output ``output_nr`` of ``tail`` feeds ``head``; a value
    (Note [View nodes and edges are values]). Its fields are :class:`_EdgeFields`'s."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> ViewEdge:
        edge = _EdgeFields(*args, **kwargs)
        edge.__class__ = cls
        return edge  # type: ignore[return-value]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Built by ``__new__``."""

    __setattr__ = _frozen
    __delattr__ = _frozen_del


@dataclass(frozen=True, slots=True)
class TaskView:
    """One graph task drawn as a cluster."""

    id: int
    """The graph task id (0 for a graph that has not run)."""
    reentrant_depth: int
    """0 for a call from user code."""
    status: str | None
    """``"running"``, ``"ok"``, ``"error"``, or ``None`` before any backward call."""
    started_by: str | None = None
    """Key of the node whose backward made this reentrant call."""
    error: str | None = None
    """``ExcType: message`` if it failed."""


@dataclass(frozen=True, slots=True)
class GraphView:
    """Everything one drawing shows."""

    tasks: tuple[TaskView, ...]
    """Graph tasks drawn, the selected one first."""
    nodes: Mapping[str, ViewNode]
    """Every drawn node, by key, in discovery order."""
    edges: tuple[ViewEdge, ...]
    """Edges between drawn nodes."""
    boxes: tuple[TensorBox, ...] = ()
    """Leaf and output tensors (saved tensors are added by the exporter when asked)."""
    step: int | None = None
    """The step shown; ``None`` before any backward call."""
    total: int | None = None
    """Steps in the trace."""
    event: TraceEvent | None = None
    """The last event applied."""
    elided: int = 0
    """Nodes of the graph left out of the drawing."""
    elided_near: tuple[str, ...] = ()
    """Keys of drawn nodes with an edge to or from the part left out."""
    notices: tuple[str, ...] = field(default_factory=tuple)
    """Lines that say what the drawing leaves out or folds."""
    modules: Mapping[str, str] = field(default_factory=dict)
    """Class names of the modules the nodes were created in, by module path."""
    clusters: Mapping[str, Cluster] = field(default_factory=dict)
    """Open module calls drawn around their nodes, by key, outermost first."""
    cluster_of: Mapping[str, str] = field(default_factory=dict)
    """The innermost cluster of each drawn node inside one, by node key."""


# -- before backward -------------------------------------------------------------------


def from_graph(graph: UnrunGraph) -> GraphView:
    """A graph before backward: its nodes (with their dependency counts), its outputs, and
    the class name of each module path in the nodes' scopes.

    Every source of graphs draws through here: our engine's tensors and PyTorch's
    (:func:`autograd_viz.to_dot`, which asks the source for the :class:`UnrunGraph`), and
    the TUI's list of a task's nodes.
    """
    infos, outputs, modules = graph.nodes, graph.outputs, graph.modules
    keys = {info.id: f"n{i}" for i, info in enumerate(infos)}
    nodes = {
        keys[info.id]: ViewNode(keys[info.id], info, 0, None, info.dependencies) for info in infos
    }
    boxes = [
        TensorBox(
            f"out{i}",
            "output",
            keys[output.node],
            output.name or (f"output {i}" if len(outputs) > 1 else "output"),
            None,
            output.shape,
            output.dtype,
        )
        for i, output in enumerate(outputs)
    ]
    return GraphView(
        (TaskView(0, 0, None),),
        nodes,
        tuple(_edges(nodes.values(), keys)),
        (*boxes, *_leaf_boxes(nodes.values(), None)),
        modules=dict(modules or {}),
    )


# -- at a step of a trace --------------------------------------------------------------


def from_state(state: ExecutionState, graph_task: int | None = None) -> GraphView:
    """One graph task at ``state.step``, with the reentrant graph tasks it started.

    Args:
        state: the step to draw.
        graph_task: which graph task; by default the top-level call that the
            current step belongs to (a reentrant step shows its parent too).

    Raises:
        GraphViewError: the trace has no graph task, or not the one asked for.
    """
    # Note [Building a big view skips the collector]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # A view of 100,000 nodes is as many ViewNodes and ViewEdges, and a module view
    # as many dictionary entries again, none in a reference cycle. Built with the
    # cyclic collector on, they trigger full collections that scan the whole trace
    # too (millions of objects): most of the time of a big `dot`. from_state and
    # showing.show build with the collector paused, as loading a trace does.
    with paused_gc():
        return _from_state(state, graph_task)


def _from_state(state: ExecutionState, graph_task: int | None) -> GraphView:
    from autograd_viz.draw.model.no_gradient import marked  # it builds boxes of this module

    trace = state.trace
    if not trace.graph_tasks:
        raise GraphViewError("the trace has no backward call to draw")
    gid = _pick_task(state, graph_task)
    # Reentrant calls appear once they have started.
    order = [gid, *(t for t in _descendants(trace.graph_tasks, gid) if t in state.graph_tasks)]
    keys: dict[int, dict[int, str]] = {}  # graph task -> node id -> key
    for position, task_id in enumerate(order):
        prefix = "n" if position == 0 else f"t{position}n"
        nodes_of = trace.graph_tasks[task_id].nodes
        keys[task_id] = {node_id: f"{prefix}{i}" for i, node_id in enumerate(nodes_of)}
    nodes: dict[str, ViewNode] = {}
    edges: list[ViewEdge] = []
    tasks: list[TaskView] = []
    modules: dict[str, str] = {}
    for task_id in order:
        info = trace.graph_tasks[task_id]
        started = state.started_by(task_id) if info.parent is not None else None
        task_state = state.graph_tasks.get(task_id)
        tasks.append(
            TaskView(
                task_id,
                info.reentrant_depth,
                None if task_state is None else task_state.status,
                None if started is None else keys.get(started[0], {}).get(started[1]),
                None if task_state is None else task_state.error,
            )
        )
        modules.update(info.modules)
        task_keys = keys[task_id]
        task_nodes = _task_nodes(state, info, task_keys)
        if nodes:
            nodes.update(task_nodes)
        else:
            nodes = task_nodes
        edges.extend(_edges(task_nodes.values(), task_keys, _delivered(state, task_id)))
    return GraphView(
        tuple(tasks),
        nodes,
        tuple(edges),
        marked(trace, gid, tuple(_leaf_boxes(nodes.values(), state)), keys[gid]),
        step=state.step,
        total=state.total,
        event=state.event,
        modules=modules,
    )


def _pick_task(state: ExecutionState, graph_task: int | None) -> int:
    tasks = state.trace.graph_tasks
    if graph_task is not None:
        if graph_task not in tasks:
            known = ", ".join(str(t) for t in tasks)
            raise GraphViewError(f"graph task {graph_task} is not in the trace (it has {known})")
        return graph_task
    gid = state.graph_task
    if gid is None or gid not in tasks:
        gid = next(iter(tasks))
    while (parent := tasks[gid].parent) is not None and parent in tasks:
        gid = parent
    return gid


def _descendants(tasks: Mapping[int, GraphTaskInfo], gid: int) -> list[int]:
    """Every graph task started (transitively) from the nodes of ``gid``, in start order."""
    order = []
    members = {gid}
    for task_id, info in tasks.items():
        if info.parent in members and task_id not in members:
            members.add(task_id)
            order.append(task_id)
    return order


def _task_nodes(
    state: ExecutionState, info: GraphTaskInfo, keys: Mapping[int, str]
) -> dict[str, ViewNode]:
    gid = info.id
    started = gid in state.graph_tasks
    node_state = state.node
    waiting, pruned = NodeStatus.WAITING, NodeStatus.PRUNED
    out: dict[str, ViewNode] = {}
    # One pass of positional constructor calls: the loop runs once per node of a big trace.
    for node_id, node in info.nodes.items():
        key = keys[node_id]
        current: NodeState | None = None
        if started:
            try:
                current = node_state(node_id, gid)
            except KeyError:
                current = None
        if current is None:
            status = waiting if node.status == "needed" else pruned
            built = _NodeFields(
                key, node, gid, status, node.dependencies, (), None, bool(node.captures)
            )
        else:
            built = _NodeFields(
                key,
                node,
                gid,
                current.status,
                current.remaining,
                current.slots,
                current.outputs,
                bool(node.captures),
                current.error,
                current.thread,
                current.released,
            )
        built.__class__ = ViewNode  # Note [View nodes and edges are values]
        out[key] = built  # type: ignore[assignment]
    return out


def _delivered(state: ExecutionState, gid: int) -> dict[tuple[int, int, int], int]:
    """How many gradients went along each ``(tail id, head id, input_nr)`` so far."""
    counts: dict[tuple[int, int, int], int] = {}
    if gid not in state.graph_tasks:
        return counts
    for d in state.deliveries(gid):
        edge = (d.from_node, d.to_node, d.input_nr)
        counts[edge] = counts.get(edge, 0) + 1
    return counts


def _edges(
    nodes: Iterable[ViewNode],
    keys: Mapping[int, str],
    delivered: dict[tuple[int, int, int], int] | None = None,
) -> list[ViewEdge]:
    listed = list(nodes)
    pruned_keys = {node.key for node in listed if node.status is NodeStatus.PRUNED}
    key_of = keys.get
    out: list[ViewEdge] = []
    add = out.append
    # The loop runs once per edge of a big trace: lookups hoisted, positional arguments.
    for node in listed:
        tail, tail_id = node.key, node.info.id
        outputs = node.outputs or ()
        tail_pruned = tail in pruned_keys
        for output_nr, edge in enumerate(node.info.next_edges):
            if edge is None:
                continue
            head = key_of(edge[0])
            if head is None:
                continue
            went = False
            if delivered:
                triple = (tail_id, edge[0], edge[1])
                left = delivered.get(triple, 0)
                if left:
                    delivered[triple] = left - 1
                    went = True
            grad = outputs[output_nr] if output_nr < len(outputs) else None
            pruned = tail_pruned or head in pruned_keys
            built = _EdgeFields(tail, head, output_nr, edge[1], went, pruned, grad)
            built.__class__ = ViewEdge  # Note [View nodes and edges are values]
            add(built)  # type: ignore[arg-type]
    return out


def _leaf_boxes(nodes: Iterable[ViewNode], state: ExecutionState | None) -> Iterable[TensorBox]:
    leaves = state.leaves if state is not None else {}
    for node in nodes:
        leaf = node.info.leaf
        if leaf is None:
            continue
        grad = leaves[node.info.id].grad if node.info.id in leaves else leaf.grad
        yield TensorBox(
            f"{node.key}_leaf",
            "leaf",
            node.key,
            leaf.name or "leaf",
            grad,
            leaf.shape,
            leaf.dtype,
        )


def reach_bits(
    starts: Iterable[str], out: Mapping[str, Iterable[str]], bit: Mapping[str, int]
) -> dict[str, int]:
    """What each key reaches along ``out`` (itself included), as a bit set of ``bit``'s.

    Depth-first from each of ``starts``, children before parents, without recursion (a
    picture can be thousands of nodes deep); a key met again adds what it reached.
    """
    reach: dict[str, int] = {}
    for start in starts:
        if start in reach:
            continue
        reach[start] = bit[start]
        stack = [(start, iter(out.get(start, ())))]
        while stack:
            key, heads = stack[-1]
            head = next(heads, None)
            if head is None:
                stack.pop()
                if stack:
                    reach[stack[-1][0]] |= reach[key]
            elif head not in reach:
                reach[head] = bit[head]
                stack.append((head, iter(out.get(head, ()))))
            else:
                reach[key] |= reach[head]
    return reach
