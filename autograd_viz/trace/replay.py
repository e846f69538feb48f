"""Replaying a trace: the engine's state after any step.

:meth:`Trace.state_at(k) <autograd_viz.trace.Trace.state_at>` returns an
:class:`ExecutionState`, the state after the first ``k`` events. A
:class:`Replayer` indexes the trace once, in one pass:

- every node's state changes are kept as a history (the step of each change
  and the immutable :class:`NodeState` after it), so a node's state at any
  step is one binary search away, and a state never materializes the nodes
  nobody asks about;
- the small, fast-changing parts (ready queues, threads, graph tasks, leaf
  gradients) are copied into a checkpoint every :data:`CHECKPOINT_EVERY`
  events; seeking folds at most that many events from the nearest checkpoint,
  backward as well as forward.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from autograd_viz.trace.records import NodeInfo, TraceRecord, paused_gc
from autograd_viz.trace.summary import TensorSummary
from engine.scheduler import WAKE_UP_PRIORITY, ExactQueueEntry, ready_entry, special_entry
from engine.scheduler import QueueEntry as SchedulerEntry

if TYPE_CHECKING:
    from autograd_viz.trace.records import GraphTaskInfo, TraceEvent

T = TypeVar("T", bound=TraceRecord)
"""The trace a replay reads: a :class:`~autograd_viz.trace.Trace` when it replays itself,
so that ``state.trace`` is the trace the caller holds."""

CHECKPOINT_EVERY = 256
"""Events between two checkpoints of the small state."""


class NodeStatus(enum.StrEnum):
    """Where a node stands in its graph task."""

    WAITING = "waiting"
    """Needed, and no gradient has reached it yet."""
    PARTIAL = "partial"
    """Gradients have started to arrive; it is not in a ready queue yet."""
    QUEUED = "queued"
    """Every dependency delivered; waiting in a ready queue. A failed graph task
    drops its queues: nodes queued then stay QUEUED (ready, never run)."""
    RUNNING = "running"
    """An engine thread popped it and is running its hooks or ``apply``."""
    DONE = "done"
    """It ran (or, for a ``grad()`` input, its gradient was captured)."""
    PRUNED = "pruned"
    """exec_info or topological pruning means it never runs in this graph task."""
    FAILED = "failed"
    """It raised, or produced a value anomaly mode rejected."""


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node of one graph task, at one step."""

    info: NodeInfo
    """What the snapshot knows about the node (name, numbers, edges, ...)."""
    graph_task: int
    """The graph task this state belongs to."""
    status: NodeStatus
    """See :class:`NodeStatus`."""
    remaining: int
    """Dependencies not yet delivered."""
    slots: tuple[TensorSummary | None, ...]
    """The input buffer: the gradient gathered so far in each slot, or ``None``."""
    contributions: tuple[int, ...] = ()
    """How many gradients were added into each slot."""
    inputs: tuple[TensorSummary | None, ...] | None = None
    """The gradients ``apply`` received (after pre-hooks), once it started."""
    outputs: tuple[TensorSummary | None, ...] | None = None
    """The gradients it returned, once it ended."""
    thread: str | None = None
    """The engine thread that ran it."""
    captured: tuple[int, ...] = ()
    """``grad()`` output indices captured at this node."""
    hooks_run: int = 0
    """Hooks that ran on it."""
    released: bool = False
    """Its saved tensors were freed."""
    error: str | None = None
    """``ExcType: message`` if it failed."""

    @property
    def id(self) -> int:
        """The node id."""
        return self.info.id

    @property
    def name(self) -> str:
        """The node name."""
        return self.info.name


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """A task waiting in a ready queue."""

    graph_task: int
    """Its graph task."""
    node_id: int
    """The node to run."""
    name: str
    """The node's name."""
    sequence_nr: int
    """Higher runs first (after deeper reentrant depth)."""
    reentrant_depth: int
    """Deeper runs first."""
    enqueued_at: int
    """Index of the enqueue event."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """A gradient that reached a node along one edge (a ``dependency_decrement``)."""

    from_node: int
    """The node that produced it."""
    to_node: int
    """The node it reached."""
    input_nr: int
    """The input slot of ``to_node`` it was for."""
    index: int
    """Index of the ``dependency_decrement`` event."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One level of an engine thread's stack."""

    graph_task: int
    """The graph task."""
    node_id: int | None
    """The node being run, or ``None`` for a frame that waits on a graph task."""
    name: str | None
    """The node's name."""


