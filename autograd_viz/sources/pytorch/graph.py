"""PyTorch's backward graph as one graph task sees it.

:func:`plan_graph_task` walks the graph from the roots of a backward call
(iteratively: ``next_functions``) and computes what PyTorch's engine computes
before it runs a node, the way ``engine.cpp`` does: each node's
``topological_nr`` (PyTorch does not expose it), the dependency counts
(``compute_dependencies``, with the same ``min_topo_nr`` cut-off) and, for
``inputs=`` and ``grad()``, which nodes run and which input slots are
captured (``GraphTask::init_to_execute``). :meth:`GraphPlan.snapshot` turns
the plan into the :class:`~autograd_viz.trace.GraphTaskInfo` a trace keeps.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch

from autograd_viz.sources.pytorch.hooks import counts, hooks_of
from autograd_viz.sources.pytorch.leaf_names import LeafNamer
from autograd_viz.sources.pytorch.module_calls import calls_of
from autograd_viz.sources.pytorch.module_names import GraphModules
from autograd_viz.sources.pytorch.node import TorchEdge, TorchNode, node_id
from autograd_viz.sources.pytorch.saved import Seen, saved_summaries
from autograd_viz.sources.pytorch.summary import (
    _DTYPE_NAMES,
    dtype_name,
    plain_shape,
    summarize_tensor,
)
from autograd_viz.trace import GraphTaskInfo, LeafInfo, NodeInfo
from autograd_viz.trace.records import (
    GraphOutput,
    Scope,
    UnrunGraph,
    check_has_graph,
    new_node_info,
)
from autograd_viz.trace.summary import TensorSummary
from engine.scheduler import ExecInfo, compute_dependencies, init_to_execute, should_execute

ACCUMULATE_GRAD = "AccumulateGrad"
"""How an ``AccumulateGrad`` node is named (PyTorch says ``torch::autograd::AccumulateGrad``)."""
GRAPH_ROOT = "GraphRoot"
"""The node PyTorch makes for a call with several roots (invisible from Python)."""


@dataclass(eq=False)
class GraphPlan:
    """What PyTorch's engine knows about a graph task before its first node runs."""

    root: TorchNode
    """The node the engine starts from (a ``GraphRoot`` when there are several roots)."""
    roots: list[tuple[TorchNode, int]]
    """Each root edge: node and input slot."""
    outputs: list[tuple[TorchNode, int]]
    """Each ``inputs=`` edge: node and input slot."""
    nodes: list[TorchNode]
    """Every node reachable from the root, in discovery order."""
    dependencies: dict[TorchNode, int]
    """Edges of the graph task arriving at each node (``GraphTask::dependencies_``)."""
    pruned: bool
    """Whether ``exec_info`` is in use (``inputs=`` or ``grad()``)."""
    needed: set[TorchNode] = field(default_factory=set)
    """Nodes that run (all of the graph task's nodes when not ``pruned``)."""
    captures: dict[TorchNode, list[tuple[int, int]]] = field(default_factory=dict)
    """``(input slot, output index)`` captured at each node, for ``grad()``."""
    exec_info: dict[TorchNode, ExecInfo] = field(default_factory=dict)
    """PyTorch's ``exec_info`` (empty when not ``pruned``), as the engine's scheduler makes it."""
    fan_in: dict[tuple[TorchNode, int], int] = field(default_factory=dict)
    """How many edges of the graph task arrive at each input slot."""
    modules: GraphModules = field(default_factory=lambda: GraphModules(()))
    """The module calls that made the nodes."""
    reusable: Any = None
    """What :func:`release` keeps for a later call over a graph of the same shape (Note
    [Plans made again]); ``None`` when the plan is not kept."""

    def should_execute(self, node: TorchNode) -> bool:
        """PyTorch's ``ExecInfo::should_execute``: the node runs or is captured."""
        return not self.pruned or should_execute(self.exec_info, node)

    def snapshot(
        self,
        graph_task: int,
        parent: int | None,
        depth: int,
        keep_graph: bool,
        create_graph: bool,
        thread: str,
        max_values: int | None,
        saved: bool = True,
    ) -> GraphTaskInfo:
        """The :class:`~autograd_viz.trace.GraphTaskInfo` of this plan.

        Call it while the graph task starts (inside the ``graph_task_start``
        listener): leaves' ``.grad`` are read as they are then. With
        ``max_values=None`` no tensor is read (no saved tensors, no ``.grad``);
        with ``saved=False`` no saved tensor (the tier ``leaves``, Note [Values
        tiers] in ``autograd_viz/trace/records.py``).
        """
        in_task = self.dependencies.keys() | {self.root}
        nodes: dict[int, NodeInfo] = {}
        seen: Seen = {}
        scopes, modules = self.modules.scopes(self.nodes)
        for node, scope in zip(self.nodes, scopes, strict=True):
            status = "needed" if node in in_task and node in self.needed else "pruned"
            nodes[node._id] = _node_info(
                node,
                self.dependencies.get(node, 0),
                status,
                tuple(self.captures.get(node, ())),
                max_values,
                seen,
                scope,
                saved,
            )
        return GraphTaskInfo(
            id=graph_task,
            parent=parent,
            reentrant_depth=depth,
            keep_graph=keep_graph,
            create_graph=create_graph,
            root=self.root._id,
            roots=tuple((n._id, n._name, nr) for n, nr in self.roots),
            outputs=tuple((n._id, nr) for n, nr in self.outputs),
            thread=thread,
            first_event=0,
            nodes=nodes,
            modules=modules,
        )


