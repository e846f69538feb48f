"""The bookkeeping of one backward call: GraphTask, NodeTask, ReadyQueue, InputBuffer.

These are the data structures of PyTorch's engine (see ``seeds/``); the loop
that drives them is in ``engine.engine``.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Sequence
from typing import Any, TypeAlias

from engine import _context
from engine.activity import ACTIVITY, Completion
from engine.devices import CPU, Device
from engine.graph import Edge, Node
from engine.tensor import Tensor

_graph_task_ids = itertools.count(1)


InputBuffer: TypeAlias = list[Any]
"""The gradients gathered for one node: a plain list, one slot per node input.

A list (made per node run, so it must be cheap) that the engine hands to
``Node.apply`` as the node's ``grads`` without copying; see
:func:`accumulate_into` and :func:`buffer_device`.
"""


def accumulate_into(buffer: InputBuffer, pos: int, var: Tensor | None) -> str | None:
    """Add ``var`` into slot ``pos``; returns ``"created"``, ``"added"`` or ``None`` (no var)."""
    if var is None:
        return None
    old = buffer[pos]
    if old is None:
        buffer[pos] = var
        return "created"
    buffer[pos] = old + var
    return "added"


def buffer_device(buffer: InputBuffer) -> Device:
    """Where the node runs: its first non-CPU gradient's device, else ``cpu`` (as in PyTorch)."""
    for var in buffer:
        if var is not None and var.device is not CPU:
            return var.device
    return CPU


class ExecInfo:
    """Per-node pruning state for ``inputs=`` and ``grad()`` (GraphTask::ExecInfo)."""

    __slots__ = ("captures", "needed")

    def __init__(self) -> None:
        self.needed = False
        self.captures: list[tuple[int, int]] | None = None  # (input_idx, output_idx)

    def should_execute(self) -> bool:
        return self.needed or self.captures is not None


class GraphTask:
    """The state of one ``backward()`` / ``grad()`` call.

    Note [Locks]
    ~~~~~~~~~~~~
    ``lock`` guards ``dependencies``, ``not_ready``, ``outstanding_tasks``,
    ``captured_vars`` and the future. A node's outputs are passed on, and the
    node's own task counted as finished, in one hold of it (see
    ``Engine.pass_outputs``), which skips the lock while no other thread can
    reach the graph task (Note [Graph tasks one thread runs]). A ready queue's
    lock may be taken while holding it (to push), never the other way round.
    """

    __slots__ = (
        "captured_vars",
        "cpu_ready_queue",
        "dependencies",
        "done",
        "error",
        "exec_info",
        "future_completed",
        "grad_mode",
        "has_error",
        "id",
        "keep_graph",
        "leaf_devices",
        "lock",
        "not_ready",
        "outstanding_tasks",
        "owner",
        "parent_id",
        "reentrant_depth",
        "shared",
    )

    def __init__(
        self,
        keep_graph: bool,
        create_graph: bool,
        reentrant_depth: int,
        cpu_ready_queue: ReadyQueue,
    ) -> None:
        self.id = next(_graph_task_ids)
        self.keep_graph = keep_graph
        self.grad_mode = create_graph
        self.reentrant_depth = reentrant_depth
        self.cpu_ready_queue = cpu_ready_queue
        self.owner: Device | None = None
        self.outstanding_tasks = 0
        self.shared = False
        """Whether another thread may touch this graph task (Note [Graph tasks one thread runs])."""
        self.lock = ACTIVITY.new_lock()
        self.dependencies: dict[Node, int] = {}
        self.not_ready: dict[Node, InputBuffer] = {}
        self.exec_info: dict[Node, ExecInfo] = {}
        self.captured_vars: list[Tensor | None] = []
        self.has_error = False
        self.future_completed = False
        self.error: BaseException | None = None
        self.done = Completion()
        self.leaf_devices: set[Device] = set()
        parent = _context.TLS.graph_task
        self.parent_id = 0 if parent is None else parent.id

    def init_to_execute(
        self, graph_root: Node, outputs: Sequence[Edge], accumulate_grad: bool, min_topo_nr: int
    ) -> None:
        """Mark the nodes on a path from the root to ``outputs`` as needed (iterative DFS)."""
        exec_info = self.exec_info
        for output_idx, edge in enumerate(outputs):
            info = exec_info.get(edge.function)
            if info is None:
                info = exec_info[edge.function] = ExecInfo()
            if accumulate_grad:
                info.needed = True
            else:
                if info.captures is None:
                    info.captures = []
                info.captures.append((edge.input_nr, output_idx))
        self.captured_vars = [None] * len(outputs)
        # As in PyTorch 2.x the root is needed only if something below it is (or it is an
        # output itself): grad(x, x) captures x's gradient without running its AccumulateGrad.
        exec_info.setdefault(graph_root, ExecInfo())

        def should_execute(fn: Node) -> bool:
            info = exec_info.get(fn)
            return info is not None and info.should_execute()

        def mark_needed(fn: Node) -> None:
            info = exec_info.get(fn)
            if info is None:
                info = exec_info[fn] = ExecInfo()
            info.needed = True

        seen: set[Node] = set()
        stack: list[tuple[Node, Any]] = [(graph_root, iter(graph_root.next_edges))]
        while stack:
            fn, children = stack[-1]
            child: Node | None = None
            for edge in children:
                if edge is None:
                    continue
                if edge.function in seen:
                    if should_execute(edge.function):
                        mark_needed(fn)
                    continue
                seen.add(edge.function)
                if edge.function.topological_nr < min_topo_nr:
                    continue
                child = edge.function
                break
            if child is not None:
                stack.append((child, iter(child.next_edges)))
            else:
                stack.pop()
                if should_execute(fn) and stack:
                    mark_needed(stack[-1][0])


