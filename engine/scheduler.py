"""The scheduler of a backward call, written once: which nodes run, when, and in what order.

PyTorch's engine decides four things before and between node runs (see
``seeds/``): how many edges arrive at each node (``compute_dependencies``),
which nodes an ``inputs=`` / ``grad()`` call needs (``init_to_execute``),
what a gradient arriving along an edge does to its node's count and input
buffer, and the order of the ready queue. Each is one small function here,
over a minimal node protocol (:class:`SchedulerNode`), with its note.

Three things run them: the engine (:mod:`engine.engine`), on its own nodes;
the PyTorch bridge (``autograd_viz.sources.pytorch``), which derives the
events PyTorch's engine does not show by running these functions over an
adapter of PyTorch's graph; and replay (``autograd_viz.trace.replay``),
which rebuilds the ready queues of a trace with :func:`ready_entry`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol, TypeVar

__all__ = [
    "ONE_AND_A_NUMBER",
    "SHUTDOWN_PRIORITY",
    "UINT64_MAX",
    "WAKE_UP_PRIORITY",
    "Edge",
    "EdgesInSlots",
    "ExactQueueEntry",
    "ExecInfo",
    "QueueEntry",
    "SchedulerEdge",
    "SchedulerNode",
    "arrive",
    "compute_dependencies",
    "init_to_execute",
    "prioritized",
    "ready_entry",
    "should_execute",
    "special_entry",
    "store_edges",
]

UINT64_MAX = 2**64 - 1
"""PyTorch's sequence number of ``AccumulateGrad``: it runs before any other node."""


class SchedulerEdge(Protocol):
    """Where a gradient goes: input ``input_nr`` of node ``function``."""

    @property
    def function(self) -> Any: ...

    @property
    def input_nr(self) -> int: ...


class SchedulerNode(Protocol):
    """What the scheduler reads of a node: its edges and its two numbers.

    The engine's ``Node`` has these; the PyTorch bridge's ``TorchNode`` gives
    them to PyTorch's nodes.
    """

    @property
    def _next_edges(self) -> Sequence[SchedulerEdge | None]: ...

    @property
    def topological_nr(self) -> int: ...

    @property
    def sequence_nr(self) -> int: ...

    @property
    def num_inputs(self) -> int: ...


N = TypeVar("N", bound=SchedulerNode)


class Edge:
    """Where a gradient goes: input ``input_nr`` of node ``function``.

    A slotted class rather than a NamedTuple: edges are made for every op and
    a NamedTuple's Python-level ``__new__`` costs several times more.
    """

    __slots__ = ("function", "input_nr")

    function: Any
    """The node that receives the gradient."""
    input_nr: int
    """Which of that node's inputs (which forward output) it is."""

    def __init__(self, function: Any, input_nr: int) -> None:
        self.function = function
        self.input_nr = input_nr

    def __iter__(self) -> Iterator[Any]:
        yield self.function
        yield self.input_nr

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Edge)
            and other.function is self.function
            and other.input_nr == self.input_nr
        )

    def __hash__(self) -> int:
        return hash((id(self.function), self.input_nr))

    def __repr__(self) -> str:
        return f"Edge(function={self.function!r}, input_nr={self.input_nr})"


# Note [Edges in the node's own slots]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Python's cyclic collector walks every live object that can hold
# references, and a graph being built is mostly nodes: a tuple of edges per
# node was a second object for it (a tuple holding a node stays tracked).
# Nearly every node has one or two edges, so the engine's nodes keep them in
# their own slots instead (EdgesInSlots): ``_num_edges`` says how many,
# ``_edge0`` and ``_edge1`` hold the first two, and only a node of three or
# more keeps them all, as the tuple ``_edges``. A slot past ``_num_edges`` is
# never read: the ops that make nodes leave it unset (a store fewer),
# store_edges sets it to None. A chain or an add tree is then one object per
# node for the collector. ``_next_edges`` gives the edges as a tuple (a new
# one for up to two edges) to every reader off the hot paths; the hot loops
# (compute_dependencies here, the engine's plain path) read the slots.
# An edge to input 0 of a node is the node itself (Note [A node is its own
# first edge] in engine.graph), any other an Edge.