def _node_info(
    node: TorchNode,
    dependencies: int,
    status: str,
    captures: tuple[tuple[int, int], ...],
    max_values: int | None,
    seen: Seen,
    scope: Scope,
    with_saved: bool = True,
) -> NodeInfo:
    fn = node.fn
    inputs: tuple[tuple[tuple[int, ...], str, str], ...] = ()
    traceback = None
    saved: tuple[TensorSummary | None, ...] = ()
    if fn is not None:
        inputs = node.inputs if node.inputs is not None else _input_slots(fn._input_metadata)
        stack = fn.metadata.get("traceback_")
        traceback = None if stack is None else tuple(str(line) for line in stack)
        if max_values is not None and with_saved:
            saved = saved_summaries(fn, max_values, seen)
    leaf = None
    variable = node.variable
    if variable is not None:
        grad = variable.grad
        leaf = LeafInfo(
            name=node.leaf_name,
            aliases=node.leaf_aliases,
            shape=plain_shape(variable.shape),
            dtype=dtype_name(variable.dtype),
            device=str(variable.device),
            grad=None
            if grad is None or max_values is None
            else summarize_tensor(grad, str(grad.device), max_values),
        )
    return new_node_info(
        node._id,
        node._name,
        node.sequence_nr,
        node.topological_nr,
        node.device,
        tuple([None if e is None else (e.function._id, e.input_nr) for e in node._next_edges]),
        inputs,
        dependencies,
        status,
        captures,
        saved,
        counts(node.hooks),
        traceback,
        leaf,
        scope,
    )


def _input_slots(metadata: Any) -> tuple[tuple[tuple[int, ...], str, str], ...]:
    """``(shape, dtype, device)`` of each of a node's input slots (``_input_metadata``).

    Equal slots are one shared tuple (Note [Objects a recorded call keeps] in emitter.py),
    looked up by what PyTorch gives (a shape's ints, the dtype and device objects) before
    anything is named.
    """
    raw: tuple[Any, ...] | None
    try:
        raw = tuple([(tuple(m.shape), m.dtype, m.device) for m in metadata])
        found = _RAW_SLOTS.get(raw)
    except TypeError:  # a symbolic dimension has no hash: named the long way
        raw = found = None
    if found is not None:
        return found
    slots = tuple(
        [
            (
                plain_shape(m.shape),
                _DTYPE_NAMES.get(m.dtype) or dtype_name(m.dtype),
                _DEVICE_NAMES.get(m.device) or _device_name(m.device),
            )
            for m in metadata
        ]
    )
    shared = _SLOTS.get(slots)
    if shared is None:
        if len(_SLOTS) >= _MAX_SLOTS:  # a program of ever new shapes: start again
            _SLOTS.clear()
        shared = _SLOTS[slots] = slots
    if raw is not None:
        if len(_RAW_SLOTS) >= _MAX_SLOTS:
            _RAW_SLOTS.clear()
        _RAW_SLOTS[raw] = shared
    return shared


