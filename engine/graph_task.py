"""The bookkeeping of one backward call: GraphTask, NodeTask, ReadyQueue, InputBuffer.

These are the data structures of PyTorch's engine (see ``seeds/``); the loop
that drives them is in ``engine.engine``.
"""

from __future__ import annotations

import heapq
import itertools
import sys
import threading
from collections.abc import Sequence
from typing import Any, TypeAlias

from engine import _context
from engine.activity import ACTIVITY, Completion
from engine.devices import CPU, Device
from engine.graph import _STEALS, UINT64_MAX, Edge, Node, _memory_only_it_reaches
from engine.tensor import Tensor, make_tensor

__all__ = [
    "IN_PLACE_MIN",
    "SHUTDOWN_TASK",
    "ExactQueueEntry",
    "ExecInfo",
    "GraphTask",
    "InputBuffer",
    "NodeTask",
    "QueueEntry",
    "ReadyQueue",
    "accumulate_into",
    "add_into",
    "buffer_device",
    "compute_dependencies",
]

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


IN_PLACE_MIN = 64
"""Elements up to which :func:`add_into` makes a new array: an in-place add costs more there."""


def add_into(buffer: InputBuffer, slot: int, grad: Tensor) -> None:
    """Add ``grad`` to the gradient in ``buffer[slot]``, recording no graph.

    The caller must hold no reference to the gradient in the slot, and both
    must fit the slot's metadata (same shape, dtype and device).

    Note [Adding into a buffer in place]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    A node whose output feeds several others (a residual branch, a shared
    weight, an RNN's weights over time) gets one gradient per use, summed in
    its input buffer. A new array per sum costs an allocation and, for large
    tensors, the page faults of fresh memory: 4 MiB of float64 add in 0.25 ms
    into an existing array against 1.6 ms into a new one here. PyTorch's
    InputBuffer adds in place when nothing else uses the buffered tensor or
    its storage, and so does this: the tensor must be held only by the buffer
    (and this function), its array only by the tensor, and the array must own
    its memory (or view one nothing else holds), be contiguous and writeable.
    A gradient a hook kept, one routed to two places (``AddBackward0`` hands
    the same tensor to both inputs), or the one passed to ``backward()``
    shows in the counts and gets a new array, as does anything up to
    :data:`IN_PLACE_MIN` elements. Without a GIL the counts are not exact, so
    it always makes a new array.
    """
    old = buffer[slot]
    data = old.data
    if (
        _STEALS
        and data.size > IN_PLACE_MIN
        and sys.getrefcount(old) <= 3  # the buffer, old, the argument
        and sys.getrefcount(data) <= 3  # old's slot, data, the argument
        and _memory_only_it_reaches(data)
    ):
        data += grad.data
    else:
        buffer[slot] = make_tensor(data + grad.data, old.device)


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

_SHUTDOWN_PRIORITY = -(2.0**200)
_WAKE_UP_PRIORITY = -(2.0**199)
_EXACT_FLOAT = 2**53
"""Sequence numbers below this are exact as floats (as is AccumulateGrad's, 2**64 - 1, alone)."""

_HEAPQ_IS_ATOMIC = _context.GIL
"""Whether one ``heapq`` call on queue entries runs whole (Note [Lock-free queue ends])."""


class QueueEntry(float):
    """A task's priority as a number (smaller runs first), carrying the task as ``.task``.

    A ``float`` subclass that adds no comparison: ``heapq`` compares entries
    with ``float``'s own C code, and two tasks of the same priority compare
    equal, so that ties stay where the heap algorithm leaves them
    (Note [Ties in heap order]). A float with a slot is the cheapest such
    object to make; priorities a float cannot hold exactly are
    :class:`ExactQueueEntry` ints, which floats compare with exactly.
    """

    __slots__ = ("task",)
    task: NodeTask


class ExactQueueEntry(int):
    """A :class:`QueueEntry` for a reentrant task or an unusual sequence_nr, as an exact int."""

    task: NodeTask


def _entry(task: NodeTask) -> QueueEntry | ExactQueueEntry:
    """``task`` in its queue entry (a function, not a method: this runs once per node)."""
    base, fn, _ = task
    entry: QueueEntry | ExactQueueEntry
    if fn is not None:
        nr = fn.sequence_nr
        depth = base.reentrant_depth  # type: ignore[union-attr]  # a node's task has a graph task
        if not depth and (nr < _EXACT_FLOAT or nr == UINT64_MAX):
            entry = QueueEntry(-nr)  # 2**64 - 1 rounds to 2**64, above every other depth-0 nr
        else:
            # Deeper reentrant depth first (below -2**64 even at depth 1, past
            # AccumulateGrad's float), then the higher sequence_nr.
            entry = ExactQueueEntry(-((depth << 65) | nr))
    else:
        entry = QueueEntry(_SHUTDOWN_PRIORITY if task is SHUTDOWN_TASK else _WAKE_UP_PRIORITY)
    entry.task = task
    return entry