# Note [A number's edge in the count]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A node of a tensor and a number (``x * 2.0``, ``y + 0.0``) has two edges,
# as in PyTorch, the second None: half of a chain of scalar steps. Its
# ``_num_edges`` is ONE_AND_A_NUMBER (-2) and only ``_edge0`` is kept, so
# the hot loops know it routes one gradient from the count alone: reading
# ``_edge1`` as well cost them a generic attribute lookup each (a slot read
# at a site that sees node classes alternate finds no specialized path in
# CPython, about 150 instructions), and the op one store. Every other
# reader goes through ``_next_edges`` and ``num_outputs``, which give the
# two edges and 2. A node whose second edge is None from a tensor that does
# not require grad may still hold 2 and ``_edge1 = None``: the hot loops
# take it as two edges, with the same result.


class EdgesInSlots:
    """A node that keeps its edges in its own slots (Note [Edges in the node's own slots])."""

    __slots__ = ("_edge0", "_edge1", "_edges", "_num_edges")

    _num_edges: int
    _edge0: Any
    _edge1: Any
    _edges: tuple[Any, ...] | None

    @property
    def _next_edges(self) -> tuple[Any, ...]:
        """The edges, one per forward input (``None`` where no gradient goes)."""
        n = self._num_edges
        if n == 2:
            return (self._edge0, self._edge1)
        if n == 1:
            return (self._edge0,)
        if n == ONE_AND_A_NUMBER:
            return (self._edge0, None)
        return self._edges if n else ()  # type: ignore[return-value]  # set past two

    @_next_edges.setter
    def _next_edges(self, edges: Sequence[Any]) -> None:
        store_edges(self, tuple(edges))


ONE_AND_A_NUMBER = -2
"""``_num_edges`` of a node of two edges whose second is None, kept in ``_edge0`` alone
(Note [A number's edge in the count])."""


def store_edges(node: EdgesInSlots, edges: tuple[Any, ...]) -> None:
    """Keep ``edges`` in ``node``'s slots (Note [Edges in the node's own slots])."""
    n = len(edges)
    # None where unused: a node connected again must not keep its old edges' nodes alive.
    node._edge0 = edges[0] if n else None
    node._edge1 = edges[1] if n > 1 else None
    node._edges = edges if n > 2 else None
    node._num_edges = ONE_AND_A_NUMBER if n == 2 and edges[1] is None else n


# Note [Dependency counting]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# A node runs when every edge of the graph task that arrives at it has
# delivered (HIPS autograd's topological sort, done with threads). So
# before the first node runs, the engine counts the edges arriving at each
# node reachable from the root, walking iteratively (a million-node chain
# must not reach the recursion limit). A node whose topological number is
# below ``min_topo_nr`` (the lowest among ``grad()``'s inputs) cannot lead to
# any of them: it is counted but not walked (PyTorch's pruning). The counts
# double as the set of nodes seen: in a DAG no edge arrives at the root.
# The engine's nodes are read through their slots, without the tuple and
# the property (Note [Edges in the node's own slots]), and a node of one or
# two edges without any tuple or iterator: this walk is a sixth of a
# chain's backward (2,900 instructions a node of 15,000, measured by
# running it twice). A graph is all engine nodes or all adapters.


def compute_dependencies(root: N, min_topo_nr: int = 0) -> dict[N, int]:
    """The number of edges arriving at each node reachable from ``root``.

    See Note [Dependency counting].
    """
    dependencies: dict[Any, int] = {}
    stack = [root]
    in_slots = isinstance(root, EdgesInSlots)
    edges: Sequence[Any]
    nxt: Any
    while stack:
        fn = stack.pop()
        while True:  # along a chain without the stack: Note [Following a chain]
            if min_topo_nr and fn.topological_nr < min_topo_nr:  # no node is below 0
                break
            if in_slots:
                n = fn._num_edges  # type: ignore[attr-defined]
                # One edge, or one and a number's (Note [A number's edge in the count]).
                if n == 1 or n < 0 or (n == 2 and fn._edge1 is None):  # type: ignore[attr-defined]
                    # The usual node: no tuple, no iterator.
                    edge = fn._edge0  # type: ignore[attr-defined]
                    if edge is None:
                        break
                    # An engine node as an edge is its own input 0 (Note [A node is its own
                    # first edge]).
                    nxt = edge if type(edge) is not Edge else edge.function
                    count = dependencies.get(nxt)
                    if count is None:
                        dependencies[nxt] = 1
                        fn = nxt
                        continue
                    dependencies[nxt] = count + 1
                    break
                # Two edges, or more (the tuple _edges, set past two), or none.
                edges = (fn._edge0, fn._edge1) if n == 2 else (fn._edges if n else ())  # type: ignore[attr-defined]
            else:
                edges = fn._next_edges
            for edge in edges:
                if edge is None:
                    continue
                nxt = edge if in_slots and type(edge) is not Edge else edge.function
                count = dependencies.get(nxt)
                if count is None:
                    dependencies[nxt] = 1
                    stack.append(nxt)
                else:
                    dependencies[nxt] = count + 1
            break
    return dependencies