_SLOTS: dict[Any, Any] = {}
"""Each node's input slots seen lately, shared (Note [Objects a recorded call keeps])."""
_RAW_SLOTS: dict[Any, Any] = {}
"""The same, by what PyTorch gives for them."""
_MAX_SLOTS = 4096


_DEVICE_NAMES: dict[torch.device, str] = {}


def _device_name(device: torch.device) -> str:
    """``str(device)``, remembered (devices are few; ``str()`` is slow)."""
    name = _DEVICE_NAMES.get(device)
    if name is None:
        name = _DEVICE_NAMES[device] = str(device)
    return name


def _adapt(fn: Any) -> TorchNode:
    name = fn.name()
    try:
        inputs = _input_slots(fn._input_metadata)
    except RuntimeError:  # a strided nested tensor's metadata cannot be read from Python
        inputs = ()
    device = inputs[0][2] if inputs else "cpu"
    if name == "torch::autograd::AccumulateGrad":
        node = TorchNode(fn, ACCUMULATE_GRAD, fn._sequence_nr(), device)
        node.variable = fn.variable  # named once the walk has found the modules
        node.hooks = hooks_of(fn, node.variable)
    else:
        node = TorchNode(fn, name, fn._sequence_nr(), device)
        node.hooks = hooks_of(fn, None)
    node.num_inputs = len(inputs)
    node.inputs = inputs
    return node


def plan_graph_task(
    roots: Sequence[tuple[Any, int]],
    outputs: Sequence[tuple[Any, int] | torch.Tensor],
    accumulate_grad: bool,
    namer: LeafNamer,
    modules_of: object | None = None,
    reuse: bool = False,
) -> GraphPlan:
    """Walk a backward call's graph and compute PyTorch's bookkeeping for it.

    Args:
        roots: ``(node, input_nr)`` of each root edge (PyTorch node objects).
        outputs: each ``inputs=`` entry: a ``(node, input_nr)`` edge, or a leaf
            tensor (its ``AccumulateGrad`` is looked up in the graph, as
            PyTorch's ``try_get_grad_accumulator`` does; a leaf the graph
            does not reach is an unreachable input).
        accumulate_grad: ``backward()`` (``True``) or ``grad()`` (``False``).
        namer: names leaves.
        modules_of: the calling thread's module calls
            (:func:`~autograd_viz.sources.pytorch.module_calls.thread_modules`), for a
            graph walked after its call, on another thread; ``None``: this thread's.
        reuse: the plan of an earlier call over a graph of the same shape may be
            made again, and this one kept for a later call once :func:`release`
            is called (Note [Plans made again]); the watched call's own plan.

    Returns:
        The plan.
    """
    key = None
    if reuse and len(roots) == 1 and not outputs:
        fn, nr = roots[0]
        key = (type(fn), nr)
        kept = _KEPT.pop(key, None)  # taken: a call running at the same time makes its own
        if kept is not None:
            plan = _made_again(kept, fn, namer, modules_of)
            if plan is not None:
                return plan
    plan = _plan_walked(roots, outputs, accumulate_grad, namer, modules_of)
    if key is not None:
        plan.reusable = _Kept(key, plan)
    return plan


