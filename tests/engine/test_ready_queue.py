"""ReadyQueue: PyTorch's task order, and no task lost between threads."""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from engine.activity import ACTIVITY
from engine.graph_task import _HEAPQ_IS_ATOMIC, SHUTDOWN_TASK, ReadyQueue, node_task, wake_up_task


class _Node:
    def __init__(self, sequence_nr: int) -> None:
        self.sequence_nr = sequence_nr


class _Task:
    def __init__(self, reentrant_depth: int = 0) -> None:
        self.reentrant_depth = reentrant_depth


def _task(graph_task: _Task, node: _Node, inputs: Any) -> Any:
    return node_task(graph_task, node, inputs)  # type: ignore[arg-type]


def _drain(queue: ReadyQueue) -> list[Any]:
    return [queue.pop() for _ in range(len(queue))]


def test_order_is_shutdown_wake_up_depth_then_sequence() -> None:
    queue = ReadyQueue()
    shallow, deep = _Task(0), _Task(2)
    low = _task(shallow, _Node(3), [])
    high = _task(shallow, _Node(9), [])
    middle = _task(shallow, _Node(5), [])
    reentrant = _task(deep, _Node(1), [])
    wake_up = wake_up_task(shallow)  # type: ignore[arg-type]
    accumulate = _task(shallow, _Node(2**64 - 1), [])  # AccumulateGrad's sequence_nr
    for task in (low, middle, high, reentrant, wake_up, accumulate, SHUTDOWN_TASK):
        queue.push(task)
    assert len(queue) == 7
    order = _drain(queue)
    expected = [SHUTDOWN_TASK, wake_up, reentrant, accumulate, high, middle, low]
    assert [id(t) for t in order] == [id(t) for t in expected]
    assert len(queue) == 0


