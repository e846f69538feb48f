"""Watching one PyTorch backward call (a graph task) and emitting our engine's events.

Observed through hooks on every node that runs: ``node_start`` (a
pre-hook), ``node_end`` (a post hook), the accumulation into a leaf's
``.grad`` (``AccumulateGrad``'s post hook), errors and the call's end.
Derived by replaying PyTorch's bookkeeping from the graph, as ``engine.cpp``
does between two nodes: dependency decrements, input-buffer sums, ``skip``,
``capture`` and every ``enqueue`` into a model of the thread's ready queue.
Every derived event says ``"derived": True`` in its data, and every derived
prediction is checked (Note [Checking what is derived]).

Note [Checking what is derived]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
PyTorch pops the ready queue in ``ReadyQueue``'s order: deeper reentrant
calls first, then higher ``sequence_nr`` (``AccumulateGrad`` first), ties
in ``std::priority_queue``'s heap order, which :mod:`heapq` reproduces when
equal keys compare equal. The model queue is popped at every observed node
start; the task it predicts must be the node that starts. Tasks whose pop
PyTorch does not show (the ``GraphRoot`` of several roots, an input of
``grad()`` captured but not run) are played as they come off the model
queue. An input-buffer sum that several edges make is kept as a copy and
compared bit for bit with what the node receives; a ``grad()`` result with
what the call returns. Any difference becomes a ``derived_mismatch`` event
and a :class:`DerivedMismatchWarning`, never a silent lie.
"""

from __future__ import annotations

import heapq
import threading
import warnings
from typing import Any

import torch

from autograd_viz.sources.pytorch.graph import GraphPlan, TorchNode
from autograd_viz.sources.pytorch.summary import TorchSummary, summaries_of, summary_of
from engine.events import HUB
from engine.graph_task import _graph_task_ids

DERIVED_MISMATCH = "derived_mismatch"
"""The event kind of a derived prediction PyTorch contradicted."""

COPY_LIMIT = 1 << 24
"""Elements up to which an input-buffer sum of several edges is copied to check and show it."""


class DerivedMismatchWarning(RuntimeWarning):
    """What PyTorch did differs from what replaying its bookkeeping predicted."""


class _Task:
    """A task in the model ready queue; compares on its key only (ties stay ties)."""

    __slots__ = ("key", "node", "watch")

    def __init__(self, watch: GraphTaskWatch, node: TorchNode) -> None:
        self.key = (-watch.depth, -node.sequence_nr)
        self.watch = watch
        self.node = node

    def __lt__(self, other: _Task) -> bool:
        return self.key < other.key


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.stack: list[GraphTaskWatch] = []
        self.queue: list[_Task] = []


_LOCAL = _ThreadState()


def forget_leftovers() -> None:
    """Drop the model tasks that graph tasks which failed left in this thread's queue.

    A failed graph task leaves its queued tasks in PyTorch's thread-local ready
    queue, and a later call on that thread pops and discards them when they
    come first. The model cannot know whether an unwatched call did so in
    between, so a watched call starts without them; if they still sit in
    PyTorch's heap and change how ties pop, the order check says so.
    """
    queue = _LOCAL.queue
    if any(task.watch.finished for task in queue):
        queue[:] = [task for task in queue if not task.watch.finished]
        heapq.heapify(queue)


def current_watch() -> GraphTaskWatch | None:
    """The innermost watched graph task this thread is running, if any."""
    stack = _LOCAL.stack
    return stack[-1] if stack else None