def _plan_walked(
    roots: Sequence[tuple[Any, int]],
    outputs: Sequence[tuple[Any, int] | torch.Tensor],
    accumulate_grad: bool,
    namer: LeafNamer,
    modules_of: object | None,
) -> GraphPlan:
    """:func:`plan_graph_task`, every node walked and numbered anew."""
    by_fn: dict[int, TorchNode] = {}
    order: list[TorchNode] = []

    def adapt(fn: Any) -> TorchNode:
        node = by_fn.get(id(fn))
        if node is None:
            node = by_fn[id(fn)] = _adapt(fn)
            order.append(node)
        return node

    root_edges = [(adapt(fn), nr) for fn, nr in roots]
    if len(root_edges) == 1:
        root = root_edges[0][0]
    else:
        root = TorchNode(None, GRAPH_ROOT, 0, "cpu")
        root._next_edges = [TorchEdge(n, nr) for n, nr in root_edges]
        order.insert(0, root)
    # Walk every node reachable from the roots (the fns stay alive: the graph holds them).
    stack = [n for n, _ in reversed(root_edges)]
    walked = set(stack)
    while stack:
        node = stack.pop()
        edges: list[TorchEdge | None] = []
        for fn, nr in node.fn.next_functions:
            if fn is None:
                edges.append(None)
                continue
            child = by_fn.get(id(fn))
            if child is None:  # adapt(fn), inline: the walk meets every edge
                child = by_fn[id(fn)] = _adapt(fn)
                order.append(child)
            edges.append(TorchEdge(child, nr))
        node._next_edges = edges
        for edge in reversed(edges):
            if edge is not None and edge.function not in walked:
                walked.add(edge.function)
                stack.append(edge.function)
    _topological_nrs(order)
    modules = _named(order, namer, modules_of)
    if root.fn is None:
        root.topological_nr = 1 + max((n.topological_nr for n, _ in root_edges), default=-1)
        # PyTorch numbers its GraphRoot when the call starts: after every node made before.
        ordinary = [n.sequence_nr for n in order if n._name != ACCUMULATE_GRAD]
        root.sequence_nr = max(ordinary, default=-1) + 1
    output_edges = [_output_edge(o, by_fn) for o in outputs]
    min_topo = min((n.topological_nr for n, _ in output_edges), default=0)
    plan = GraphPlan(
        root, root_edges, output_edges, order, {}, pruned=bool(output_edges), modules=modules
    )
    _dependencies(plan, min_topo)
    if output_edges:
        _init_to_execute(plan, accumulate_grad, min_topo)
    else:
        plan.needed = set(plan.dependencies) | {root}
    return plan


def _named(order: list[TorchNode], namer: LeafNamer, modules_of: object | None) -> GraphModules:
    """Each node's module calls, the graph's modules, and its leaves' names."""
    _find_calls(order, modules_of)
    modules = GraphModules(order, namer.module_variables)
    namer.tracked = modules.parameter_names()
    aliases = modules.parameter_aliases()
    for node in order:
        if node.variable is not None:
            node.leaf_name = namer(node.variable)
            others = aliases.get(id(node.variable))
            node.leaf_aliases = tuple(a for a in others if a != node.leaf_name) if others else ()
    return modules


# Note [Plans made again]
# ~~~~~~~~~~~~~~~~~~~~~~~
# A training loop makes the same graph at every step: new PyTorch node
# objects of the same classes, joined the same way. Walking it anew made a
# TorchNode per node, an edge per edge and a list of them per node, numbered
# and counted again (a third of what a recorded GRUCell ×20 adds to its
# backward without values), and those thousand objects, alive for the call,
# were moved to the cyclic collector's oldest generation whenever a middle
# collection ran meanwhile. So the watched call's plan is kept when the call
# ends (and a call-level call's once it is derived: ``release``, holding no
# PyTorch object), one per root class and root slot, and the next call whose
# root has them walks its graph along the kept plan: every node's class,
# every edge's slot and where it leads must be the same, each PyTorch node
# matched to one kept node and every kept node matched (the walk is the walk
# that made the plan, so the order is the same). Then what depends on the
# shape alone is kept (topological numbers, dependency counts, edges per
# slot) and what may differ is read again for each node: the PyTorch node,
# its id and sequence number, its input slots (shapes change with the
# batch), the user's hooks, a leaf's tensor, the module calls and the names.
# Anything else (another shape, several roots, ``inputs=``, a plan taken by
# a call running meanwhile) walks anew, and the new plan is kept in its
# place.