def _heap_order(count: int) -> list[int]:
    """Which of ``count`` equal items a binary heap's pushes and pops give back, in order.

    libstdc++'s push_heap and pop_heap (std::priority_queue), written out: a pushed item rises
    past strictly lower priorities only; a pop moves the hole down to the right child unless
    the left one comes strictly first, then lets the last item rise from there.
    """
    heap: list[int] = []
    for i in range(count):
        heap.append(i)  # all equal: a push never rises
    out = []
    while heap:
        out.append(heap[0])
        last = heap.pop()
        if not heap:
            break
        hole, n = 0, len(heap)
        while 2 * hole + 2 < n:
            hole = 2 * hole + 2  # equal children: the right one
            heap[(hole - 1) // 2] = heap[hole]
        if 2 * hole + 1 < n:  # only a left child
            heap[hole] = heap[2 * hole + 1]
            hole = 2 * hole + 1
        heap[hole] = last
    return out


@pytest.mark.parametrize("count", [5, 8, 100])
def test_same_priority_pops_in_std_priority_queue_order(count: int) -> None:
    queue = ReadyQueue()
    base = _Task()
    for i in range(count):
        queue.push(_task(base, _Node(7), [i]))
    order = [t.inputs[0] for t in _drain(queue)]
    assert order == _heap_order(count)
    if count == 5:
        assert order == [0, 2, 4, 1, 3]
    if count == 8:
        assert order == [0, 2, 6, 5, 7, 4, 1, 3]


def test_push_pop_on_a_tie_pops_the_waiting_task_and_moves_the_ties_as_a_push_and_pop() -> None:
    def run(push_pop: bool) -> list[int]:
        queue = ReadyQueue()
        base = _Task()
        for i in range(4):
            queue.push(_task(base, _Node(7), [i]))
        first = _task(base, _Node(9), [9])
        got = queue.push_pop(first) if push_pop else (queue.push(first), queue.pop())[1]  # type: ignore[func-returns-value]
        return [got.inputs[0]] + [t.inputs[0] for t in _drain(queue)]  # type: ignore[index, union-attr]

    assert run(push_pop=True) == run(push_pop=False)


def test_push_pop_hands_back_a_task_that_comes_first_and_keeps_one_that_does_not() -> None:
    queue = ReadyQueue()
    base = _Task()
    waiting = _task(base, _Node(5), [])
    queue.push(waiting)
    first = _task(base, _Node(9), [])
    assert queue.push_pop(first) is first
    assert len(queue) == 1
    later = _task(base, _Node(2), [])
    assert queue.push_pop(later) is waiting
    assert queue.pop() is later
    assert queue.push_pop(waiting) is waiting  # type: ignore[arg-type]
    tie = _task(base, _Node(2), [])
    queue.push(later)
    assert queue.push_pop(tie) is later
    assert queue.take() is tie
    assert queue.take() is None


class _PreemptedHeap(list):
    """A heap whose ``n``-th emptiness check is followed by another thread's push.

    It stands for the thread switch that lets a push land right after pop()
    found the queue empty and before it went to sleep.
    """

    def __init__(self, at_check: int, push: Any) -> None:
        super().__init__()
        self.checks = 0
        self.at_check = at_check
        self.push = push

    def __len__(self) -> int:
        n = list.__len__(self)
        if n == 0:
            self.checks += 1
            if self.checks == self.at_check:
                pusher = threading.Thread(target=self.push)
                pusher.start()
                pusher.join(10)
        return n  # what the check saw, before the push


@pytest.mark.skipif(not _HEAPQ_IS_ATOMIC, reason="pushes lock when heapq calls are not atomic")
def test_a_push_right_after_pop_saw_an_empty_queue_is_not_missed() -> None:
    # The push lands after pop() looked at the heap under its lock, before it
    # counted itself as waiting: the pusher sees no sleeper and wakes nobody.
    queue = ReadyQueue()
    task = _task(_Task(), _Node(1), [])
    queue.heap = _PreemptedHeap(1, lambda: queue.push(task))
    got: list[Any] = []
    consumer = threading.Thread(target=lambda: got.append(queue.pop()), daemon=True)
    consumer.start()
    consumer.join(10)
    if consumer.is_alive():
        queue.push(SHUTDOWN_TASK)  # let the thread go before failing
        consumer.join(10)
        pytest.fail("pop() slept although a task was pushed")
    assert got == [task]


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads every few bytecodes, so that pushes land inside pop's checks."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.mark.usefixtures("fast_switching")
def test_consumer_that_sleeps_is_woken_for_every_push_from_other_threads() -> None:
    queue = ReadyQueue()
    base = _Task()
    producers, per_producer = 4, 3000
    blocked_before = ACTIVITY.blocked
    received: list[Any] = []

    def consume() -> None:
        while True:
            task = queue.pop()
            if task is SHUTDOWN_TASK:
                return
            received.append(task.inputs)

    def produce(p: int) -> None:
        for i in range(per_producer):
            queue.push(_task(base, _Node(i % 5), (p, i)))

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    threads = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    # The shutdown task comes first in order, so send it only once the rest is taken.
    for _ in range(3000):
        if len(received) == producers * per_producer:
            break
        threading.Event().wait(0.01)
    queue.push(SHUTDOWN_TASK)
    consumer.join(30)
    assert not consumer.is_alive(), "the consumer slept through a push"
    assert sorted(received) == [(p, i) for p in range(producers) for i in range(per_producer)]
    assert ACTIVITY.blocked == blocked_before
    assert not queue.heap


@pytest.mark.usefixtures("fast_switching")
def test_each_push_to_an_empty_queue_reaches_the_sleeping_consumer() -> None:
    # Ping-pong: the consumer empties the queue and goes to sleep before nearly
    # every push, so pushes land at every point of its way into the sleep. A
    # lost wake-up leaves a task in the queue with the consumer asleep.
    queue = ReadyQueue()
    base = _Task()
    taken = threading.Semaphore(0)

    def consume() -> None:
        while queue.pop() is not SHUTDOWN_TASK:
            taken.release()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    for i in range(5000):
        queue.push(_task(base, _Node(1), i))
        assert taken.acquire(timeout=10), f"push {i} did not wake the consumer"
    queue.push(SHUTDOWN_TASK)
    consumer.join(30)
    assert not consumer.is_alive()


@pytest.mark.usefixtures("fast_switching")
def test_two_consumers_share_one_queue_without_losing_or_doubling_a_task() -> None:
    queue = ReadyQueue()
    base = _Task()
    n = 20000
    taken: list[list[Any]] = [[], []]

    def consume(mine: list[Any]) -> None:
        while True:
            task = queue.pop()
            if task is SHUTDOWN_TASK:
                return
            mine.append(task.inputs)

    consumers = [threading.Thread(target=consume, args=(t,), daemon=True) for t in taken]
    for thread in consumers:
        thread.start()
    for i in range(n):
        queue.push(_task(base, _Node(1), i))
    for _ in range(3000):
        if len(taken[0]) + len(taken[1]) == n:
            break
        threading.Event().wait(0.01)
    queue.push(SHUTDOWN_TASK)
    queue.push(SHUTDOWN_TASK)
    for thread in consumers:
        thread.join(30)
        assert not thread.is_alive()
    assert sorted(taken[0] + taken[1]) == list(range(n))


def test_priorities_a_float_cannot_hold_still_order_exactly() -> None:
    # Depth-0 entries are floats; a reentrant task, or a sequence_nr past 2**53, is an exact int.
    queue = ReadyQueue()
    shallow, deep = _Task(0), _Task(1)
    accumulate = _task(shallow, _Node(2**64 - 1), [])
    huge = _task(shallow, _Node(2**64 - 2), [])  # 2**64 - 2 and 2**64 - 1 are the same float
    big = _task(shallow, _Node(2**53 + 1), [])
    small = _task(shallow, _Node(2**53 - 1), [])
    reentrant = _task(deep, _Node(0), [])
    for task in (small, big, huge, accumulate, reentrant):
        queue.push(task)
    order = _drain(queue)
    assert [id(t) for t in order] == [id(t) for t in (reentrant, accumulate, huge, big, small)]


def test_a_queued_task_is_one_object_for_the_collector() -> None:
    # Note [A task is its own queue entry]: no tuple, no separate entry per queued node.
    queue = ReadyQueue()
    base = _Task()
    made: list[tuple[_Node, list[Any]]] = [(_Node(i), []) for i in range(1000)]
    gc.collect()
    before = len(gc.get_objects())
    for node, inputs in made:
        queue.push(_task(base, node, inputs))
    assert len(gc.get_objects()) - before == 1000
    popped = _drain(queue)
    assert [t.fn.sequence_nr for t in popped] == list(range(999, -1, -1))
    assert all(t.graph_task is base and t.inputs is made[t.fn.sequence_nr][1] for t in popped)