NodeTask: TypeAlias = tuple[GraphTask | None, Node | None, InputBuffer | None]
"""``(graph_task, node, inputs)``: one node ready to run with its gathered inputs.

A plain tuple (one is made per node run). ``(graph_task, None, None)`` is a
wake-up task; :data:`SHUTDOWN_TASK` tells a device thread to exit.
"""

SHUTDOWN_TASK: NodeTask = (None, None, None)
"""Pushed by ``shutdown()`` to stop a device thread."""

_SHUTDOWN_KEY = -(1 << 200)
_WAKE_UP_KEY = -(1 << 199)


class ReadyQueue:
    """A priority queue of NodeTasks with a condition to wait on.

    Order (PyTorch's CompareNodeTaskTime): shutdown tasks first, then wake-up
    (empty) tasks, then the deeper reentrant depth, then the higher
    sequence_nr; ties in arrival order. The first three criteria are folded
    into one integer key (smaller runs first), so the heap compares ints.

    Pushing does not count the task in its graph task's ``outstanding_tasks``:
    the engine does that under the graph task's lock (Note [Locks]).
    """

    __slots__ = ("_arrival", "_cond", "_lock", "_waiting", "device", "heap")

    def __init__(self, device: Device = CPU) -> None:
        self.heap: list[tuple[int, int, NodeTask]] = []
        """``(key, arrival, task)`` entries; read without the lock only as a snapshot."""
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._arrival = itertools.count()
        self._waiting = 0
        self.device = device

    def push(self, task: NodeTask) -> None:
        base, fn, _ = task
        if fn is not None:
            depth = 0 if base is None else base.reentrant_depth
            # Deeper reentrant depth first, then the higher sequence_nr (below 2**64).
            key = -((depth << 64) | fn.sequence_nr) if depth else -fn.sequence_nr
        else:
            key = _SHUTDOWN_KEY if task is SHUTDOWN_TASK else _WAKE_UP_KEY
        with self._lock:
            heapq.heappush(self.heap, (key, next(self._arrival), task))
            if self._waiting:
                # The sleeper counts as running from now on; see Note [Quiescence].
                self._waiting -= 1
                ACTIVITY.unblock()
                self._cond.notify()

    def pop(self) -> NodeTask:
        with self._lock:
            heap = self.heap
            while not heap:
                self._waiting += 1
                ACTIVITY.block()
                self._cond.wait()
            return heapq.heappop(heap)[2]

    def __len__(self) -> int:
        return len(self.heap)


def compute_dependencies(root: Node, task: GraphTask, min_topo_nr: int) -> None:
    """Count, for every node reachable from ``root``, the edges arriving at it.

    Nodes with a topological number below ``min_topo_nr`` cannot lead to any
    requested output; they are counted but not walked (PyTorch's pruning).
    The counts double as the set of nodes already seen (the root, having no
    edge arriving at it in a DAG, is never met again).
    """
    dependencies = task.dependencies
    stack = [root]
    while stack:
        fn = stack.pop()
        if fn.topological_nr < min_topo_nr:
            continue
        for edge in fn._next_edges:
            if edge is None:
                continue
            nxt = edge.function
            count = dependencies.get(nxt)
            if count is None:
                dependencies[nxt] = 1
                stack.append(nxt)
            else:
                dependencies[nxt] = count + 1