# Note [Following a chain]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# A node of one edge that meets its next node for the first time would push
# it and pop it straight back: the stack is last in, first out. The walk
# goes on to it directly instead, which visits the nodes, and fills the
# counts, in the very same order, without a push, a pop and a loop test a
# node of a chain.


class ExecInfo:
    """Per-node pruning state for ``inputs=`` and ``grad()`` (GraphTask::ExecInfo)."""

    __slots__ = ("captures", "needed")

    def __init__(self) -> None:
        self.needed = False
        """Whether the node runs."""
        self.captures: list[tuple[int, int]] | None = None
        """``(input slot, output index)`` of each gradient ``grad()`` takes from its buffer."""

    def should_execute(self) -> bool:
        """Whether the node is popped at all: it runs, or a gradient is captured there."""
        return self.needed or self.captures is not None


# Note [Pruning for inputs]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# ``backward(inputs=)`` and ``grad()`` run only what leads to their inputs:
# a node runs iff some path from it reaches an input's node. An iterative
# depth-first walk from the root (GraphTask::init_to_execute) marks a node
# needed when a child it meets, already seen or just finished, should
# execute. With ``backward(inputs=)`` the input nodes themselves run (their
# AccumulateGrad); with ``grad()`` the gradient arriving at the input's slot
# is captured instead and the node does not run. As in PyTorch 2.x the root
# is needed only if something below it is (or it is an input itself):
# ``grad(x, x)`` captures x's gradient without running its AccumulateGrad,
# and a root from which no input is reachable is popped and skipped.


def init_to_execute(
    root: N, outputs: Sequence[SchedulerEdge], accumulate_grad: bool, min_topo_nr: int
) -> dict[N, ExecInfo]:
    """Which nodes run, and which slots are captured, for ``outputs`` (Note [Pruning for inputs]).

    Args:
        root: where the call starts (its GraphRoot, or its one root node).
        outputs: the edges of the call's ``inputs``, in order.
        accumulate_grad: ``backward(inputs=)`` (the input nodes run) rather
            than ``grad()`` (their slots are captured).
        min_topo_nr: the lowest topological number among the outputs' nodes.

    Returns:
        The ``exec_info`` of every node the walk reached.
    """
    exec_info: dict[Any, ExecInfo] = {}
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
    exec_info.setdefault(root, ExecInfo())

    def mark_needed(fn: Any) -> None:
        info = exec_info.get(fn)
        if info is None:
            info = exec_info[fn] = ExecInfo()
        info.needed = True

    seen: set[Any] = set()
    stack: list[tuple[Any, Any]] = [(root, iter(root._next_edges))]
    while stack:
        fn, children = stack[-1]
        child: Any = None
        for edge in children:
            if edge is None:
                continue
            if edge.function in seen:
                if should_execute(exec_info, edge.function):
                    mark_needed(fn)
                continue
            seen.add(edge.function)
            if edge.function.topological_nr < min_topo_nr:
                continue
            child = edge.function
            break
        if child is not None:
            stack.append((child, iter(child._next_edges)))
        else:
            stack.pop()
            if should_execute(exec_info, fn) and stack:
                mark_needed(stack[-1][0])
    return exec_info


def should_execute(exec_info: dict[Any, ExecInfo], fn: Any) -> bool:
    """Whether a pruned graph task pops ``fn`` (ExecInfo::should_execute)."""
    info = exec_info.get(fn)
    return info is not None and info.should_execute()


# Note [Arriving at a node]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# Each output of a finished node travels along its edge to the next node
# (Engine::evaluate_function, after the call): the next node's dependency
# count goes down by one, and the gradient goes into the next node's input
# buffer, made on the first arrival and kept in ``not_ready`` until the
# count reaches zero, when the buffer leaves ``not_ready`` and the node is
# ready to queue. In a pruned graph task (``exec_info`` not empty) a node
# that should not execute gets no buffer: the gradient is dropped there
# (a ``skip``). What the caller does with the buffer (sum a gradient into
# it, follow it by copy) and where it queues a ready node is its own.


