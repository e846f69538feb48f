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
            summary.extend((low, high, mean, norm))
        self.summaries.clear()


_BLOCKS: dict[tuple[int, Any], _Rows] = {}
"""Kept from call to call, as a recorder keeps its memory."""


class FloorWatcher:
    """Watches one ``loss.backward()`` and keeps its events as tuples (:meth:`run`)."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self._seen: dict[int, tuple[Any, int, list[Any]]] = {}
        self._seq = 0

    def summary(self, tensor: torch.Tensor | None) -> list[Any] | None:
        """Shape and dtype now; min, max, mean and norm appended when the call ends."""
        if tensor is None:
            return None
        found = self._seen.get(id(tensor))  # the same unchanged tensor: the same summary
        if found is not None and found[0]() is tensor and found[1] == tensor._version:
            return found[2]
        summary: list[Any] = [tuple(tensor.shape), tensor.dtype]
        tensor = tensor.detach()
        if tensor.numel() >= 1 << 14:  # large: reduced now, by PyTorch, with no copy
            low, high = torch.aminmax(tensor)
            summary += (float(low), float(high), float(tensor.mean()))
            summary.append(float(torch.linalg.vector_norm(tensor)))
            self._seen[id(tensor)] = (weakref.ref(tensor), tensor._version, summary)
            return summary
        array = tensor.numpy()
        key = (array.size, array.dtype)
        rows = _BLOCKS.get(key)
        if rows is None:
            rows = _BLOCKS[key] = _Rows(array.size, array.dtype)
        rows.add(array, summary)
        self._seen[id(tensor)] = (weakref.ref(tensor), tensor._version, summary)
        return summary

    def emit(self, kind: str, node: int, data: Any) -> None:
        self._seq += 1
        self.events.append((kind, self._seq, _clock(), node, data))

    def run(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, watched."""
        root = loss.grad_fn
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
            for name in _saved_names(fn):
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
                (
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

        def pre(at: int) -> Any:
            def hook(grads: tuple[Any, ...]) -> None:
                heapq.heappop(queue)
                self.emit("node_start", at, [self.summary(g) for g in grads])

            return hook

        def post(at: int, fn: Any) -> Any:
            variable = getattr(fn, "variable", None)

            def hook(outputs: tuple[Any, ...], inputs: tuple[Any, ...]) -> None:
                if variable is not None and variable.grad is not None:
                    self.emit("accumulate", at, self.summary(variable.grad))
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
                        self.emit("enqueue", nxt, len(queue))

            return hook

        order_nr = [fn._sequence_nr() for fn in order]
        for at, fn in enumerate(order):
            handles.append(fn.register_prehook(pre(at)))
            handles.append(fn.register_hook(post(at, fn)))
        heapq.heappush(queue, (-order_nr[0], 0))
        self.emit("enqueue", 0, len(queue))
        try:
            loss.backward()
        finally:
            for handle in handles:
                handle.remove()
            buffers.clear()
            self.emit("graph_task_end", 0, None)
            for rows in _BLOCKS.values():
                rows.reduce()


_SAVED: dict[type, tuple[str, ...]] = {}


def _saved_names(fn: Any) -> tuple[str, ...]:
    names = _SAVED.get(type(fn))
    if names is None:
        names = _SAVED[type(fn)] = tuple(n for n in dir(fn) if n.startswith("_raw_saved_"))
    return names


def floor(loss: torch.Tensor) -> list[tuple[Any, ...]]:
    """Watch ``loss.backward()`` at the floor's cost; its events."""
    watcher = FloorWatcher()
    watcher.run(loss)
    return watcher.events
