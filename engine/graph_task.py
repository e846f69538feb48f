"""The bookkeeping of one backward call: GraphTask, NodeTask, ReadyQueue, InputBuffer.

These are the data structures of PyTorch's engine (see ``seeds/``); the loop
that drives them is in ``engine.engine``.
"""

from __future__ import annotations

import heapq
import itertools
import sys
import threading
from typing import Any, TypeAlias

from engine import _context
from engine.activity import ACTIVITY, Completion
from engine.devices import CPU, Device
from engine.graph import _STEALS, Node, _memory_only_it_reaches
from engine.scheduler import SHUTDOWN_PRIORITY, WAKE_UP_PRIORITY, ExecInfo, prioritized
from engine.tensor import Tensor, make_tensor

__all__ = [
    "IN_PLACE_MIN",
    "SHUTDOWN_TASK",
    "ExactNodeTask",
    "GraphTask",
    "InputBuffer",
    "NodeTask",
    "ReadyQueue",
    "accumulate_into",
    "add_into",
    "buffer_device",
    "new_graph_task_id",
    "node_task",
    "wake_up_task",
]

_graph_task_ids = itertools.count(1)


def new_graph_task_id() -> int:
    """An id no other graph task of this process has, ours or a watched engine's.

    Events name their graph task by id; a source that watches another engine
    numbers its backward calls from here so that they never share one with ours.
    """
    return next(_graph_task_ids)


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


class NodeTask(float):
    """One node ready to run with its gathered inputs: ``graph_task``, ``fn``, ``inputs``.

    A task is its own ready-queue entry (Note [A task is its own queue entry]):
    a ``float`` whose value is its priority (Note [Ready-queue order] in
    :mod:`engine.scheduler`), made by :func:`node_task`. ``fn`` and ``inputs``
    are ``None`` for a wake-up task (:func:`wake_up_task`); all three are for
    :data:`SHUTDOWN_TASK`, which tells a device thread to exit.
    """

    __slots__ = ("fn", "graph_task", "inputs")

    graph_task: GraphTask | None
    fn: Node | None
    inputs: InputBuffer | None


class ExactNodeTask(int):
    """A :class:`NodeTask` whose priority a float cannot hold (a reentrant task), as an int."""

    graph_task: GraphTask | None
    fn: Node | None
    inputs: InputBuffer | None


# Note [A task is its own queue entry]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A ready queue is a heap of numbers that compare in C (Note [Ready-queue
# order]). A task was a tuple (graph task, node, inputs) and its entry a
# number carrying the tuple: two objects the collector tracks for every
# queued node, besides its input buffer, and a fan-in's backward keeps
# thousands queued at once. The task is now the number itself, with its
# three fields in slots: one object, made once, pushed and popped as is.


def node_task(graph_task: GraphTask, fn: Node, inputs: InputBuffer) -> NodeTask | ExactNodeTask:
    """The task of ``fn`` ready with ``inputs``, as its queue entry."""
    task = prioritized(graph_task.reentrant_depth, fn.sequence_nr, NodeTask, ExactNodeTask)
    task.graph_task = graph_task
    task.fn = fn
    task.inputs = inputs
    return task


def _special_task(priority: float, graph_task: GraphTask | None) -> NodeTask:
    task = NodeTask(priority)
    task.graph_task = graph_task
    task.fn = task.inputs = None
    return task


def wake_up_task(graph_task: GraphTask) -> NodeTask:
    """An empty task that wakes ``graph_task``'s owner (Note [Owner wake-up])."""
    return _special_task(WAKE_UP_PRIORITY, graph_task)


SHUTDOWN_TASK: NodeTask = _special_task(SHUTDOWN_PRIORITY, None)
"""Pushed by ``shutdown()`` to stop a device thread."""

_HEAPQ_IS_ATOMIC = _context.GIL
"""Whether one ``heapq`` call on queue entries runs whole (Note [Lock-free queue ends])."""

