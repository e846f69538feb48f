"""The floor of watching PyTorch's backward: the least a hook-based recorder must do.

What a recorder of PyTorch's backward has to produce (the graph at the
start with its saved tensors, each node's start and end with its gradients
in and out, the accumulation into a leaf's ``.grad``, and the bookkeeping
PyTorch does unseen between nodes: dependency counts, input-buffer sums,
the ready queue), written as plainly as CPython allows: one graph walk, one
closure per hook, each event a tuple appended to a list, each summary a
row copied into a NumPy block and reduced a block at a time when the call
ends, buffer sums followed by copy. No checks (nothing compares the
replayed order or sums with what PyTorch did), no names of leaves, no
trace, no events API, no live sessions, no errors handled, one thread.

Whatever :func:`autograd_viz.record` spends per node beyond this is the
price of its features and of its structure; what this costs is what no
pure-Python recorder with the same content can avoid. Used by
``benchmarks.torch_bridge`` as the ``floor`` way.
"""

from __future__ import annotations

import heapq
import time
import weakref
from typing import Any

import numpy as np
import torch

from autograd_viz.sources.pytorch.bookkeeping import _same_values
from autograd_viz.sources.pytorch.saved import saved_names
from autograd_viz.sources.pytorch.summary import dtype_name
from autograd_viz.trace import TraceEvent
from autograd_viz.trace.records import new_node_info
from autograd_viz.trace.summary import TensorSummary, slot_twin

_clock = time.perf_counter_ns


