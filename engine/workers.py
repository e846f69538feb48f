"""Engine threads: one worker per non-CPU device, and the pool for deep reentrant backward.

Note [Allocating devices to threads]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The CPU has no worker of its own: the thread that calls backward() runs the
CPU work of its graph task (each graph task has its own CPU queue). Every
other device gets one daemon thread and one ready queue, shared by all graph
tasks, started the first time a gradient is routed to that device.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from engine import _context
from engine.activity import ACTIVITY
from engine.devices import CPU, Device
from engine.graph_task import SHUTDOWN_TASK, GraphTask, ReadyQueue

__all__ = [
    "TLS",
    "WorkerThreads",
]

TLS = _context.TLS

_POOL_SHUTDOWN: Any = object()


class WorkerThreads:
    """The device threads and the reentrant pool of an engine (see the module notes).

    Args:
        thread_main: the engine's loop, which every thread it starts runs:
            ``thread_main(None)`` serves a device's queue until shut down,
            ``thread_main(graph_task)`` runs a pool's graph task to its end.
    """

    def __init__(self, thread_main: Callable[[GraphTask | None], None]) -> None:
        self._thread_main = thread_main
        self._device_queues: dict[Device, ReadyQueue] = {}
        self._device_threads: dict[Device, threading.Thread] = {}
        self._start_lock = threading.Lock()
        self._pool_lock = threading.Condition(threading.Lock())
        self._pool_queue: list[GraphTask] = []
        self._pool_idle = 0
        self._pool_waiting = 0
        self._pool_threads: list[threading.Thread] = []

    def ready_queue(self, cpu_ready_queue: ReadyQueue, device: Device | None) -> ReadyQueue:
        """The CPU queue of the graph task, or the shared queue of ``device``."""
        if device is None or device is CPU:
            return cpu_ready_queue
        queue = self._device_queues.get(device)
        if queue is None:
            queue = self._start_device_thread(device)
        return queue

    def _start_device_thread(self, device: Device) -> ReadyQueue:
        with self._start_lock:
            queue = self._device_queues.get(device)
            if queue is not None:
                return queue
            queue = ReadyQueue(device)
            thread = threading.Thread(
                target=self._device_thread_main,
                args=(device, queue),
                name=f"autograd-{device}",
                daemon=True,
            )
            self._device_threads[device] = thread
            self._device_queues[device] = queue
            thread.start()
            return queue

    def _device_thread_main(self, device: Device, queue: ReadyQueue) -> None:
        TLS.worker_device = device
        TLS.local_ready_queue = queue
        if device.type == "cuda":
            device.xp.cuda.Device(device.index).use()
        ACTIVITY.enter()
        try:
            while True:
                try:
                    self._thread_main(None)
                    return  # a shutdown task
                except BaseException:  # noqa: BLE001
                    # Only a listener cancelling at a step outside a node gets here (errors in
                    # nodes are carried to their graph task); a device thread must keep serving.
                    continue
        finally:
            ACTIVITY.leave()

    def add_thread_pool_task(self, graph_task: GraphTask) -> None:
        """Hand a too-deep reentrant graph task to a pool thread (created when none is idle)."""
        with self._pool_lock:
            create = self._pool_idle <= len(self._pool_queue)
            self._pool_queue.append(graph_task)
            self._wake_pool_waiters(1)
            if create:
                thread = threading.Thread(
                    target=self._pool_thread_main,
                    name=f"autograd-pool-{len(self._pool_threads)}",
                    daemon=True,
                )
                self._pool_threads.append(thread)
                thread.start()
            self._pool_lock.notify()

    def _wake_pool_waiters(self, n: int) -> None:
        # Pool lock held. Sleepers count as running before they wake; see Note [Quiescence].
        n = min(n, self._pool_waiting)
        if n:
            self._pool_waiting -= n
            ACTIVITY.unblock(n)

    def _pool_thread_main(self) -> None:
        ACTIVITY.enter()
        try:
            while True:
                with self._pool_lock:
                    self._pool_idle += 1
                    while not self._pool_queue:
                        self._pool_waiting += 1
                        ACTIVITY.block()
                        self._pool_lock.wait()
                    self._pool_idle -= 1
                    graph_task = self._pool_queue.pop(0)
                if graph_task is _POOL_SHUTDOWN:
                    return
                assert graph_task.owner is not None
                TLS.worker_device = graph_task.owner
                TLS.local_ready_queue = self.ready_queue(
                    graph_task.cpu_ready_queue, graph_task.owner
                )
                TLS.total_depth = graph_task.reentrant_depth
                TLS.current_depth = 0
                try:
                    self._thread_main(graph_task)
                except BaseException:  # noqa: BLE001
                    # As on a device thread: only a listener cancelling at a step outside a
                    # node (graph_task_end) gets here. The graph task is complete and its
                    # owner, waiting on its future, woken; the pool thread keeps serving.
                    continue
        finally:
            ACTIVITY.leave()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every device and pool thread and wait for them (tests, clean exit).

        The engine restarts threads on demand afterwards.
        """
        with self._start_lock:
            threads = list(self._device_threads.values())
            for queue in self._device_queues.values():
                queue.push(SHUTDOWN_TASK)
            self._device_queues.clear()
            self._device_threads.clear()
        with self._pool_lock:
            pool = list(self._pool_threads)
            self._pool_queue.extend([_POOL_SHUTDOWN] * len(pool))
            self._pool_threads.clear()
            self._wake_pool_waiters(self._pool_waiting)
            self._pool_lock.notify_all()
        for thread in threads + pool:
            thread.join(timeout)

    def worker_threads(self) -> list[threading.Thread]:
        """The live device and pool threads."""
        return [t for t in [*self._device_threads.values(), *self._pool_threads] if t.is_alive()]
