"""Our engine as a source: the graph snapshot a trace keeps of a graph task.

The engine's own events come through :mod:`engine.events`; what this module
adds is the one thing a trace needs that an event does not carry, the graph
itself, read from the engine's nodes when a graph task starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import engine
from autograd_viz.sources.call_numbers import number_calls
from autograd_viz.sources.summaries import summarize
from autograd_viz.trace.records import (
    GraphOutput,
    GraphTaskInfo,
    LeafInfo,
    NodeInfo,
    Scope,
    UnrunGraph,
    check_has_graph,
    new_node_info,
)
from engine.events import Event
from engine.scopes import node_scope


def snapshot(event: Event, max_values: int, values: str = "all") -> GraphTaskInfo:
    """The graph of a ``graph_task_start`` event, walked from its root (iteratively).

    ``values`` below ``all`` leaves out the saved tensors' summaries; ``none`` also the
    leaves' ``.grad`` (Note [Values tiers] in ``autograd_viz/trace/records.py``).
    """
    data = event.data
    root = data["graph_root"]()
    dependencies: Mapping[int, int] = data["dependencies"]
    needed = None if data["needed"] is None else set(data["needed"])
    captures: dict[int, list[tuple[int, int]]] = {}
    for node_id, slot, output_index in data["captures"] or ():
        captures.setdefault(node_id, []).append((slot, output_index))
    walked = list(walk_graph([] if root is None else [root]))
    scopes, modules = numbered_scopes(walked)
    nodes: dict[int, NodeInfo] = {}
    for node, scope in zip(walked, scopes, strict=True):
        in_task = node is root or node._id in dependencies
        is_needed = in_task and (needed is None or node._id in needed)
        nodes[node._id] = node_info(
            node,
            dependencies.get(node._id, 0),
            "needed" if is_needed else "pruned",
            tuple(captures.get(node._id, ())),
            max_values,
            scope,
            values,
        )
    return GraphTaskInfo(
        id=event.graph_task,
        parent=data["parent_graph_task"] or None,
        reentrant_depth=data["reentrant_depth"],
        keep_graph=data["keep_graph"],
        create_graph=data["create_graph"],
        root=event.node_id if event.node_id is not None else -1,
        roots=tuple(tuple(r) for r in data["roots"]),
        outputs=tuple(tuple(o) for o in data["outputs"]),
        thread=event.thread,
        first_event=0,
        nodes=nodes,
        modules=modules,
    )


def numbered_scopes(nodes: Iterable[engine.Node]) -> tuple[list[Scope], dict[str, str]]:
    """The scope of each of ``nodes`` (one graph), calls numbered within it, and the kind of
    every path (see :func:`~autograd_viz.sources.call_numbers.number_calls`)."""
    return number_calls((node_scope(n), isinstance(n, engine.AccumulateGrad)) for n in nodes)


def walk_graph(roots: Iterable[engine.Node]) -> Iterator[engine.Node]:
    """Every node reachable from ``roots``, once each, in depth-first discovery order.

    Iterative, so a million-node chain does not reach the recursion limit.
    """
    stack = list(reversed(list(roots)))
    seen = {node._id for node in stack}
    while stack:
        node = stack.pop()
        yield node
        for edge in reversed(node._next_edges):
            if edge is not None and edge.function._id not in seen:
                seen.add(edge.function._id)
                stack.append(edge.function)


def node_info(
    node: engine.Node,
    dependencies: int,
    status: str,
    captures: tuple[tuple[int, int], ...],
    max_values: int,
    scope: Scope = (),
    values: str = "all",
) -> NodeInfo:
    """What a trace keeps of ``node``: names, numbers, edges, saved tensors, hooks, leaf;
    ``scope`` is its numbered scope (:func:`~autograd_viz.sources.call_numbers.number_calls`);
    ``values``: the recording's tier (Note [Values tiers])."""
    metadata = node._input_metadata
    device = metadata[0][2]._str if metadata else "cpu"
    saved = (
        tuple(
            None if s.data is None else summarize(s.data, str(s._device), max_values)
            for s in node._saved
        )
        if node._saved and values == "all"
        else ()
    )
    hooks = []
    if node._pre_hooks:
        hooks.append(("pre", len(node._pre_hooks)))
    if node._post_hooks:
        hooks.append(("post", len(node._post_hooks)))
    tensor_hooks = (
        sum(len(node.tensor_pre_hooks(i) or ()) for i in range(node.num_inputs))
        if node.has_tensor_hooks()
        else 0
    )
    if tensor_hooks:
        hooks.append(("tensor_pre", tensor_hooks))
    if node._retains_grad_hooks:
        hooks.append(("retain_grad", len(node._retains_grad_hooks)))
    stack = node._metadata.get("traceback_") if node._metadata else None
    leaf = None
    variable = getattr(node, "variable", None)
    if variable is not None:
        grad = variable._grad
        leaf = LeafInfo(
            name=variable.name,
            shape=tuple(variable.shape),
            dtype=str(variable.data.dtype),
            device=str(variable.device),
            grad=None
            if grad is None or values == "none"
            else summarize(grad.data, str(grad.device), max_values),
        )
    return new_node_info(  # NodeInfo's fields in order
        node._id,
        node.name(),
        node.sequence_nr,
        node.topological_nr,
        device,
        tuple([None if e is None else (e.function._id, e.input_nr) for e in node._next_edges]),
        tuple([_slot_info(m) for m in metadata]),
        dependencies,
        status,
        captures,
        saved,
        tuple(hooks),
        None if stack is None else tuple(stack),
        leaf,
        scope,
    )


_SLOT_INFOS: dict[Any, tuple[tuple[int, ...], str, str]] = {}


def _slot_info(metadata: Any) -> tuple[tuple[int, ...], str, str]:
    """``(shape, dtype, device)`` of an input slot; equal metadata share one tuple."""
    info = _SLOT_INFOS.get(metadata)
    if info is None:
        shape, dtype, device = metadata
        info = (tuple(shape), _dtype_name(dtype), str(device))
        if len(_SLOT_INFOS) >= 4096:
            _SLOT_INFOS.clear()
        _SLOT_INFOS[metadata] = info
    return info


_DTYPE_NAMES: dict[Any, str] = {}


def _dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        import numpy as np

        try:
            name = str(np.dtype(dtype))
        except TypeError:
            name = str(dtype)
        _DTYPE_NAMES[dtype] = name
    return name


def unrun_graph(tensors: Sequence[engine.Tensor]) -> UnrunGraph:
    """The graph the forward pass built for ``tensors``, before any backward call.

    Raises:
        GraphViewError: a tensor has no ``grad_fn`` (a leaf, or it does not
            require grad), so it has no backward graph to draw.
    """
    check_has_graph(tensors)
    graph = list(walk_graph([t.grad_fn for t in tensors if t.grad_fn is not None]))
    incoming: dict[int, int] = {}
    for node in graph:
        for edge in node._next_edges:
            if edge is not None:
                incoming[edge.function._id] = incoming.get(edge.function._id, 0) + 1
    scopes, modules = numbered_scopes(graph)
    infos = tuple(
        node_info(node, incoming.get(node._id, 0), "needed", (), 0, scope)
        for node, scope in zip(graph, scopes, strict=True)
    )
    outputs = tuple(
        GraphOutput(t.grad_fn._id, t.name, tuple(t.shape), str(t.dtype))  # type: ignore[union-attr]
        for t in tensors
    )
    return UnrunGraph(infos, outputs, modules)