class _Kept:
    """A watched call's plan, kept for a later call over a graph of the same shape."""

    __slots__ = ("dependencies", "fan_in", "key", "needed", "order", "root", "root_nr")

    def __init__(self, key: tuple[type, int], plan: GraphPlan) -> None:
        self.key = key
        self.root = plan.root
        self.root_nr = plan.roots[0][1]
        self.order = plan.nodes
        self.dependencies = plan.dependencies
        self.fan_in = plan.fan_in
        self.needed = plan.needed


_KEPT: dict[tuple[type, int], _Kept] = {}
"""The plans kept (Note [Plans made again]), by the root's class and slot."""
_KEPT_MAX = 16


def release(plan: GraphPlan) -> None:
    """The watched call of ``plan`` ended: keep the plan for a later call (Note [Plans made
    again]), holding nothing of this call's graph."""
    kept = plan.reusable
    if kept is None:
        return
    plan.reusable = None
    for node in kept.order:
        _unbind(node)
    if len(_KEPT) >= _KEPT_MAX:
        _KEPT.clear()
    _KEPT[kept.key] = kept


def _unbind(node: TorchNode) -> None:
    # (Its ``watch`` the watch cleared when the call ended: GraphTaskWatch.close.)
    node.fn = None
    node.variable = None
    node.calls = ()


def _made_again(
    kept: _Kept, root_fn: Any, namer: LeafNamer, modules_of: object | None
) -> GraphPlan | None:
    """The kept plan over this graph, if its shape is the same (Note [Plans made again])."""
    order = kept.order
    if not _matched(kept.root, root_fn, len(order)):
        for node in order:
            node.fn = None
        return None
    same = True  # every node's input slots and hooks as the kept plan's
    for node in order:
        fn = node.fn
        node._id = node_id(fn)
        try:
            inputs = _input_slots(fn._input_metadata)
        except RuntimeError:  # as in _adapt
            inputs = ()
        if inputs is not node.inputs:
            same = False
            node.inputs = inputs
            node.num_inputs = len(inputs)
            node.device = inputs[0][2] if inputs else "cpu"
        node.sequence_nr = fn._sequence_nr()
        if node._name == ACCUMULATE_GRAD:
            node.variable = fn.variable
            hooks = hooks_of(fn, node.variable)
        else:
            hooks = hooks_of(fn, None)
        if hooks != node.hooks:
            same = False
            node.hooks = hooks
    if not same:
        # What may be held depends on the slots and the hooks (Note [Held gradients]).
        for node in order:
            node.holds = node.holds_out = None
    modules = _named(order, namer, modules_of)
    plan = GraphPlan(
        kept.root,
        [(kept.root, kept.root_nr)],
        [],
        order,
        kept.dependencies,
        pruned=False,
        needed=kept.needed,
        fan_in=kept.fan_in,
        modules=modules,
    )
    plan.reusable = kept
    return plan


def _matched(root: TorchNode, root_fn: Any, count: int) -> bool:
    """Bind each kept node to the PyTorch node at its place, walking as the plan was walked;
    whether every node and edge matched (Note [Plans made again])."""
    if type(root_fn) is not root.kind:
        return False
    root.fn = root_fn
    by_fn = {id(root_fn): root}
    stack = [root]
    while stack:
        node = stack.pop()
        edges = node._next_edges
        pairs = node.fn.next_functions
        if len(pairs) != len(edges):
            return False
        for (fn, nr), edge in zip(pairs, edges, strict=True):
            if fn is None:
                if edge is not None:
                    return False
                continue
            if edge is None or edge.input_nr != nr:
                return False
            child = edge.function
            bound = by_fn.get(id(fn))
            if bound is None:
                if child.fn is not None or type(fn) is not child.kind:
                    return False  # a kept node for two PyTorch nodes, or another class
                child.fn = fn
                by_fn[id(fn)] = child
                stack.append(child)
            elif bound is not child:
                return False
    return len(by_fn) == count


def _find_calls(order: list[TorchNode], modules_of: object | None) -> None:
    """Each node's module calls (Note [Module calls own sequence ranges])."""
    for node, calls in zip(order, calls_of(order, modules_of), strict=True):
        if node.fn is not None and node.variable is None:
            node.calls = calls


