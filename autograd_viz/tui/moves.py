"""The driver's moves as the app runs them: in a thread when live, and what each found.

Note [The UI never waits for the engine]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A live driver's forward moves block until engine threads emit events, and a
paused engine thread waits for the UI. Those moves run in a thread worker that
posts :class:`Moved` back (``post_message`` is thread-safe); widgets are only
touched on the UI loop. One move runs at a time. Quitting stops the live
session first, which releases every paused engine thread with
``SessionCancelled``, so the worker returns and the process can exit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.message import Message

from autograd_viz.live import born_where
from autograd_viz.trace import GraphTaskInfo, Trace, TraceEvent
from autograd_viz.tui.driver import Driver

if TYPE_CHECKING:
    from autograd_viz.tui.host import Host


class Moved(Message):
    """A move that ran in a worker thread finished (see Note [The UI never waits...])."""

    def __init__(self, action: str, event: TraceEvent | None, error: BaseException | None):
        super().__init__()
        self.action = action
        self.event = event
        self.error = error


class Mover:
    """The keys that move the driver: forward (in a thread when live), back, pause; what a
    move found goes to the status bar, and ``a``'s first problem is pinned and its path marked.

    Args:
        owner: the app whose driver moves and whose panels show where it went.
    """

    def __init__(self, owner: Host) -> None:
        self.owner = owner

    def forward(self, action: str) -> None:
        """Run the driver's forward move ``action`` (in a worker when live)."""
        app = self.owner
        if app.busy:
            app.notify("The engine is running: x pauses it, q stops it.")
            return
        if app.driver.live:
            app.set_busy(True)
            app.refresh_status()
            run = functools.partial(self._in_thread, app.driver, action)
            app.run_worker(run, thread=True, exclusive=True, group="engine", exit_on_error=False)
            return
        self.moved(perform(app.driver, action))

    def _in_thread(self, driver: Driver, action: str) -> None:
        self.owner.post_message(perform(driver, action))

    def moved(self, message: Moved) -> None:
        """A move ended: say what it found and show where the driver is."""
        app = self.owner
        app.set_busy(False)
        if app.closing:
            return
        app.say(describe_move(message, app.driver))
        found = message.event is not None and message.event is app.driver.finding
        if message.action == "first_problem" or found:  # run --last opens at its finding
            app.mark_path(path_to(app.driver.trace, message.event))
            self._show_task_of(message.event)
        app.refresh_view(follow=True)

    def _show_task_of(self, event: TraceEvent | None) -> None:
        """Pin the graph task that runs ``event``'s node when the list shows another.

        A forward anomaly comes before any backward call: it belongs to no graph
        task, and the node list would show nothing to select.
        """
        app = self.owner
        if event is None or event.node_id is None:
            return
        shown = app.shown_task(app.driver.state())
        if shown is not None and event.node_id in shown.nodes:
            return
        task = task_running(app.driver.trace, event)
        if task is not None:
            app.pin(task.id)

    def back(self, move: Callable[[], object]) -> None:
        """Run a backward move of the driver (never while a live move runs)."""
        app = self.owner
        if app.busy:
            return
        move()
        app.say("")
        app.refresh_view(follow=True)

    def pause(self) -> None:
        """Pause a running live move (``x``)."""
        app = self.owner
        if not app.busy:
            app.say("nothing is running")
            app.refresh_status()
            return
        app.driver.pause()


def perform(driver: Driver, action: str) -> Moved:
    """Run one of the driver's moves; what it raises is reported, and the app goes on."""
    try:
        return Moved(action, getattr(driver, action)(), None)
    except Exception as exc:  # noqa: BLE001 - shown in the status bar
        return Moved(action, None, exc)


def describe_move(message: Moved, driver: Driver) -> str:
    """What the status bar says after a move: where it stopped, or what it found."""
    if message.error is not None:
        return f"error: {message.error}"
    event = message.event
    if message.action == "first_problem":
        if event is None:
            return "no anomaly, error or NaN/Inf gradient" + ("" if driver.finished else " so far")
        return f"first problem: {event.kind} at {event.node_name or 'graph task'}"
    if event is not None and event is driver.finding:  # Note [A live flight recorder]
        where = f"{event.node_name}#{event.node_id}" if event.node_name else "a graph task"
        born = born_where(driver.trace.events, event)
        born_part = f"; {born}" if born else ""
        return f"first NaN/Inf: {event.kind} {where}{born_part}; recording ends with its call"
    stops = message.action == "continue_" or (
        event is not None and driver.breakpoints.matches(event)  # a step that lands on one
    )
    if stops and event is not None:
        where = f"{event.node_name}#{event.node_id}" if event.node_name else "a graph task"
        born = born_where(driver.trace.events, event)
        return f"stopped: {event.kind} {where}" + (f"; {born}" if born else "")
    if event is None and message.action != "run_to_end" and driver.finished:
        return "end of the backward pass"
    return ""


def path_to(trace: Trace, event: TraceEvent | None) -> tuple[int, ...]:
    """Node ids from the loss to ``event``'s node, in the graph task that runs it."""
    from autograd_viz.nan.report import path_from_root

    task = task_running(trace, event)
    if event is None or event.node_id is None or task is None:
        return ()
    return tuple(ref.id for ref in path_from_root(task, event.node_id))


def task_running(trace: Trace, event: TraceEvent | None) -> GraphTaskInfo | None:
    """The graph task ``event`` belongs to; for a forward anomaly, the first that runs its node."""
    if event is None or event.node_id is None:
        return None
    task = trace.graph_tasks.get(event.graph_task)
    if task is None:
        task = next((t for t in trace.graph_tasks.values() if event.node_id in t.nodes), None)
    return task


__all__ = ["Moved", "Mover", "describe_move", "path_to", "perform", "task_running"]
