"""How a graph task's tasks are counted, and how it ends: its future completed once.

Plain functions of a graph task: the engine loop (:mod:`engine.engine`)
calls them with the graph task and, where an owner must be woken, the
engine's :class:`~engine.workers.WorkerThreads` (whose queues the owner
sleeps on).

Note [Owner wake-up]
~~~~~~~~~~~~~~~~~~~~
The thread that runs the last task of a graph task may not be its owner
(the thread that called backward and waits in thread_main). The owner may
be asleep in pop() on an empty queue, so the finishing thread pushes an
empty task to the owner's queue; popping it, the owner sees the future
completed and returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine import _context, anomaly, devices
from engine.emitting import emit, emit_enqueue, emit_graph_task_end
from engine.events import HUB
from engine.graph_task import wake_up_task

if TYPE_CHECKING:
    from engine.graph import Node
    from engine.graph_task import ExactNodeTask, GraphTask, NodeTask, ReadyQueue
    from engine.workers import WorkerThreads

__all__ = [
    "DONE",
    "complete",
    "mark_as_completed",
    "on_purpose",
    "push",
    "task_done",
    "thread_on_exception",
]

TLS = _context.TLS

DONE: Any = object()
"""What ``pass_outputs`` and :func:`task_done` return after a graph task's last task."""


def push(
    queue: ReadyQueue, task: NodeTask | ExactNodeTask, reason: str, counted: bool = False
) -> None:
    """Count ``task`` in its graph task (unless ``counted``), emit ``enqueue``, push it.

    Routing (``pass_outputs``) counts its tasks, and marks the hand-over to
    another thread, itself (Note [Graph tasks one thread runs]).
    """
    base = task.graph_task
    assert base is not None
    if not counted:
        if queue is not TLS.local_ready_queue:
            base.shared = True  # See Note [Graph tasks one thread runs]
        with base.lock:
            base.outstanding_tasks += 1
    if HUB.active:
        emit_enqueue(queue, task, reason)
    queue.push(task)


def task_done(graph_task: GraphTask) -> Any:
    """Count one task of ``graph_task`` as finished; ``DONE`` if it was the last."""
    with graph_task.lock:
        graph_task.outstanding_tasks -= 1
        return DONE if graph_task.outstanding_tasks == 0 else None


def complete(graph_task: GraphTask, workers: WorkerThreads) -> None:
    """The last task finished: complete the future and wake the owner if elsewhere."""
    try:
        mark_as_completed(graph_task)
    finally:
        # A listener may raise at graph_task_end (a debugger cancelling): the graph task
        # is complete all the same, and an owner asleep in pop() would never wake.
        if TLS.worker_device is not graph_task.owner:
            # See Note [Owner wake-up]
            owner_queue = workers.ready_queue(graph_task.cpu_ready_queue, graph_task.owner)
            push(owner_queue, wake_up_task(graph_task), "wake-up")


def mark_as_completed(graph_task: GraphTask) -> None:
    """Complete the future once: run post-processing and wake anyone waiting."""
    with graph_task.lock:
        if graph_task.future_completed:
            return
        try:
            for device in graph_task.leaf_devices:
                devices.synchronize(device)
        except BaseException as exc:  # noqa: BLE001
            graph_task.error = exc
            graph_task.has_error = True
        graph_task.future_completed = True
    try:
        emit_graph_task_end(graph_task)
    finally:
        graph_task.done.set()


# Note [No anomaly warning for a listener's raise]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Anomaly mode warns "Error detected in XBackward0" with the node's forward
# traceback when the node fails: the forward call is where to look for the
# bug. An exception a listener raises into the engine on purpose (one marked
# ``_engine_propagate``: a debugger cancelling the backward as the user quits,
# a NaN check stopping the program) is no fault of the node it happened to be
# raised at, and the warning would point the user at a healthy forward line
# after the debugger closed. So it fails the graph task without the warning.
# Only the error path looks at the mark.


def on_purpose(exc: BaseException) -> bool:
    """Whether a listener raised ``exc`` into the engine on purpose (Note [No anomaly
    warning for a listener's raise])."""
    return bool(getattr(exc, "_engine_propagate", False))


def thread_on_exception(
    graph_task: GraphTask, fn: Node | None, exc: BaseException, workers: WorkerThreads
) -> None:
    """Record the first error of ``graph_task`` and complete its future with it."""
    with graph_task.lock:
        first = not graph_task.has_error
        graph_task.has_error = True
        completes = first and not graph_task.future_completed
        if completes:
            graph_task.error = exc
            graph_task.future_completed = True
    try:
        if HUB.active:
            traceback = fn.metadata.get("traceback_") if fn is not None and fn._metadata else None
            emit(
                "error",
                graph_task,
                fn,
                exc_type=type(exc).__name__,
                message=str(exc),
                first=first,
                traceback=traceback,
            )
        if first and anomaly.STATE.enabled and fn is not None and not on_purpose(exc):
            anomaly.warn_forward_traceback(fn)
        if completes:
            emit_graph_task_end(graph_task)
    except BaseException:  # noqa: BLE001
        pass  # the graph task already carries its error; a listener cancelling changes nothing
    finally:
        if completes:
            graph_task.done.set()
            if TLS.worker_device is not graph_task.owner:
                # See Note [Owner wake-up]
                owner_queue = workers.ready_queue(graph_task.cpu_ready_queue, graph_task.owner)
                with graph_task.lock:
                    graph_task.outstanding_tasks += 1
                owner_queue.push(wake_up_task(graph_task))