def _output_edge(output: Any, by_fn: dict[int, TorchNode]) -> tuple[TorchNode, int]:
    if isinstance(output, torch.Tensor):
        for node in by_fn.values():
            if node.variable is output:
                return node, 0
        # PyTorch gives an input the graph does not reach an Identity node of its own.
        return TorchNode(None, "Identity", 0, str(output.device)), 0
    fn, nr = output
    found = by_fn.get(id(fn))
    if found is None:  # not reachable from the roots: never runs, captures nothing
        found = TorchNode(fn, fn.name(), fn._sequence_nr(), "cpu")
    return found, nr


def _topological_nrs(order: list[TorchNode]) -> None:
    """Longest path to a leaf, children first, without recursion."""
    done: set[TorchNode] = set()
    for start in order:
        if start in done:
            continue
        stack: list[tuple[TorchNode, int]] = [(start, 0)]
        while stack:
            node, i = stack.pop()
            edges = node._next_edges
            count = len(edges)
            while i < count:
                edge = edges[i]
                if edge is not None and edge.function not in done:
                    break
                i += 1
            if i < count:
                stack.append((node, i + 1))
                stack.append((edges[i].function, 0))  # type: ignore[union-attr]
                continue
            highest = -1
            for edge in edges:
                if edge is not None and edge.function.topological_nr > highest:
                    highest = edge.function.topological_nr
            node.topological_nr = highest + 1
            done.add(node)


def _dependencies(plan: GraphPlan, min_topo: int) -> None:
    """``Engine::compute_dependencies``, by the engine's scheduler; and the edges per slot."""
    plan.dependencies = compute_dependencies(plan.root, min_topo)
    fan_in = plan.fan_in
    for node in (plan.root, *plan.dependencies):
        if node.topological_nr < min_topo:
            continue  # counted, not walked: its edges are not the graph task's
        for edge in node._next_edges:
            if edge is not None:
                # The edge is its own key: a TorchEdge equals and hashes as the pair
                # (function, input_nr), with no pair made per edge for the collector.
                fan_in[edge] = fan_in.get(edge, 0) + 1


def _init_to_execute(plan: GraphPlan, accumulate_grad: bool, min_topo: int) -> None:
    """``GraphTask::init_to_execute``, by the engine's scheduler (Note [Pruning for inputs])."""
    outputs = [TorchEdge(node, slot) for node, slot in plan.outputs]
    plan.exec_info = init_to_execute(plan.root, outputs, accumulate_grad, min_topo)
    plan.needed = {node for node, info in plan.exec_info.items() if info.needed}
    plan.captures = {
        node: info.captures for node, info in plan.exec_info.items() if info.captures is not None
    }


def unrun_graph(tensors: Sequence[torch.Tensor], frame: FrameType | None = None) -> UnrunGraph:
    """The graph PyTorch built for ``tensors``, before any backward call.

    Numbered as PyTorch's engine would number it when ``backward()`` starts:
    ``_sequence_nr()`` as PyTorch gives it, ``topological_nr`` and dependency
    counts computed from the graph, parameters named by their module as seen
    from ``frame`` (by default the caller's).

    Raises:
        GraphViewError: a tensor has no ``grad_fn``.
    """
    check_has_graph(tensors)
    namer = LeafNamer(frame or sys._getframe(1))
    plan = plan_graph_task([(t.grad_fn, t.output_nr) for t in tensors], [], True, namer)
    info = plan.snapshot(0, None, 0, False, False, threading.current_thread().name, 0)
    # Several outputs meet in a GraphRoot only once backward starts; before it, each
    # output is drawn on its own node.
    infos = tuple(n for n in info.nodes.values() if len(tensors) == 1 or n.id != info.root)
    outputs = tuple(
        GraphOutput(node._id, None, tuple(t.shape), str(t.dtype).removeprefix("torch."))
        for (node, _), t in zip(plan.roots, tensors, strict=True)
    )
    return UnrunGraph(infos, outputs, info.modules)
