"""The call level (``observe="calls"``): a backward call watched at its ends, its nodes derived.

No hook is put on any node: PyTorch runs the call as unwatched, and only its
roots, its ``inputs=`` targets, its thread and its start and end times are
kept (a :class:`CallSeen`). Once the call has returned, its graph is still
there (the saved tensors are freed, the ``next_functions`` stay), so it is
walked as the node level walks it before a call
(:func:`~autograd_viz.sources.pytorch.graph.plan_graph_task`) and PyTorch's
scheduler (``engine/scheduler.py``, through
:class:`~autograd_viz.sources.pytorch.bookkeeping.Bookkeeping`) is run over
it: the ready queue pops in PyTorch's order, and each node's start, end,
dependency counts and buffers are emitted as ``derived`` events. See Note
[Observation levels] in ``autograd_viz/trace/records.py``.

What is not known without watching: which of a node's outputs were ``None``
(every edge is taken to carry a gradient), the nodes' times (every derived
event has the call's end time) and values (none are kept).

Note [Calls derived later]
~~~~~~~~~~~~~~~~~~~~~~~~~~
A flight recorder (``last=N``) keeps N calls of thousands and drops the
rest, so deriving each call when it ends is work thrown away for all but N.
When every listener is a recorder that takes calls to derive later
(``takes_calls``: a flight recorder at the call level), a call ends with its
:class:`CallSeen` handed to them, and the walk and the bookkeeping run only
for the calls still held when the ring is written (the run's end, an
exception, a signal). A call costs its gate and a few objects, whatever its
size. What a held call keeps alive: its roots' nodes, and through them every
node object of its graph and the leaves its ``AccumulateGrad`` nodes hold
(the saved tensors were freed by the backward); the leaves' names are read
from the calling code when the call starts, as the node level reads them,
so no frame is kept. A call with ``retain_graph`` (or ``create_graph``) would
keep its saved tensors too: it is derived at once. The trace is the same
as when each call is derived as it ends, but for the event numbers
(``seq``: taken when derived) and the node ids (given when a node is first
walked); a user's hook added or removed on a node after the call is seen as
it is when the call is derived.

Note [Reentrant calls at the call level]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A reentrant backward (``checkpoint(use_reentrant=True)``) starts while a node
of the outer call runs. Its :class:`CallSeen` records that node and joins
the outer call's ``children``; it is derived inside the outer one, between
that node's derived start and end, as the node level sees it: its own graph
task, child of the outer one (not a call of its own), with its reentrant
enter and exit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from autograd_viz.sources.once import warn_once
from autograd_viz.sources.pytorch.call_derive import CallSeen, ToListeners, emit_call
from autograd_viz.sources.pytorch.leaf_names import LeafNamer
from engine.events import HUB


def observes_calls() -> bool:
    """Whether a listener asks for the call level (``observe == "calls"``).

    Such a recorder says so in its header; a listener beside it that wants
    nodes (``run --print``'s NaN checks) then reads derived events too.
    """
    return any(getattr(listener, "observe", "nodes") == "calls" for listener in HUB.listeners)


class _Calls(threading.local):
    def __init__(self) -> None:
        self.stack: list[CallSeen] = []


_RUNNING = _Calls()
"""The call-level calls each thread runs, outermost first."""


def run_call_level(
    original: Callable[..., Any],
    t_outputs: Any,
    args: Any,
    kwargs: Any,
    roots: Sequence[tuple[Any, int]],
    targets: Sequence[Any],
    bound: dict[str, Any],
    namer: LeafNamer,
) -> Any:
    """Run one backward call unwatched, then emit its graph task, derived from its graph.

    Args:
        original: PyTorch's ``_engine_run_backward``.
        t_outputs: the root tensors, as PyTorch got them.
        args: the call's other arguments, as PyTorch got them.
        kwargs: the call's keyword arguments, as PyTorch got them.
        roots: ``(grad_fn, input_nr)`` of each root.
        targets: each ``inputs=`` / ``grad()`` target, as the node level plans it.
        bound: the call's arguments by name.
        namer: names the leaves (from the caller's frame).

    Returns:
        What PyTorch returned; what it raised goes on to the caller.
    """
    stack = _RUNNING.stack
    try:
        call = CallSeen(roots, targets, bound, namer, stack[-1] if stack else None)
    except Exception as exc:  # noqa: BLE001 - never break the user's backward for a view
        warn_once(f"autograd-viz: cannot watch a backward call ({exc!r}); not recording it")
        return original(t_outputs, *args, **kwargs)
    call.nesting = len(stack)
    stack.append(call)
    failed: BaseException | None = None
    try:
        result = original(t_outputs, *args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - raised again below, once the call is recorded
        failed, result = exc, None
    finally:
        stack.pop()
    call.ended(result, failed)
    if call.parent is not None:
        call.parent.children.append(call)  # derived inside its parent
    elif HUB.active:
        _hand_on(call, failed)
    if failed is not None:
        raise failed
    return result


def _hand_on(call: CallSeen, failed: BaseException | None) -> None:
    """Give a finished outermost call to the listeners: to derive later, or derived now."""
    listeners = HUB.listeners
    if not call.keep_graph and all(getattr(li, "takes_calls", False) for li in listeners):
        for listener in listeners:
            try:
                listener.take_call(call)  # type: ignore[attr-defined]
            except BaseException as exc:  # noqa: BLE001 - listener_failed re-raises what it must
                HUB.listener_failed(listener, exc, call.graph_task)
        return
    try:
        emit_call(call, ToListeners(), [])
    except Exception as exc:  # the call has returned; a view must not fail it
        if failed is None and getattr(exc, "_engine_propagate", False):
            raise