_heappush = heapq.heappush
_heappop = heapq.heappop


class ReadyQueue:
    """A priority queue of NodeTasks with a condition to wait on.

    Order (PyTorch's CompareNodeTaskTime): shutdown tasks first, then wake-up
    (empty) tasks, then the deeper reentrant depth, then the higher
    sequence_nr; ties in heap order, as PyTorch's ``std::priority_queue``
    (Note [Ties in heap order]). All four criteria are folded into one
    number, the :class:`QueueEntry` that carries the task, so the heap holds
    numbers only and compares them without a tuple.

    Pushing does not count the task in its graph task's ``outstanding_tasks``:
    the engine does that under the graph task's lock (Note [Locks]).
    """

    __slots__ = ("_cond", "_lock", "_waiting", "device", "heap")

    def __init__(self, device: Device = CPU) -> None:
        self.heap: list[QueueEntry | ExactQueueEntry] = []
        """The waiting tasks' entries; read without the lock only as a snapshot."""
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiting = 0
        self.device = device

    def push(self, task: NodeTask) -> None:
        entry = _entry(task)
        if _HEAPQ_IS_ATOMIC:
            _heappush(self.heap, entry)
            if not self._waiting:
                return
        with self._lock:
            if not _HEAPQ_IS_ATOMIC:
                _heappush(self.heap, entry)
            if self._waiting:
                # The sleeper counts as running from now on; see Note [Quiescence].
                self._waiting -= 1
                ACTIVITY.unblock()
                self._cond.notify()

    def take(self) -> NodeTask | None:
        """Pop the first task without waiting; ``None`` if there is none."""
        if _HEAPQ_IS_ATOMIC:
            try:
                return _heappop(self.heap).task
            except IndexError:  # empty, or another consumer took the last one
                return None
        with self._lock:
            return _heappop(self.heap).task if self.heap else None

    def push_pop(self, task: NodeTask) -> NodeTask | None:
        """Push ``task`` and pop the first task (the caller consumes this queue).

        On an empty queue ``task`` is handed back without touching the heap.
        Otherwise it is a push and a pop, never ``heapq.heappushpop``: that one
        hands back a task of the first priority without moving the heap, where
        PyTorch's push and pop move its ties (Note [Ties in heap order]).
        Returns ``None`` when another consumer took every task in between.
        """
        heap = self.heap
        if not heap:
            return task
        entry = _entry(task)
        if _HEAPQ_IS_ATOMIC:
            _heappush(heap, entry)
            try:
                return _heappop(heap).task
            except IndexError:  # another consumer took them all, this one included
                return None
        with self._lock:
            _heappush(heap, entry)
            return _heappop(heap).task

    def pop(self) -> NodeTask:
        """Pop the first task, sleeping while the queue is empty."""
        task = self.take()
        if task is not None:
            return task
        heap = self.heap
        with self._lock:
            while True:
                if heap:
                    return _heappop(heap).task
                self._waiting += 1
                if heap:  # pushed between the check and the count: no wake-up is coming
                    self._waiting -= 1
                    continue
                ACTIVITY.block()
                self._cond.wait()

    def __len__(self) -> int:
        return len(self.heap)

    # Note [Ties in heap order]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~
    # PyTorch's ready queue is a std::priority_queue, which breaks no ties:
    # tasks of equal priority (AccumulateGrads all have sequence_nr 2**64-1)
    # come out in whatever order the heap's sift moves leave them. Five
    # leaves ready at once run as 1,3,5,2,4; eight as 1,3,7,6,8,5,2,4.
    # heapq's push and pop are the same algorithms (libstdc++'s push_heap and
    # pop_heap: on a tie the hole moves to the right child), so a heap whose
    # entries compare equal on ties runs the same order, provided every push
    # and pop PyTorch makes is made here too: a shortcut that hands a task
    # back without its push and pop (as heappushpop does) leaves the heap's
    # ties where PyTorch's moves would not. Only an empty queue may be
    # skipped: a push and a pop there leave it empty either way.

    # Note [Lock-free queue ends]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # Every node run passes through a push and a pop, so their locks were a
    # tenth of a fan-in backward. Under the GIL one heappush or heappop on a
    # list of numbers runs whole (queue entries compare with float's and int's C
    # code, no Python code; they are made and freed outside heapq calls), so both
    # ends skip the lock unless a consumer sleeps. What the lock still orders
    # is the sleep: a consumer counts itself in ``_waiting`` and then looks at
    # the heap again, all under the lock; a pusher pushes and then reads
    # ``_waiting``. Either the consumer's second look sees the key, or the
    # pusher sees the count and wakes it (taking the lock, which the consumer
    # releases only by waiting). Without a GIL every push and pop locks.


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