@dataclass(frozen=True, slots=True)
class ThreadState:
    """What one engine thread is doing."""

    name: str
    """The thread's name."""
    device: str
    """The device it works for."""
    stack: tuple[Frame, ...] = ()
    """Outermost first. Reentrant backward nests a graph-task frame inside a node frame."""
    last_event: int = -1
    """Index of the last event it emitted."""

    @property
    def running(self) -> Frame | None:
        """The innermost node being run, if any."""
        for frame in reversed(self.stack):
            if frame.node_id is not None:
                return frame
        return None

    @property
    def reentrant_depth(self) -> int:
        """How many graph tasks are open on this thread, minus one (0 when idle)."""
        return max(0, sum(1 for f in self.stack if f.node_id is None) - 1)


@dataclass(frozen=True, slots=True)
class GraphTaskState:
    """One backward call at one step."""

    info: GraphTaskInfo | None
    """Its snapshot (``None`` if recording began after it started)."""
    status: str = "running"
    """``"running"``, ``"ok"`` or ``"error"``."""
    error: str | None = None
    """``ExcType: message`` once it failed."""
    captured: Mapping[int, TensorSummary | None] = field(default_factory=dict)
    """``grad()`` results captured so far, by output index."""


@dataclass(frozen=True, slots=True)
class LeafState:
    """A leaf tensor and its ``.grad``."""

    node_id: int
    """Its ``AccumulateGrad`` node."""
    name: str | None
    """The tensor's name, if any."""
    grad: TensorSummary | None
    """``.grad`` at this step."""


@dataclass
class _Small:
    """The part of the state that is copied at checkpoints."""

    queues: dict[tuple[str, int], list[_Queued]] = field(default_factory=dict)
    """Each ready queue as the engine's heap (Note [Replaying the ready queues])."""
    waiting: dict[tuple[int, int], tuple[str, int]] = field(default_factory=dict)
    """``(graph task, node)`` → the queue it waits in."""
    threads: dict[str, ThreadState] = field(default_factory=dict)
    graph_tasks: dict[int, GraphTaskState] = field(default_factory=dict)
    errors: int = 0  # counts into Replayer.errors / anomalies
    anomalies: int = 0

    def copy(self) -> _Small:
        return _Small(
            {key: list(heap) for key, heap in self.queues.items()},
            dict(self.waiting),
            dict(self.threads),
            dict(self.graph_tasks),
            self.errors,
            self.anomalies,
        )