class _Rows:
    """Copies of gradients of one length and dtype, in a block reduced a block at a time."""

    __slots__ = ("block", "summaries")

    def __init__(self, length: int, dtype: Any) -> None:
        self.block = np.empty((max(2, (1 << 18) // (length * dtype.itemsize)), length), dtype)
        self.summaries: list[list[Any]] = []

    def add(self, array: np.ndarray, summary: list[Any]) -> None:
        used = len(self.summaries)
        if used == len(self.block):
            self.reduce()
            used = 0
        self.block[used] = array.ravel()
        self.summaries.append(summary)

    def reduce(self) -> None:
        block = self.block[: len(self.summaries)]
        count = block.shape[1]
        totals = np.add.reduce(block, axis=1, dtype=np.float64)
        norms = np.sqrt(np.einsum("ij,ij->i", block, block)).tolist()
        lows = np.minimum.reduce(block, axis=1).tolist()
        highs = np.maximum.reduce(block, axis=1).tolist()
        means = (totals / count).tolist()
        for summary, low, high, mean, norm in zip(
            self.summaries, lows, highs, means, norms, strict=True
        ):
            _fill(summary, low, high, mean, norm)
        self.summaries.clear()


_BLOCKS: dict[tuple[int, Any], _Rows] = {}
"""Kept from call to call, as a recorder keeps its memory."""


class FloorWatcher:
    """Watches one ``loss.backward()`` and keeps its events as tuples (:meth:`run`)."""

    checks = False
    """Whether the replayed order and buffer sums are checked against PyTorch's."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._seen: dict[int, tuple[Any, int, Any]] = {}
        self._seq = 0
        self.mismatches = 0

    def new_summary(self, tensor: torch.Tensor) -> Any:
        """What a summary is before its numbers: shape and dtype."""
        return [tuple(tensor.shape), tensor.dtype]

    def summary(self, tensor: torch.Tensor | None) -> Any:
        """Shape and dtype now; min, max, mean and norm appended when the call ends."""
        if tensor is None:
            return None
        found = self._seen.get(id(tensor))  # the same unchanged tensor: the same summary
        if found is not None and found[0]() is tensor and found[1] == tensor._version:
            return found[2]
        summary = self.new_summary(tensor)
        self._seen[id(tensor)] = (weakref.ref(tensor), tensor._version, summary)
        values = tensor.detach() if tensor.requires_grad else tensor
        if values.numel() >= 1 << 14:  # large: reduced now, by PyTorch, with no copy
            low, high = torch.aminmax(values)
            numbers = (float(low), float(high), float(values.mean()))
            _fill(summary, *numbers, float(torch.linalg.vector_norm(values)))
            return summary
        array = values.numpy()
        key = (array.size, array.dtype)
        rows = _BLOCKS.get(key)
        if rows is None:
            rows = _BLOCKS[key] = _Rows(array.size, array.dtype)
        rows.add(array, summary)
        return summary

    def run(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, watched."""
        root = loss.grad_fn
        assert root is not None, "a loss with a graph"
        # The graph: every node once, with its edges, found by one walk.
        order: list[Any] = [root]
        index: dict[int, int] = {id(root): 0}
        by_node: list[list[tuple[int, int] | None]] = [[]]
        stack = [root]
        while stack:
            fn = stack.pop()
            out: list[tuple[int, int] | None] = []
            for child, nr in fn.next_functions:
                if child is None:
                    out.append(None)
                    continue
                at = index.get(id(child))
                if at is None:
                    at = index[id(child)] = len(order)
                    order.append(child)
                    by_node.append([])
                    stack.append(child)
                out.append((at, nr))
            by_node[index[id(fn)]] = out
        dependencies = [0] * len(order)
        fan_in: dict[tuple[int, int], int] = {}
        for out in by_node:
            for edge in out:
                if edge is not None:
                    dependencies[edge[0]] += 1
                    fan_in[edge] = fan_in.get(edge, 0) + 1
        summed = {edge for edge, count in fan_in.items() if count > 1}
        # topological_nr (longest path to a leaf), children first: Kahn's order, reversed.
        left = list(dependencies)
        kahn = [0]
        for at in kahn:
            for edge in by_node[at]:
                if edge is not None:
                    left[edge[0]] -= 1
                    if not left[edge[0]]:
                        kahn.append(edge[0])
        topo = [0] * len(order)
        for at in reversed(kahn):
            highest = -1
            for edge in by_node[at]:
                if edge is not None and topo[edge[0]] > highest:
                    highest = topo[edge[0]]
            topo[at] = highest + 1
        saved_seen: dict[tuple[Any, ...], Any] = {}
        graph = []
        for at, fn in enumerate(order):
            saved = []
            for name in saved_names(fn):
                raw = getattr(fn, name)
                for item in raw if isinstance(raw, tuple) else (raw,):
                    tensor = item.data
                    if not isinstance(tensor, torch.Tensor):
                        continue
                    key = (tensor.data_ptr(), tuple(tensor.shape), tensor.stride())
                    found = saved_seen.get(key)
                    if found is None:
                        found = saved_seen[key] = self.summary(tensor)
                    saved.append(found)
            graph.append(
                self.node_record(
                    at,
                    fn.name(),
                    fn._sequence_nr(),
                    topo[at],
                    by_node[at],
                    [(tuple(m.shape), m.dtype, m.device) for m in fn._input_metadata],
                    dependencies[at],
                    saved,
                )
            )
        self.emit("graph_task_start", 0, graph)
        remaining = list(dependencies)
        buffers: dict[tuple[int, int], torch.Tensor] = {}
        queue: list[tuple[int, int]] = []
        handles = []

        checks = self.checks

        def pre(at: int) -> Any:
            def hook(grads: tuple[Any, ...]) -> None:
                popped = heapq.heappop(queue)[1]
                if checks:
                    if popped != at:
                        self.mismatches += 1
                        self.emit("derived_mismatch", at, ("order", popped, at))
                    for slot, grad in enumerate(grads):
                        total = buffers.pop((at, slot), None)
                        if total is not None and not _same_values(total, grad):
                            self.mismatches += 1
                            self.emit("derived_mismatch", at, ("buffer", slot, at))
                self.emit("node_start", at, [self.summary(g) for g in grads])

            return hook

        def post(at: int, fn: Any) -> Any:
            variable = getattr(fn, "variable", None)

            def hook(outputs: tuple[Any, ...], inputs: tuple[Any, ...]) -> None:
                if variable is not None and variable.grad is not None:
                    self.emit("accumulate", at, (self.summary(variable.grad),))
                summaries = [self.summary(o) for o in outputs]
                self.emit("node_end", at, summaries)
                for i, edge in enumerate(by_node[at]):
                    if edge is None:
                        continue
                    nxt, slot = edge
                    remaining[nxt] -= 1
                    self.emit("dependency_decrement", nxt, (at, slot, remaining[nxt]))
                    grad = outputs[i]
                    if edge not in summed:  # the only gradient this slot gets
                        self.emit("accumulate", nxt, (slot, summaries[i]))
                    elif (total := buffers.get(edge)) is None:
                        buffers[edge] = grad.detach().clone()
                        self.emit("accumulate", nxt, (slot, summaries[i]))
                    else:
                        total = buffers[edge] = total + grad.detach()
                        self.emit("accumulate", nxt, (slot, summaries[i], self.summary(total)))
                    if not remaining[nxt]:
                        heapq.heappush(queue, (-order_nr[nxt], nxt))
                        self.emit("enqueue", nxt, (len(queue),))

            return hook

        order_nr = [fn._sequence_nr() for fn in order]
        for at, fn in enumerate(order):
            handles.append(fn.register_prehook(pre(at)))
            handles.append(fn.register_hook(post(at, fn)))
        heapq.heappush(queue, (-order_nr[0], 0))
        self.emit("enqueue", 0, (len(queue),))
        try:
            loss.backward()
        finally:
            for handle in handles:
                handle.remove()
            buffers.clear()
            self.emit("graph_task_end", 0, None)
            for rows in _BLOCKS.values():
                rows.reduce()
            self.finish()

    def node_record(self, *fields: Any) -> Any:
        """One node of the graph as the start event keeps it."""
        return fields

    def emit(self, kind: str, node: int, data: Any) -> None:
        """One event, as a tuple."""
        self._seq += 1
        self.events.append((kind, self._seq, _clock(), node, data))

    def finish(self) -> None:
        """After the call: nothing more for tuples."""


def _fill(summary: Any, low: float, high: float, mean: float, norm: float) -> None:
    """Give a summary its numbers: a list appends them; a record takes them, then its class."""
    if type(summary) is list:
        summary.extend((low, high, mean, norm))
    else:
        summary.min, summary.max, summary.mean, summary.norm = low, high, mean, norm
        summary.__class__ = TensorSummary


_FIELDS = {
    "node_start": ("inputs",),
    "node_end": ("outputs",),
    "dependency_decrement": ("from_node", "input_nr", "remaining"),
    "enqueue": ("queue_length",),
    "derived_mismatch": ("check", "expected", "observed"),
}
"""The names of each kind's fields, for the records' data (``accumulate`` has two shapes)."""
_ACCUMULATE = {
    1: ("grad",),
    2: ("slot", "grad"),
    3: ("slot", "grad", "total"),
}
_Summary = slot_twin(TensorSummary)


class RecordsFloorWatcher(FloorWatcher):
    """The floor, plus what the issue asks beyond the content and a trace's records.

    The replayed order and the buffer sums are checked against what PyTorch
    does; each event is a trace's :class:`~autograd_viz.trace.TraceEvent`
    with its data as a dict, each summary a
    :class:`~autograd_viz.trace.summary.TensorSummary` and each node of the graph a
    :class:`~autograd_viz.trace.NodeInfo`. Still no leaf names, no events
    API, no errors handled, one thread.
    """

    checks = True

    def new_summary(self, tensor: torch.Tensor) -> Any:
        summary: Any = _new_object(_Summary)
        summary.shape = tuple(tensor.shape)
        summary.dtype = dtype_name(tensor.dtype)
        summary.device = "cpu"
        summary.nan_count = summary.inf_count = 0
        summary.values = None
        return summary

    def node_record(self, *fields: Any) -> Any:
        at, name, sequence_nr, topo, edges, inputs, dependencies, saved = fields
        return new_node_info(
            at, name, sequence_nr, topo, "cpu", tuple(edges), tuple(inputs),
            dependencies, "needed", (), tuple(saved), (), None, None,
        )  # fmt: skip

    def emit(self, kind: str, node: int, data: Any) -> None:
        self._seq += 1
        if kind == "graph_task_start":
            data = {"nodes": {info.id: info for info in data}}
        elif type(data) is tuple:
            names = _FIELDS.get(kind) or _ACCUMULATE[len(data)]
            data = dict(zip(names, data, strict=True))
            data["derived"] = True
        elif type(data) is list:
            data = {"inputs" if kind == "node_start" else "outputs": tuple(data)}
        self.events.append((kind, self._seq, _clock(), "main", "cpu", 1, node, None, 0, 0, data))

    def finish(self) -> None:
        self.events = [_new_tuple(TraceEvent, (i, *row)) for i, row in enumerate(self.events)]


_new_object = object.__new__
_new_tuple = tuple.__new__


def floor(loss: torch.Tensor) -> list[tuple[Any, ...]]:
    """Watch ``loss.backward()`` at the floor's cost; its events."""
    watcher = FloorWatcher()
    watcher.run(loss)
    return watcher.events


def floor_with_records(loss: torch.Tensor) -> list[Any]:
    """Watch ``loss.backward()`` with checks and a trace's records; its events."""
    watcher = RecordsFloorWatcher()
    watcher.run(loss)
    return watcher.events


def nodes_of(loss: torch.Tensor) -> list[Any]:
    """Every node of ``loss``'s graph, once each."""
    seen: dict[int, Any] = {}
    stack = [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen[id(fn)] = fn
        stack += [f for f, _ in fn.next_functions]
    return list(seen.values())


def read_once(loss: torch.Tensor) -> int:
    """``loss.backward()`` with every value ``record()`` summarizes read once; how many reads.

    The least any watcher that looks at every value does, whatever it makes of them: one
    post hook per node, each gradient it receives and hands on read by one reduction
    (``sum``, the cheapest pass PyTorch has), every saved tensor read once when the call
    starts; a memory read already is not read again. On large tensors, where a node's
    hooks cost nothing beside its kernels, this is the floor of exact summaries: four
    numbers of a tensor cannot cost less than one pass over its memory.
    """
    seen: set[tuple[int, int]] = set()

    def read(tensor: Any) -> None:
        if not isinstance(tensor, torch.Tensor) or not tensor.numel():
            return
        key = (tensor.data_ptr(), tensor.numel())
        if key not in seen:
            seen.add(key)
            float(tensor.detach().sum())

    nodes = nodes_of(loss)
    for fn in nodes:
        for name in saved_names(fn):
            saved = getattr(fn, name)
            for one in saved if isinstance(saved, list | tuple) else (saved,):
                read(getattr(one, "data", None))

    def hook(grads_in: tuple[Any, ...], grads_out: tuple[Any, ...]) -> None:
        for tensor in (*grads_in, *grads_out):
            read(tensor)

    handles = [fn.register_hook(hook) for fn in nodes]
    try:
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    return len(seen)