class GraphTaskWatch:
    """One watched backward call: its hooks, its model of PyTorch's bookkeeping, its events.

    Args:
        plan: the graph and PyTorch's bookkeeping for it.
        keep_graph: ``retain_graph``.
        create_graph: ``create_graph``.
    """

    def __init__(self, plan: GraphPlan, keep_graph: bool, create_graph: bool) -> None:
        parent = current_watch()
        self.id = next(_graph_task_ids)
        """Our graph task id (from our engine's counter: ids never collide)."""
        self.plan = plan
        self.keep_graph = keep_graph
        self.create_graph = create_graph
        if parent is not None:
            self.parent: int | None = parent.id
            self.depth: int = parent.depth + 1
        else:  # a call from inside an unwatched graph task is reentrant too
            self.parent = None
            self.depth = 0 if torch._C._current_graph_task_id() == -1 else 1
        self.finished = False
        self.mismatches = 0
        """How many derived predictions PyTorch contradicted."""
        self._remaining = dict(plan.dependencies)
        self._not_ready: dict[TorchNode, list[bool]] = {}
        self._copy_slots = {edge for edge, count in plan.fan_in.items() if count > 1}
        for node, captures in plan.captures.items():
            self._copy_slots.update((node, slot) for slot, _ in captures)
        self._copies: dict[tuple[TorchNode, int], torch.Tensor] = {}
        self._captured: dict[int, torch.Tensor | None] = {}
        self._running: list[TorchNode] = []
        self._had_grad: dict[TorchNode, bool] = {}
        self._handles: list[Any] = []
        self._live = True

    # -- the call --------------------------------------------------------------------
    def start(self, root_grads: list[torch.Tensor | None], thread: str) -> None:
        """Hook every node that runs, emit ``graph_task_start`` and seed the root."""
        _LOCAL.stack.append(self)
        plan = self.plan
        in_task = plan.dependencies.keys() | {plan.root}
        for node in plan.nodes:
            if node.fn is not None and node in plan.needed and node in in_task:
                self._hook(node)
        summaries = summaries_of(root_grads)
        if HUB.active:
            self._emit("graph_task_start", plan.root, self._start_data(summaries, thread))
            if self.depth:
                self._emit(
                    "reentrant_enter",
                    None,
                    {
                        "parent_graph_task": self.parent,
                        "depth": self.depth,
                        "current_depth": len(_LOCAL.stack) - 1,
                        "on_pool": False,
                    },
                )
        root = plan.root
        if root.fn is not None and root_grads[0] is not None:
            # One root: PyTorch seeds its input buffer with the root gradient.
            self._keep_copy(root, plan.roots[0][1], root_grads[0])
        self._push(root, "root")
        if root.fn is None:  # PyTorch's GraphRoot is popped first, unseen
            self._advance(root)
            if self._runs(root):
                self._derive_graph_root(root_grads, summaries)

    def finish(self, result: Any) -> None:
        """The call returned: play what is left in the model queue and emit the end."""
        if not HUB.active or not self._live:
            return
        self._drain()
        results = list(result) if result is not None else []
        for index, copy in self._captured.items():
            got = results[index] if index < len(results) else None
            if not _same_values(copy, got):
                self._mismatch("capture", None, None, f"grad() result {index} differs from the "
                               "sum of the gradients the graph delivered to it")  # fmt: skip
        self._emit(
            "graph_task_end",
            None,
            {"status": "ok", "exc_type": None, "message": None, "captured": summaries_of(results)},
        )
        if self.depth:
            self._emit_exit(ok=True)

    def fail(self, exc: BaseException) -> None:
        """The call raised: the node that was running failed, and so did the graph task."""
        self.finished = True
        if not HUB.active:
            return
        node = self._running[-1] if self._running else None
        stack = None
        if node is not None and node.fn is not None:
            raw = node.fn.metadata.get("traceback_")
            stack = None if raw is None else [str(line) for line in raw]
        try:
            self._emit(
                "error",
                node,
                {
                    "exc_type": type(exc).__name__,
                    "message": str(exc),
                    "first": True,
                    "traceback": stack,
                },
            )
            self._emit(
                "graph_task_end",
                None,
                {
                    "status": "error",
                    "exc_type": type(exc).__name__,
                    "message": str(exc),
                    "captured": [None] * len(self._captured),
                },
            )
            if self.depth:
                self._emit_exit(ok=False)
        except BaseException:  # noqa: BLE001
            pass  # the call already fails with its own error; a listener cancelling changes nothing

    def close(self) -> None:
        """Remove every hook (also after errors and with ``retain_graph``) and forget the state."""
        self.finished = True
        try:
            for handle in self._handles:
                handle.remove()
        finally:
            self._handles.clear()
            self._copies.clear()
            self._captured.clear()
            stack = _LOCAL.stack
            if stack and stack[-1] is self:
                stack.pop()

    # -- observed ----------------------------------------------------------------------
    def _hook(self, node: TorchNode) -> None:
        watch = self

        def pre_hook(grads: tuple[torch.Tensor | None, ...]) -> None:
            if HUB.active and watch._live and _LOCAL.stack and _LOCAL.stack[-1] is watch:
                watch._node_start(node, grads)

        def post_hook(outputs: tuple[Any, ...], grads: tuple[Any, ...]) -> None:
            if HUB.active and watch._live and _LOCAL.stack and _LOCAL.stack[-1] is watch:
                watch._node_end(node, outputs)

        fn = node.fn
        self._handles.append(fn.register_prehook(pre_hook))
        self._handles.append(fn.register_hook(post_hook))

    def _node_start(self, node: TorchNode, grads: tuple[torch.Tensor | None, ...]) -> None:
        self._running.append(node)
        self._advance(node)
        for slot, index in self.plan.captures.get(node, ()):
            self._capture(node, slot, index)
        self._check_buffer(node, grads)
        if node.variable is not None:
            self._had_grad[node] = node.variable.grad is not None
        self._emit("node_start", node, {"inputs": summaries_of(grads)})

    def _node_end(self, node: TorchNode, outputs: tuple[Any, ...]) -> None:
        if self._running and self._running[-1] is node:
            self._running.pop()
        variable = node.variable
        if variable is not None and variable.grad is not None:
            self._emit(
                "accumulate",
                node,
                {
                    "target": "leaf",
                    "leaf_name": node.leaf_name,
                    "action": "added" if self._had_grad.pop(node, False) else "created",
                    "grad": summary_of(variable.grad),
                },
            )
        summaries = summaries_of(outputs)
        self._emit("node_end", node, {"outputs": summaries})
        if _anomaly_rejects(outputs):
            # PyTorch checks a node's outputs after its post hooks and raises: nothing
            # is routed, and the error that follows names this node.
            self._running.append(node)
            return
        self._pass_outputs(node, outputs, summaries)

    # -- derived -----------------------------------------------------------------------
    def _derive_graph_root(self, grads: list[Any], summaries: list[Any]) -> None:
        root = self.plan.root
        self._emit("node_start", root, {"inputs": [], "derived": True})
        self._emit("node_end", root, {"outputs": summaries, "derived": True})
        self._pass_outputs(root, grads, summaries)

    def _pass_outputs(self, node: TorchNode, outputs: Any, summaries: list[Any]) -> None:
        """``Engine::evaluate_function``'s routing of a node's outputs, derived."""
        plan = self.plan
        for i, edge in enumerate(node.next_edges):
            if edge is None:
                continue
            nxt, slot = edge
            output = outputs[i] if i < len(outputs) else None
            count = self._remaining.get(nxt)
            if count is None:
                self._mismatch("dependencies", nxt, node, f"no dependency left for {nxt.name()}")
                continue
            count -= 1
            if count:
                self._remaining[nxt] = count
            else:
                del self._remaining[nxt]
            self._emit(
                "dependency_decrement",
                nxt,
                {
                    "from_node": node._id,
                    "from_name": node.name(),
                    "input_nr": slot,
                    "remaining": count,
                    "derived": True,
                },
            )
            buffer = self._not_ready.get(nxt)
            if buffer is None:
                if not plan.should_execute(nxt):
                    self._emit(
                        "skip",
                        nxt,
                        {
                            "from_node": node._id,
                            "input_nr": slot,
                            "reason": "not needed for the requested inputs",
                            "derived": True,
                        },
                    )
                    continue
                buffer = [False] * nxt.num_inputs
                if count:
                    self._not_ready[nxt] = buffer
            elif not count:
                del self._not_ready[nxt]
            if output is not None and slot < len(buffer):
                created = not buffer[slot]
                buffer[slot] = True
                self._keep_copy(nxt, slot, output)
                data = {
                    "target": "buffer",
                    "slot": slot,
                    "action": "created" if created else "added",
                    "from_node": node._id,
                    "grad": summaries[i],
                    "derived": True,
                }
                total = self._copies.get((nxt, slot))
                if created:
                    data["total"] = summaries[i]
                elif total is not None:
                    data["total"] = TorchSummary(total)
                self._emit("accumulate", nxt, data)
            if not count:
                self._push(nxt, "ready")

    def _keep_copy(self, node: TorchNode, slot: int, grad: torch.Tensor) -> None:
        """Follow a buffer slot that several edges fill, or that ``grad()`` captures, by copy."""
        key = (node, slot)
        if key not in self._copy_slots:
            return
        with torch.no_grad():
            old = self._copies.get(key)
            if old is not None:
                self._copies[key] = old + grad.detach()  # PyTorch's InputBuffer adds in this order
            elif grad.numel() <= COPY_LIMIT:
                self._copies[key] = grad.detach().clone()
            else:
                self._copy_slots.discard(key)

    def _push(self, node: TorchNode, reason: str) -> None:
        queue = _LOCAL.queue
        heapq.heappush(queue, _Task(self, node))
        device = node.device
        on_cpu = device == "cpu"
        self._emit(
            "enqueue",
            node,
            {
                "queue": "cpu" if on_cpu else device,
                "queue_owner": f"graph_task {self.id}" if on_cpu else "device",
                "reason": reason,
                "queue_length": len(queue),
                "derived": True,
            },
        )

    def _advance(self, node: TorchNode) -> None:
        """Pop the model queue up to ``node``, which PyTorch starts now."""
        queue = _LOCAL.queue
        while queue:
            task = heapq.heappop(queue)
            if task.watch is not self:
                if task.watch.finished:
                    continue  # a failed graph task's leftover: PyTorch discards it too
                heapq.heappush(queue, task)
                break
            if task.node is node:
                return
            if node.fn is not None and self._runs(task.node):
                self._mismatch(
                    "order",
                    task.node,
                    node,
                    f"{node.name()} (node {node._id}) started where PyTorch's order "
                    f"predicted {task.node.name()} (node {task.node._id})",
                )
                heapq.heappush(queue, task)
                self._unqueue(node)
                return
            self._run_unseen(task.node)
        self._mismatch(
            "order", None, node, f"{node.name()} (node {node._id}) started but was never enqueued"
        )

    def _runs(self, node: TorchNode) -> bool:
        return not self.plan.pruned or node in self.plan.needed

    def _unqueue(self, node: TorchNode) -> None:
        queue = _LOCAL.queue
        kept = [t for t in queue if not (t.watch is self and t.node is node)]
        if len(kept) != len(queue):
            queue[:] = kept
            heapq.heapify(queue)

    def _run_unseen(self, node: TorchNode) -> None:
        """A task PyTorch pops without running the node: a ``grad()`` input's capture."""
        for slot, index in self.plan.captures.get(node, ()):
            self._capture(node, slot, index)

    def _capture(self, node: TorchNode, slot: int, index: int) -> None:
        copy = self._copies.pop((node, slot), None)
        self._captured[index] = copy
        self._emit(
            "capture",
            node,
            {"slot": slot, "output_index": index, "grad": summary_of(copy), "derived": True},
        )

    def _drain(self) -> None:
        queue = _LOCAL.queue
        while queue and queue[0].watch is self:
            task = heapq.heappop(queue)
            if self._runs(task.node):
                self._mismatch(
                    "order",
                    task.node,
                    None,
                    f"{task.node.name()} (node {task.node._id}) was predicted to run but never did",
                )
            else:
                self._run_unseen(task.node)

    def _check_buffer(self, node: TorchNode, grads: tuple[torch.Tensor | None, ...]) -> None:
        for slot, grad in enumerate(grads):
            copy = self._copies.pop((node, slot), None)
            if copy is not None and not _same_values(copy, grad):
                self._mismatch(
                    "buffer",
                    node,
                    node,
                    f"input {slot} of {node.name()} (node {node._id}) differs from the sum of "
                    "the gradients delivered to it (a tensor hook may have replaced it)",
                )

    # -- emitting ----------------------------------------------------------------------
    def _start_data(self, summaries: list[Any], thread: str) -> dict[str, Any]:
        plan = self.plan
        pruned = plan.pruned
        return {
            "graph_snapshot": self._snapshot_builder(thread),
            "source": f"torch {torch.__version__}",
            "roots": [(n._id, n.name(), nr) for n, nr in plan.roots],
            "root_grads": summaries,
            "outputs": [(n._id, nr) for n, nr in plan.outputs],
            "keep_graph": self.keep_graph,
            "create_graph": self.create_graph,
            "reentrant_depth": self.depth,
            "parent_graph_task": self.parent or 0,
            "dependencies": {n._id: c for n, c in plan.dependencies.items()},
            "needed": sorted(n._id for n in plan.needed) if pruned else None,
            "captures": sorted(
                (n._id, slot, index) for n, caps in plan.captures.items() for slot, index in caps
            )
            if pruned
            else None,
        }

    def _snapshot_builder(self, thread: str) -> Any:
        plan, gid, parent, depth = self.plan, self.id, self.parent, self.depth
        keep, create = self.keep_graph, self.create_graph

        def snapshot(max_values: int) -> Any:
            return plan.snapshot(gid, parent, depth, keep, create, thread, max_values)

        return snapshot

    def _emit_exit(self, ok: bool) -> None:
        self._emit(
            "reentrant_exit",
            None,
            {"parent_graph_task": self.parent, "depth": self.depth, "ok": ok},
        )

    def _emit(self, kind: str, node: TorchNode | None, data: dict[str, Any]) -> None:
        if HUB.active:
            HUB.emit_data(kind, "cpu", self.id, node, data)

    def _mismatch(
        self, check: str, expected: TorchNode | None, observed: TorchNode | None, message: str
    ) -> None:
        self.mismatches += 1
        warnings.warn(f"autograd-viz: {message}", DerivedMismatchWarning, stacklevel=2)
        self._emit(
            DERIVED_MISMATCH,
            observed,
            {
                "check": check,
                "expected": None if expected is None else [expected._id, expected.name()],
                "observed": None if observed is None else [observed._id, observed.name()],
                "message": message,
                "derived": True,
            },
        )


def _anomaly_rejects(outputs: tuple[Any, ...]) -> bool:
    """Whether anomaly mode will fail the node for a NaN in its outputs (``evaluate_function``)."""
    if not (torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled()):
        return False
    with torch.no_grad():
        return any(
            isinstance(o, torch.Tensor) and o.is_floating_point() and bool(o.detach().isnan().any())
            for o in outputs
        )


def _same_values(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Bit-for-bit equality (a NaN equals the same NaN)."""
    if a is None or b is None:
        return a is None and b is None
    with torch.no_grad():
        b = b.detach()
        if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
            return False
        if a.is_floating_point():
            bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
            as_int = bits.get(a.element_size())
            if as_int is not None:
                return bool(torch.equal(a.view(as_int), b.view(as_int)))
        return bool(torch.equal(a, b))