class ExecutionState(Generic[T]):
    """The engine after ``step`` events of a trace. Node states are computed on access."""

    def __init__(self, replayer: Replayer[T], step: int, small: _Small) -> None:
        self._replayer = replayer
        self.step = step
        """How many events have been applied."""
        self.total = len(replayer.trace.events)
        """How many events the trace has."""
        self.graph_tasks: Mapping[int, GraphTaskState] = small.graph_tasks
        """Graph tasks started so far, by id."""
        self.threads: Mapping[str, ThreadState] = small.threads
        """Engine threads seen so far, by name."""
        self.queues: Mapping[str, tuple[QueueEntry, ...]] = _queues_by_device(small)
        """Each device's ready queue, next to run first (``"cpu"``, ``"sim:0"``, ...)."""
        self.errors: tuple[TraceEvent, ...] = tuple(replayer.errors[: small.errors])
        """``error`` events so far."""
        self.anomalies: tuple[TraceEvent, ...] = tuple(replayer.anomalies[: small.anomalies])
        """``anomaly`` events so far."""

    def __repr__(self) -> str:
        return f"<ExecutionState step {self.step} of {self.total}>"

    @property
    def trace(self) -> T:
        """The trace this state replays."""
        return self._replayer.trace

    @property
    def event(self) -> TraceEvent | None:
        """The last event applied (``None`` at step 0)."""
        return self._replayer.trace.events[self.step - 1] if self.step else None

    @property
    def next_event(self) -> TraceEvent | None:
        """The event the next step applies (``None`` at the end)."""
        events = self._replayer.trace.events
        return events[self.step] if self.step < len(events) else None

    @property
    def graph_task(self) -> int | None:
        """The graph task of the last event applied (or of the next one at step 0).

        Forward anomaly events belong to no graph task (their ``graph_task`` is 0);
        the nearest event before them that belongs to one decides, else the nearest after.
        """
        events = self._replayer.trace.events
        for i in range(self.step - 1, -1, -1):
            if events[i].graph_task:
                return events[i].graph_task
        for i in range(self.step, len(events)):
            if events[i].graph_task:
                return events[i].graph_task
        return None

    def node(self, node_id: int, graph_task: int | None = None) -> NodeState:
        """A node's state in ``graph_task`` (default: the current graph task).

        Raises:
            KeyError: the node is not part of that graph task at this step.
        """
        gid = self.graph_task if graph_task is None else graph_task
        history = self._replayer.node_history.get((gid, node_id)) if gid is not None else None
        if history is not None:
            i = bisect.bisect_right(history[0], self.step) - 1
            if i >= 0:
                return history[1][i]
        raise KeyError(f"node {node_id} is not in graph task {gid} at step {self.step}")

    def nodes(self, graph_task: int | None = None) -> dict[int, NodeState]:
        """Every node of ``graph_task`` (default: the current one), by id."""
        gid = self.graph_task if graph_task is None else graph_task
        ids = self._replayer.task_nodes.get(gid, ()) if gid is not None else ()
        out = {}
        for node_id in ids:
            try:
                out[node_id] = self.node(node_id, gid)
            except KeyError:
                continue
        return out

    @property
    def leaves(self) -> dict[int, LeafState]:
        """Leaf tensors seen so far and their ``.grad``, by ``AccumulateGrad`` node id."""
        out = {}
        for node_id, (steps, states) in self._replayer.leaf_history.items():
            i = bisect.bisect_right(steps, self.step) - 1
            if i >= 0:
                out[node_id] = states[i]
        return out

    def deliveries(self, graph_task: int | None = None) -> tuple[Delivery, ...]:
        """The edges ``graph_task`` (default: the current one) has sent a gradient along."""
        gid = self.graph_task if graph_task is None else graph_task
        done = self._replayer.deliveries.get(gid, ()) if gid is not None else ()
        return tuple(done[: bisect.bisect_left(done, self.step, key=lambda d: d.index)])

    def started_by(self, graph_task: int) -> tuple[int, int] | None:
        """``(graph task, node id)`` of the node whose backward started ``graph_task``.

        ``None`` for a call from user code, or when the trace does not show it.
        """
        replayer = self._replayer
        if graph_task not in replayer.started_by:
            replayer.extend()  # a later graph task: a lazy replayer may not have got there
        return replayer.started_by.get(graph_task)

    @property
    def captured(self) -> dict[int, Mapping[int, TensorSummary | None]]:
        """``grad()`` values captured so far, by graph task and output index."""
        return {gid: task.captured for gid, task in self.graph_tasks.items() if task.captured}


# Note [Replaying the ready queues]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A ready queue is a heap, and tasks of equal priority (several
# AccumulateGrads: one sequence_nr) leave it in the heap's order, not the
# order they came in: PyTorch's std::priority_queue and our engine's heapq
# pop five ties as 1,3,5,2,4. The trace records every push (``enqueue``) and
# every pop (the popped task's first ``hook``, ``node_start`` or
# ``capture``), so replay runs the same operations on a heap of its own,
# whose entries are the engine's (``engine.scheduler.ready_entry``, Note
# [Ready-queue order]), and the order it shows is the order the engine
# pops. Wake-up tasks sit in the heap too (they come first and move the
# others), and a task whose graph task has ended is popped and dropped, as
# the engine drops it. Each top-level graph task has its own CPU
# queue, which its reentrant calls share; each device has one queue. Should
# a pop not find its task at the top (a trace from a recorder that dropped
# events), the task is taken out wherever it is.


_Queued: TypeAlias = SchedulerEntry | ExactQueueEntry
"""A heap entry: the engine's priority, carrying a task (``None`` for a wake-up) as ``.task``."""


def _queue_key(rp: Replayer, gid: int, data: Mapping[str, Any]) -> tuple[str, int]:
    """The queue an enqueue went to: a device's, or the CPU queue of the top-level call."""
    device = data["queue"]
    if data.get("queue_owner") == "device":
        return (device, 0)
    top = gid
    seen = {top}
    while True:
        info = rp.trace.graph_tasks.get(top)
        parent = None if info is None else info.parent
        if parent is None or parent in seen:
            return (device, top)
        seen.add(parent)
        top = parent