def arrive(
    dependencies: dict[Any, int],
    not_ready: dict[Any, list[Any]],
    exec_info: dict[Any, ExecInfo],
    node: Any,
    num_inputs: int,
) -> tuple[int, list[Any] | None]:
    """An edge delivers to ``node``: its remaining count, and its buffer (``None``: skipped).

    See Note [Arriving at a node]. Raises ``KeyError`` if no edge of the
    graph task was counted as arriving at ``node``.
    """
    count = dependencies[node] - 1
    if count:
        dependencies[node] = count
        buffer = not_ready.get(node)
    else:
        del dependencies[node]
        buffer = not_ready.pop(node, None)
    if buffer is None:
        if exec_info and not should_execute(exec_info, node):
            return count, None
        buffer = [None] * num_inputs
        if count:
            not_ready[node] = buffer
    return count, buffer


# Note [Ready-queue order]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# PyTorch's CompareNodeTaskTime: shutdown tasks first, then wake-up (empty)
# tasks, then the deeper reentrant depth, then the higher sequence_nr, so
# that AccumulateGrad (sequence_nr 2**64-1) runs as soon as it is ready and
# a node runs before the nodes made before it in the forward. Ties stay in
# heap order (Note [Ties in heap order]). All four criteria fold into one
# number, a ``float`` or ``int`` subclass that carries its task: a heap of
# them compares in C, and equal priorities compare equal.
#
# Note [Ties in heap order]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# PyTorch's ready queue is a std::priority_queue, which breaks no ties:
# tasks of equal priority (AccumulateGrads all have sequence_nr 2**64-1)
# come out in whatever order the heap's sift moves leave them. Five leaves
# ready at once run as 1,3,5,2,4; eight as 1,3,7,6,8,5,2,4. heapq's push and
# pop are the same algorithms (libstdc++'s push_heap and pop_heap: on a tie
# the hole moves to the right child), so a heap of entries that compare
# equal on ties runs the same order, provided every push and pop PyTorch
# makes is made too: a shortcut that hands a task back without its push and
# pop (as heappushpop does) leaves the heap's ties where PyTorch's moves
# would not. Only an empty queue may be skipped: a push and a pop there
# leave it empty either way.

SHUTDOWN_PRIORITY = -(2.0**200)
"""The priority of a task that stops a device thread: before everything."""
WAKE_UP_PRIORITY = -(2.0**199)
"""The priority of an empty task that wakes a graph task's owner: before every node."""
_EXACT_FLOAT = 2**53
"""Sequence numbers below this are exact as floats (as is AccumulateGrad's, 2**64 - 1, alone)."""


class QueueEntry(float):
    """A task's priority as a number (smaller runs first), carrying the task as ``.task``.

    A ``float`` subclass that adds no comparison: ``heapq`` compares entries
    with ``float``'s own C code, and two tasks of the same priority compare
    equal (Note [Ties in heap order]). A float with a slot is the cheapest
    such object to make; priorities a float cannot hold exactly are
    :class:`ExactQueueEntry` ints, which floats compare with exactly.
    """

    __slots__ = ("task",)
    task: Any


class ExactQueueEntry(int):
    """A :class:`QueueEntry` for a reentrant task or an unusual sequence_nr, as an exact int."""

    task: Any


E = TypeVar("E", bound=float)
X = TypeVar("X", bound=int)


def prioritized(depth: int, sequence_nr: int, kind: type[E], exact_kind: type[X]) -> E | X:
    """A new number whose value is a task's priority (Note [Ready-queue order]).

    An instance of ``kind`` (a ``float`` subclass) where a float holds the
    priority exactly, else of ``exact_kind`` (an ``int`` subclass); the
    caller hangs its task on it. The engine's tasks are such numbers
    themselves (``engine.graph_task.NodeTask``); :func:`ready_entry` makes
    one that carries any task.
    """
    if not depth and (sequence_nr < _EXACT_FLOAT or sequence_nr == UINT64_MAX):
        return kind(-sequence_nr)  # 2**64 - 1 rounds to 2**64, above every other nr
    # Deeper reentrant depth first (below -2**64 even at depth 1, past
    # AccumulateGrad's float), then the higher sequence_nr.
    return exact_kind(-((depth << 65) | sequence_nr))


def ready_entry(depth: int, sequence_nr: int, task: Any) -> QueueEntry | ExactQueueEntry:
    """The queue entry of a node's ``task`` (Note [Ready-queue order])."""
    entry = prioritized(depth, sequence_nr, QueueEntry, ExactQueueEntry)
    entry.task = task
    return entry


def special_entry(priority: float, task: Any) -> QueueEntry:
    """The queue entry of a wake-up or shutdown ``task`` (:data:`WAKE_UP_PRIORITY`, ...)."""
    entry = QueueEntry(priority)
    entry.task = task
    return entry
