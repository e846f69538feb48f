"""Building the engine's events: tensor summaries, and one call per kind of event.

The engine loop calls these only after checking ``HUB.active`` (Note [Free
when nobody listens] in :mod:`engine.events`), so none of this costs anything
while nobody listens. Events are emitted on the engine thread where the step
happens; ``TLS.worker_device`` names its device.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine import _context
from engine.devices import CPU
from engine.events import HUB, LazySummary

if TYPE_CHECKING:
    from engine.graph import Edge, Node
    from engine.graph_task import ExactNodeTask, GraphTask, NodeTask, ReadyQueue
    from engine.tensor import Tensor

__all__ = [
    "NOT_NEEDED",
    "TLS",
    "accumulate_payload",
    "any_defined",
    "decrement_payload",
    "emit",
    "emit_enqueue",
    "emit_graph_task_end",
    "emit_graph_task_start",
    "emit_hook",
    "emit_reentrant_enter",
    "emit_reentrant_exit",
    "skip_payload",
    "summaries_of",
    "summary_of",
]

TLS = _context.TLS


def summary_of(t: Tensor | None) -> LazySummary | None:
    return None if t is None else LazySummary(t.data, t.device._str)


def summaries_of(tensors: Sequence[Tensor | None]) -> list[LazySummary | None]:
    """One summary per tensor, the same object where a tensor repeats (``AddBackward0``'s)."""
    made: dict[int, LazySummary | None] = {}
    summaries: list[LazySummary | None] = []
    for t in tensors:
        key = id(t)
        if key not in made:
            made[key] = summary_of(t)
        summaries.append(made[key])
    return summaries


def emit(kind: str, graph_task: GraphTask, node: Node | None = None, **data: Any) -> None:
    """Emit from this engine thread; callers check ``HUB.active`` first (zero cost otherwise)."""
    device = TLS.worker_device
    HUB.emit_data(kind, "cpu" if device is None else device._str, graph_task.id, node, data)


# Note [One payload for every source]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The routing's events (dependency_decrement, skip, accumulate into a buffer)
# are made by this engine and derived by the PyTorch bridge from what PyTorch's
# engine shows. Both build their payloads with the functions below, so a view
# reads the same fields whichever source made the trace; the bridge adds
# ``derived``.

NOT_NEEDED = "not needed for the requested inputs"
"""Why a ``skip`` event's node does not run: ``inputs=`` or ``grad()`` pruned it."""


def decrement_payload(from_node: int, from_name: str, input_nr: int, remaining: int) -> dict:
    """A ``dependency_decrement``: ``from_node``'s output reached slot ``input_nr``."""
    return {
        "from_node": from_node,
        "from_name": from_name,
        "input_nr": input_nr,
        "remaining": remaining,
    }


def skip_payload(from_node: int, input_nr: int) -> dict:
    """A ``skip``: the gradient for slot ``input_nr`` goes nowhere (Note [One payload ...])."""
    return {"from_node": from_node, "input_nr": input_nr, "reason": NOT_NEEDED}


def accumulate_payload(slot: int, created: bool, from_node: int, grad: Any, total: Any) -> dict:
    """An ``accumulate`` into a buffer slot; ``total`` is left out when ``None``."""
    data = {
        "target": "buffer",
        "slot": slot,
        "action": "created" if created else "added",
        "from_node": from_node,
        "grad": grad,
    }
    if total is not None:
        data["total"] = total
    return data


def emit_reentrant_enter(graph_task: GraphTask, current_depth: int, on_pool: bool) -> None:
    """A backward call starts inside a running node (Note [Reentrant backward])."""
    emit(
        "reentrant_enter",
        graph_task,
        parent_graph_task=graph_task.parent_id,
        depth=graph_task.reentrant_depth,
        current_depth=current_depth,
        on_pool=on_pool,
    )


def emit_reentrant_exit(graph_task: GraphTask) -> None:
    """A reentrant backward call ends, well or with an error."""
    emit(
        "reentrant_exit",
        graph_task,
        parent_graph_task=graph_task.parent_id,
        depth=graph_task.reentrant_depth,
        ok=graph_task.error is None,
    )


def emit_hook(
    graph_task: GraphTask, fn: Node, kind: str, hook: Any, replaced: bool, **data: Any
) -> None:
    name = hook if isinstance(hook, str) else getattr(hook, "__qualname__", repr(hook))
    emit("hook", graph_task, fn, hook=kind, replaced=replaced, hook_name=name, **data)


def any_defined(grads: list[Any]) -> bool:
    for g in grads:  # noqa: SIM110 - a loop beats any() over a generator
        if g is not None:
            return True
    return False


def emit_enqueue(queue: ReadyQueue, task: NodeTask | ExactNodeTask, reason: str) -> None:
    """``task`` is pushed onto ``queue`` for ``reason`` (``root``, ``ready``, ``wake-up``)."""
    # The event comes first so that listeners see enqueue before the node starts on
    # another thread. If a listener cancels, the task is still queued (no task is lost)
    # before the exception goes on.
    base, fn = task.graph_task, task.fn
    assert base is not None
    try:
        emit(
            "enqueue",
            base,
            fn,
            queue=str(queue.device),
            queue_owner=f"graph_task {base.id}" if queue.device is CPU else "device",
            reason=reason,
            queue_length=len(queue) + 1,
        )
    except BaseException:
        queue.push(task)
        raise


def emit_graph_task_start(
    graph_task: GraphTask,
    graph_root: Node,
    roots: Sequence[Edge],
    inputs: Sequence[Tensor | None],
    outputs: Sequence[Edge],
) -> None:
    """A graph task starts: its roots, dependency counts and pruning."""
    needed = None
    if graph_task.exec_info:
        needed = sorted(n._id for n, info in graph_task.exec_info.items() if info.needed)
    captures = None
    if graph_task.exec_info:
        captures = sorted(
            (n._id, inp, out)
            for n, info in graph_task.exec_info.items()
            if info.captures
            for inp, out in info.captures
        )
    emit(
        "graph_task_start",
        graph_task,
        graph_root,
        graph_root=weakref.ref(graph_root),
        roots=[(e.function._id, e.function.name(), e.input_nr) for e in roots],
        root_grads=[summary_of(g) for g in inputs],
        dependencies={n._id: c for n, c in graph_task.dependencies.items()},
        needed=needed,
        captures=captures,
        outputs=[(e.function._id, e.input_nr) for e in outputs],
        keep_graph=graph_task.keep_graph,
        create_graph=graph_task.grad_mode,
        reentrant_depth=graph_task.reentrant_depth,
        parent_graph_task=graph_task.parent_id,
    )


def emit_graph_task_end(graph_task: GraphTask) -> None:
    """A graph task ends, with its status and its captured gradients (if anyone listens)."""
    if not HUB.active:
        return
    err = graph_task.error
    emit(
        "graph_task_end",
        graph_task,
        status="ok" if err is None else "error",
        exc_type=None if err is None else type(err).__name__,
        message=None if err is None else str(err),
        captured=[summary_of(g) for g in graph_task.captured_vars],
    )