def _push(rp: Replayer, small: _Small, event: TraceEvent) -> None:
    gid = event.graph_task
    key = _queue_key(rp, gid, event.data)
    heap = small.queues.setdefault(key, [])
    if event.node_id is None:
        heapq.heappush(heap, special_entry(WAKE_UP_PRIORITY, None))
        return
    task = small.graph_tasks.get(gid)
    depth = task.info.reentrant_depth if task is not None and task.info is not None else 0
    sequence_nr = event.sequence_nr or 0
    entry = QueueEntry(gid, event.node_id, event.node_name or "?", sequence_nr, depth, event.index)
    heapq.heappush(heap, ready_entry(depth, sequence_nr, entry))
    small.waiting[(gid, event.node_id)] = key


def _pop(small: _Small, gid: int, node_id: int | None) -> None:
    """The engine popped ``(gid, node_id)``: pop it from the heap it waits in."""
    wanted = (gid, node_id or 0)
    key = small.waiting.pop(wanted, None)
    heap = None if key is None else small.queues.get(key)
    if not heap:
        return
    # Wake-ups and tasks of ended graph tasks at the top were popped and dropped first.
    while heap and _dropped(small, heap[0]):
        gone = heapq.heappop(heap).task
        if gone is not None:
            small.waiting.pop((gone.graph_task, gone.node_id), None)
    top = heap[0].task if heap else None
    if top is not None and (top.graph_task, top.node_id) == wanted:
        heapq.heappop(heap)
        return
    for item in heap:  # not at the top: see Note [Replaying the ready queues]
        if item.task is not None and (item.task.graph_task, item.task.node_id) == wanted:
            heap.remove(item)
            heapq.heapify(heap)
            return


def _dropped(small: _Small, item: _Queued) -> bool:
    """A wake-up, or a task whose graph task has ended: the engine pops it and runs nothing."""
    if item.task is None:
        return True
    task = small.graph_tasks.get(item.task.graph_task)
    return task is not None and task.status != "running"


def _queues_by_device(small: _Small) -> dict[str, tuple[QueueEntry, ...]]:
    """Each device's waiting tasks in the order the engine will pop them."""
    orders: dict[str, list[list[_Queued]]] = {}
    for (device, _), heap in small.queues.items():
        copy = list(heap)
        order = []
        while copy:
            item = heapq.heappop(copy)
            if not _dropped(small, item):
                order.append(item)
        orders.setdefault(device, []).append(order)
    return {
        device: tuple(item.task for item in heapq.merge(*lists) if item.task is not None)
        for device, lists in orders.items()
    }