_heappush = heapq.heappush
_heappop = heapq.heappop


class ReadyQueue:
    """A priority queue of NodeTasks with a condition to wait on.

    The order is the scheduler's (Note [Ready-queue order] in
    :mod:`engine.scheduler`): the heap holds the tasks themselves, each a
    number whose value is its priority (Note [A task is its own queue entry]).

    Pushing does not count the task in its graph task's ``outstanding_tasks``:
    the engine does that under the graph task's lock (Note [Locks]).
    """

    __slots__ = ("_cond", "_lock", "_waiting", "device", "heap")

    def __init__(self, device: Device = CPU) -> None:
        self.heap: list[NodeTask | ExactNodeTask] = []
        """The waiting tasks' entries; read without the lock only as a snapshot."""
        self._lock = threading.Lock()
        self._cond: threading.Condition | None = None
        """Made by the first consumer that sleeps, under ``_lock`` (Note [A condition made
        when first needed])."""
        self._waiting = 0
        self.device = device

    def push(self, task: NodeTask | ExactNodeTask) -> None:
        if _HEAPQ_IS_ATOMIC:
            _heappush(self.heap, task)
            if not self._waiting:
                return
        with self._lock:
            if not _HEAPQ_IS_ATOMIC:
                _heappush(self.heap, task)
            if self._waiting:
                # The sleeper counts as running from now on; see Note [Quiescence].
                self._waiting -= 1
                ACTIVITY.unblock()
                assert self._cond is not None  # a sleeper made it
                self._cond.notify()

    def take(self) -> NodeTask | ExactNodeTask | None:
        """Pop the first task without waiting; ``None`` if there is none."""
        if _HEAPQ_IS_ATOMIC:
            try:
                return _heappop(self.heap)
            except IndexError:  # empty, or another consumer took the last one
                return None
        with self._lock:
            return _heappop(self.heap) if self.heap else None

    def push_pop(self, task: NodeTask | ExactNodeTask) -> NodeTask | ExactNodeTask | None:
        """Push ``task`` and pop the first task (the caller consumes this queue).

        On an empty queue ``task`` is handed back without touching the heap.
        Otherwise it is a push and a pop, never ``heapq.heappushpop``: that one
        hands back a task of the first priority without moving the heap, where
        PyTorch's push and pop move its ties (Note [Ties in heap order] in :mod:`engine.scheduler`).
        Returns ``None`` when another consumer took every task in between.
        """
        heap = self.heap
        if not heap:
            return task
        if _HEAPQ_IS_ATOMIC:
            _heappush(heap, task)
            try:
                return _heappop(heap)
            except IndexError:  # another consumer took them all, this one included
                return None
        with self._lock:
            _heappush(heap, task)
            return _heappop(heap)

    def pop(self) -> NodeTask | ExactNodeTask:
        """Pop the first task, sleeping while the queue is empty."""
        task = self.take()
        if task is not None:
            return task
        heap = self.heap
        with self._lock:
            while True:
                if heap:
                    return _heappop(heap)
                self._waiting += 1
                if heap:  # pushed between the check and the count: no wake-up is coming
                    self._waiting -= 1
                    continue
                ACTIVITY.block()
                if self._cond is None:
                    self._cond = threading.Condition(self._lock)
                self._cond.wait()

    def __len__(self) -> int:
        return len(self.heap)

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

    # Note [A condition made when first needed]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # Every backward call makes a ready queue (its CPU queue) and a graph
    # task's future, and most never sleep on either: the calling thread runs
    # the whole graph. Python's ``threading.Condition`` costs thousands of
    # instructions to make (it probes the lock for three methods a plain
    # lock lacks, each probe a caught AttributeError), a fifth of a small
    # backward's fixed cost. So the condition is made by the first thread
    # that sleeps, under the lock it wraps; a waker reaches it only through
    # the count of sleepers, which it reads under that same lock.