class Replayer(Generic[T]):
    """Indexes a trace for :meth:`state_at`; see the module docstring.

    Args:
        trace: the trace to index; :meth:`extend` catches up when it grows.
        checkpoint_every: events between two checkpoints of the small state.
        lazy: index events only as far as :meth:`state_at` is asked to go, so
            that the first steps of a trace of a million events come at once.
    """

    def __init__(
        self, trace: T, checkpoint_every: int = CHECKPOINT_EVERY, *, lazy: bool = False
    ) -> None:
        if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int):
            raise TypeError(f"checkpoint_every must be an integer, got {checkpoint_every!r}")
        if checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be at least 1, got {checkpoint_every}")
        self.trace = trace
        self.checkpoint_every = checkpoint_every
        """Events between two checkpoints."""
        self.node_history: dict[tuple[int, int], tuple[list[int], list[NodeState]]] = {}
        self.task_nodes: dict[int, list[int]] = {}
        self.leaf_history: dict[int, tuple[list[int], list[LeafState]]] = {}
        self.errors: list[TraceEvent] = []
        self.anomalies: list[TraceEvent] = []
        self.deliveries: dict[int, list[Delivery]] = {}
        self.started_by: dict[int, tuple[int, int]] = {}
        self.checkpoints: list[_Small] = [_Small()]  # checkpoint i is the state at step i * K
        self._small = _Small()
        self._captures: dict[int, bool] = {}
        self._applied = 0
        self._extending = threading.Lock()  # one thread indexes at a time (a viewer's, ahead)
        if not lazy:
            self.extend()

    @property
    def applied(self) -> int:
        """How many events are indexed."""
        return self._applied

    def extend(self, until: int | None = None) -> None:
        """Index the events recorded since the last call (live traces grow).

        With ``until``, only as far as the first checkpoint at or after that step.
        States before the indexed end never change when more is indexed: each
        reads its own step's entries of the histories. Two threads may call it
        (a viewer indexes ahead in one while it seeks in the other): one indexes
        at a time.
        """
        events = self.trace.events
        end = len(events)
        if until is not None:
            every = self.checkpoint_every
            end = min(end, -(-until // every) * every)
        with self._extending, paused_gc():
            while self._applied < end:
                _apply(self, self._small, events[self._applied], record=True)
                self._applied += 1
                if self._applied % self.checkpoint_every == 0:
                    self.checkpoints.append(self._small.copy())

    def state_at(self, step: int) -> ExecutionState[T]:
        """The state after ``step`` events (see :meth:`Trace.state_at`)."""
        total = len(self.trace.events)
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be an integer, got {type(step).__name__}")
        if not 0 <= step <= total:
            raise IndexError(f"step {step} is outside this trace (0 .. {total})")
        if self._applied < step:
            self.extend(step)
        every = self.checkpoint_every
        base = min(step // every, len(self.checkpoints) - 1)
        small = self.checkpoints[base].copy()
        for event in self.trace.events[base * every : step]:
            _apply(self, small, event, record=False)
        return ExecutionState(self, step, small)

    def captures(self, gid: int, info: GraphTaskInfo | None) -> bool:
        """Whether graph task ``gid`` is a ``grad()`` call, whose results are captured.

        ``backward(inputs=...)`` has outputs too but accumulates into ``.grad``;
        the engine still reports a list of ``None`` as its captured values.
        """
        if info is None:
            return True  # recording began after it started: trust the engine's report
        known = self._captures.get(gid)
        if known is None:
            known = self._captures[gid] = any(n.captures for n in info.nodes.values())
        return known

    # -- histories -------------------------------------------------------------------
    def current(self, gid: int, node_id: int) -> NodeState | None:
        history = self.node_history.get((gid, node_id))
        return history[1][-1] if history else None

    def set_node(self, index: int, state: NodeState) -> None:
        key = (state.graph_task, state.info.id)
        history = self.node_history.get(key)
        if history is None:
            history = self.node_history[key] = ([], [])
            self.task_nodes.setdefault(state.graph_task, []).append(state.info.id)
        steps, states = history
        # The state after event ``index`` holds from step index + 1 on.
        if steps and steps[-1] == index + 1:
            states[-1] = state
        else:
            steps.append(index + 1)
            states.append(state)

    def set_leaf(self, index: int, leaf: LeafState) -> None:
        steps, states = self.leaf_history.setdefault(leaf.node_id, ([], []))
        if steps and steps[-1] == index + 1:
            states[-1] = leaf
        else:
            steps.append(index + 1)
            states.append(leaf)


def _apply(rp: Replayer, small: _Small, event: TraceEvent, record: bool) -> None:
    """Apply one event to ``small``; with ``record``, also to the node histories."""
    kind = event.kind
    gid = event.graph_task
    data = event.data
    thread = small.threads.get(event.thread) or ThreadState(event.thread, event.device)
    stack = thread.stack
    if kind == "graph_task_start":
        info = rp.trace.graph_tasks.get(gid)
        small.graph_tasks[gid] = GraphTaskState(info)
        running = thread.running
        stack = (*stack, Frame(gid, None, None))
        if record and info is not None:
            _start_graph_task(rp, event, info)
        if record and running is not None and running.node_id is not None:
            rp.started_by[gid] = (running.graph_task, running.node_id)
    elif kind == "node_start":
        _pop(small, gid, event.node_id)
        stack = (*stack, Frame(gid, event.node_id, event.node_name))
    elif kind == "hook":
        # Tensor pre-hooks run after the task is popped and before node_start.
        _pop(small, gid, event.node_id)
    elif kind == "node_end":
        stack = _pop_node(stack, gid, event.node_id)
    elif kind == "enqueue":
        _push(rp, small, event)
    elif kind == "capture":
        _pop(small, gid, event.node_id)
        task = small.graph_tasks.get(gid) or GraphTaskState(None)
        captured = {**task.captured, data["output_index"]: data["grad"]}
        small.graph_tasks[gid] = replace(task, captured=captured)
    elif kind == "graph_task_end":
        task = small.graph_tasks.get(gid) or GraphTaskState(None)
        error = None if data["status"] == "ok" else f"{data['exc_type']}: {data['message']}"
        results = task.captured
        if rp.captures(gid, task.info):
            results = dict(enumerate(data["captured"])) or results
        small.graph_tasks[gid] = replace(task, status=data["status"], error=error, captured=results)
        # Its tasks still queued stay in the heaps until popped (Note [Replaying the ready queues]).
        small.threads.update(dict(_close_task_frames(small.threads, gid)))
        thread = small.threads.get(event.thread) or thread
        stack = thread.stack
    elif kind == "dependency_decrement" and record and event.node_id is not None:
        delivery = Delivery(data["from_node"], event.node_id, data["input_nr"], event.index)
        rp.deliveries.setdefault(gid, []).append(delivery)
    elif kind == "reentrant_exit":
        stack = _pop_task(stack, gid)
    elif kind == "error":
        stack = _pop_node(stack, gid, event.node_id)
        small.errors += 1
        if record:
            rp.errors.append(event)
    if kind == "anomaly":
        small.anomalies += 1
        if record:
            rp.anomalies.append(event)
    small.threads[event.thread] = ThreadState(event.thread, event.device, stack, event.index)
    if record and event.node_id is not None and gid:  # gid 0: a forward anomaly, no graph task
        _node_event(rp, event)


def _pop_node(stack: tuple[Frame, ...], gid: int, node_id: int | None) -> tuple[Frame, ...]:
    if (
        node_id is not None
        and stack
        and stack[-1].node_id == node_id
        and stack[-1].graph_task == gid
    ):
        return stack[:-1]
    return stack


def _pop_task(stack: tuple[Frame, ...], gid: int) -> tuple[Frame, ...]:
    for i in range(len(stack) - 1, -1, -1):
        if stack[i].graph_task == gid and stack[i].node_id is None:
            return stack[:i]
    return stack


def _close_task_frames(
    threads: Mapping[str, ThreadState], gid: int
) -> Iterator[tuple[str, ThreadState]]:
    """At graph_task_end: the task's node frames are gone everywhere (errors unwind them),
    and so is the owner's frame of a top-level task (the owner returns to user code)."""
    for name, state in threads.items():
        stack = state.stack
        frames = tuple(
            f for i, f in enumerate(stack) if f.graph_task != gid or (f.node_id is None and i > 0)
        )
        if frames != stack:
            yield name, replace(state, stack=frames)


def _start_graph_task(rp: Replayer, event: TraceEvent, info: GraphTaskInfo) -> None:
    index = event.index
    # With one root the engine seeds the root's input buffer itself (no accumulate event).
    seeded: dict[int, TensorSummary | None] = {}
    if len(info.roots) == 1 and event.data["root_grads"]:
        seeded[info.roots[0][2]] = event.data["root_grads"][0]
    for node in info.nodes.values():
        status = NodeStatus.WAITING if node.status == "needed" else NodeStatus.PRUNED
        slots: list[TensorSummary | None] = [None] * len(node.inputs)
        counts = [0] * len(node.inputs)
        if node.id == info.root:
            for slot, grad in seeded.items():
                if slot < len(slots) and grad is not None:
                    slots[slot], counts[slot] = grad, 1
        rp.set_node(
            index,
            NodeState(node, info.id, status, node.dependencies, tuple(slots), tuple(counts)),
        )
        if node.leaf is not None:
            rp.set_leaf(index, LeafState(node.id, node.leaf.name, node.leaf.grad))


def _unknown_node(event: TraceEvent) -> NodeState:
    """A node of a graph task whose start was not recorded."""
    info = NodeInfo(
        event.node_id or 0,
        event.node_name or "?",
        event.sequence_nr or 0,
        event.topological_nr or 0,
        event.device,
        (),
        (),
        0,
        "needed",
    )
    return NodeState(info, event.graph_task, NodeStatus.WAITING, 0, ())


def _node_event(rp: Replayer, event: TraceEvent) -> None:
    """Update the node named by ``event`` (kind by kind)."""
    assert event.node_id is not None
    gid = event.graph_task
    kind = event.kind
    data = event.data
    state = rp.current(gid, event.node_id)
    if state is None:
        if kind == "graph_task_start":
            return
        state = _unknown_node(event)
    new = _NODE_UPDATES.get(kind, _unchanged)(state, event, data)
    if new is not state:
        rp.set_node(event.index, new)
    if kind == "accumulate" and data["target"] == "leaf":
        rp.set_leaf(event.index, LeafState(event.node_id, data.get("leaf_name"), data["grad"]))


def _unchanged(state: NodeState, event: TraceEvent, data: Mapping[str, Any]) -> NodeState:
    return state


def _on_decrement(state: NodeState, event: TraceEvent, data: Mapping[str, Any]) -> NodeState:
    remaining = data["remaining"]
    status = state.status
    if status in (NodeStatus.WAITING, NodeStatus.PARTIAL):
        status = NodeStatus.PARTIAL if remaining else state.status
    return replace(state, remaining=remaining, status=status)


def _on_accumulate(state: NodeState, event: TraceEvent, data: Mapping[str, Any]) -> NodeState:
    slot = data.get("slot")
    if data["target"] != "buffer" or slot is None:
        return state
    slots = list(state.slots) or [None] * (slot + 1)
    counts = list(state.contributions) or [0] * len(slots)
    if slot >= len(slots):
        return state
    slots[slot] = data.get("total", data["grad"])
    counts[slot] += 1
    status = state.status
    if status is NodeStatus.WAITING:
        status = NodeStatus.PARTIAL
    return replace(state, slots=tuple(slots), contributions=tuple(counts), status=status)


def _on_enqueue(state: NodeState, event: TraceEvent, data: Mapping[str, Any]) -> NodeState:
    return replace(state, status=NodeStatus.QUEUED)


def _on_start(state: NodeState, event: TraceEvent, data: Mapping[str, Any]) -> NodeState:
    return replace(state, status=NodeStatus.RUNNING, inputs=data["inputs"], thread=event.thread)


def _on_end(state: NodeState, event: TraceEvent, data: Mapping[str, Any]) -> NodeState:
    return replace(state, status=NodeStatus.DONE, outputs=data["outputs"])


def _on_capture(state: NodeState, event: TraceEvent, data: Mapping[str, Any]) -> NodeState:
    # The task was popped; a node kept only for its capture is done, a needed one runs next.
    status = NodeStatus.DONE if state.info.status == "pruned" else NodeStatus.RUNNING
    return replace(
        state,
        captured=(*state.captured, data["output_index"]),
        status=status,
        thread=event.thread,
    )


def _on_hook(state: NodeState, event: TraceEvent, data: Mapping[str, Any]) -> NodeState:
    slot, after = data.get("slot"), data.get("after")
    if after is not None and slot is not None and slot < len(state.slots):
        # A tensor hook's result is what the buffer slot hands the node.
        slots = list(state.slots)
        slots[slot] = after
        state = replace(state, slots=tuple(slots))
    if state.status is NodeStatus.QUEUED:  # popped: its tensor pre-hooks run before node_start
        return replace(
            state, hooks_run=state.hooks_run + 1, status=NodeStatus.RUNNING, thread=event.thread
        )
    return replace(state, hooks_run=state.hooks_run + 1)


def _on_release(state: NodeState, event: TraceEvent, data: Mapping[str, Any]) -> NodeState:
    return replace(state, released=True)


def _on_error(state: NodeState, event: TraceEvent, data: Mapping[str, Any]) -> NodeState:
    return replace(state, status=NodeStatus.FAILED, error=f"{data['exc_type']}: {data['message']}")


def _on_anomaly(state: NodeState, event: TraceEvent, data: Mapping[str, Any]) -> NodeState:
    if not data.get("raised", True):  # collect mode: reported, and the node went on
        return state
    return replace(state, status=NodeStatus.FAILED)


_NODE_UPDATES = {
    "dependency_decrement": _on_decrement,
    "accumulate": _on_accumulate,
    "enqueue": _on_enqueue,
    "node_start": _on_start,
    "node_end": _on_end,
    "capture": _on_capture,
    "hook": _on_hook,
    "release_variables": _on_release,
    "error": _on_error,
    "anomaly": _on_anomaly,
}
