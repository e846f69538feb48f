"""Live sessions: run user code with a gate on engine events, step it, break, stop.

A :class:`LiveSession` runs a callable or a script in a background thread and
subscribes a gate to the engine's events. Every engine thread that emits an
event while the gate is closed pauses inside the listener until the session
lets that one event through. Everything let through is recorded into
:attr:`LiveSession.trace`, so the session can also move back over what it has
seen and forward again without touching the engine.

Note [One step at a time]
~~~~~~~~~~~~~~~~~~~~~~~~~
:meth:`LiveSession.step` lets exactly one event through, and always the same
one for the same program: before choosing, it waits until the engine is
quiescent (every engine thread is paused at the gate or asleep waiting for
work; see Note [Quiescence] in ``engine.activity``). Then the set of paused
events no longer depends on timing, and the choice is fixed: the thread that
went last goes again if it is paused, else the paused thread whose name sorts
first. The released thread runs until its next event, so each step is one
engine step even with several device threads.

:meth:`LiveSession.continue_` opens the gate instead, checking breakpoints in
the listener; the first event that matches closes it again. Free running is
as fast as recording, and as timing-dependent as the engine itself.

A session gates only its target's engine work, and nobody once the target
has finished (Note [Whose work a session gates]); it records at most
``max_events`` events, and with ``calls.last`` only the target's last calls
(Note [A live flight recorder]).
"""

from __future__ import annotations

import functools
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from autograd_viz.live.breakpoints import Breakpoint
from autograd_viz.live.record import SessionRecord
from autograd_viz.live.running import Hooks, Target, run_script_raising
from autograd_viz.sources.calls import CallSelection
from autograd_viz.sources.script import check_script
from autograd_viz.trace import DEFAULT_MAX_VALUES, Trace, TraceEvent
from autograd_viz.trace.replay import ExecutionState
from engine.activity import ACTIVITY
from engine.events import Event

LIVE_THREAD = "autograd-viz-live"
"""The name of the thread a live session runs its target in."""

MAIN = "main"
"""The name every view gives the program's own thread, live or recorded."""


def thread_name(name: str) -> str:
    """An engine thread's name as every view writes it.

    The thread that runs the program is :data:`MAIN` whether it was Python's
    ``MainThread`` (a recorded script) or the live session's own thread; the
    engine's workers lose the ``autograd-`` they all share (``sim:0``).
    """
    if name in ("MainThread", LIVE_THREAD):
        return MAIN
    return name.removeprefix("autograd-")


DEFAULT_MAX_EVENTS = 1_000_000
"""The most events a live session records unless told otherwise (a 400 MB trace file)."""

_SETTLING = frozenset({"error", "graph_task_end", "reentrant_exit"})
"""Events after which a graph task has nothing left to cancel (Note [Where a stop cancels])."""


class SessionCancelled(RuntimeError):  # noqa: N818 - reads as what happened
    """Raised inside the user's code when its live session is stopped mid-backward."""

    _engine_propagate = True  # the engine fails the graph task with it (engine.events)


class _Paused:
    """An engine thread waiting at the gate with its event."""

    __slots__ = ("cancel", "event", "permit", "record", "thread")

    def __init__(self, event: Event) -> None:
        self.event = event
        self.thread = event.thread
        self.permit = False
        self.cancel = False
        self.record: TraceEvent | None = None


class LiveSession:
    """Run user code under a gate on engine events (see the module notes).

    Example:
        >>> with LiveSession(train_step) as session:
        ...     session.step_node()
        ...     print(session.state.nodes())
        ...     session.continue_()

    Args:
        target: a callable taking no arguments, or the path of a Python script
            (run as ``__main__``; :attr:`result` is then its exit status).
        args: the script's command-line arguments (``sys.argv[1:]``).
        max_values: tensors with at most this many elements keep their values.
        settle_timeout: how long a step waits for the engine to become
            quiescent before choosing among the threads already paused (only
            a thread blocked outside the engine's knowledge makes it wait).
        max_events: the most events the session records (``None``: no
            limit). A session keeps every event it lets through, and a long
            free run (a training loop) grew one past a gigabyte; at the
            limit the session warns, sets :attr:`truncated` and lets the
            target run on, no longer gated or recorded.
        calls: gate only these backward calls of the target (its ``steps``
            and ``every``, counted from 0 on the target's thread); the others
            run on, unpaused and unrecorded. Its ``last`` keeps only the last
            N of them (Note [A live flight recorder]). ``None`` gates and keeps
            every call.
        values: which gradients the session's trace summarizes: ``"all"``,
            ``"leaves"`` or ``"none"`` (Note [Values tiers] in
            ``autograd_viz/trace/records.py``).
    """

    def __init__(
        self,
        target: Callable[[], Any] | str | os.PathLike[str],
        args: Sequence[str] = (),
        *,
        max_values: int = DEFAULT_MAX_VALUES,
        settle_timeout: float = 1.0,
        max_events: int | None = DEFAULT_MAX_EVENTS,
        calls: CallSelection | None = None,
        values: str = "all",
    ) -> None:
        if max_events is not None and (isinstance(max_events, bool) or max_events < 1):
            raise ValueError(f"max_events must be a positive integer or None, got {max_events!r}")
        if isinstance(target, str | os.PathLike):
            path = os.fspath(target)
            check_script(path)
            run: Callable[[], Any] = functools.partial(run_script_raising, path, list(args))
        elif callable(target):
            if args:
                raise TypeError("args are for a script path; bind a callable's arguments yourself")
            run = target
        else:
            raise TypeError(
                f"target must be a callable or a script path, got {type(target).__name__}"
            )
        self._target = Target(run)
        self._record = SessionRecord(max_values, values, calls, max_events)
        self._hooks = Hooks()
        self._listener = self._gate  # one bound method, so unsubscribe finds it
        self._settle_timeout = settle_timeout
        self.truncated = False
        """The session reached ``max_events``: it no longer gates or records the target."""
        self._cond = threading.Condition(threading.Lock())
        self._paused: list[_Paused] = []
        self._gated = True
        self._cancelled = False
        self._settled_tasks: set[int] = set()  # ended, failed or cancelled: never cancel again
        self._active_breakpoints: tuple[Breakpoint, ...] = ()
        self._hit: TraceEvent | None = None
        self._last_thread: str | None = None
        self._tasks: set[int] = set()  # see Note [Whose work a session gates]
        self._finished = False
        self.breakpoints: list[Breakpoint] = []
        """Breakpoints :meth:`continue_` stops at."""

    @property
    def position(self) -> int:
        """The step shown by :attr:`state`; less than :attr:`frontier` after :meth:`back`."""
        return self._record.position

    @position.setter
    def position(self, step: int) -> None:
        self._record.position = step

    @property
    def result(self) -> Any:
        """What the target returned (a script: its exit status)."""
        return self._target.result

    @property
    def error(self) -> BaseException | None:
        """What the target raised, if anything (``SystemExit`` with status 0 is not an error)."""
        return self._target.error

    @property
    def _thread(self) -> threading.Thread | None:
        return self._target.thread

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> LiveSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LiveSession:
        """Subscribe the gate and start the target in a background thread (paused at its
        first engine event)."""
        thread = threading.Thread(target=self._main, name=LIVE_THREAD, daemon=True)
        self._begin(thread)
        thread.start()
        return self

    def attach(self) -> LiveSession:
        """Make the calling thread the target's, to :meth:`run` it here (paused at its first
        engine event) while another thread steps it.

        ``autograd-viz run`` runs a script this way on the main thread, where Python
        delivers signals and a script may install its handlers, as it would unwatched.
        """
        self._begin(threading.current_thread())
        self._target.ident = threading.get_ident()
        return self

    def run(self) -> Any:
        """Run the target on this thread, after :meth:`attach`; returns :attr:`result`.

        What the target raises is kept in :attr:`error`, as with :meth:`start`. Call
        :meth:`stop` afterwards, from any thread.
        """
        if self._thread is not threading.current_thread():
            raise RuntimeError("attach() the live session on this thread before run()")
        self._main()
        return self.result

    def _begin(self, thread: threading.Thread) -> None:
        if self._target.thread is not None:
            raise RuntimeError("this live session was already started")
        self._hooks.hook(self._listener, self if self._record.window.counts else None)
        self._target.thread = thread

    def call_started(self) -> None:
        """A backward call starts (:data:`engine.calls.CALLS`): is it one the session gates?"""
        if self._target.on_it:
            with self._cond:
                self._record.call_started()

    def call_ended(self) -> None:
        """The call ended: what the target does next (a forward, its NaN checks) is gated."""
        if self._target.on_it:
            with self._cond:
                self._record.call_ended()

    def _main(self) -> None:
        try:
            self._target.main()
        finally:
            with self._cond:
                # A finished session gates nobody (Note [Whose work a session gates]):
                # what still waits at the gate is let through.
                self._finished = True
                self._release_all()
                self._cond.notify_all()

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel the backward in progress, if any, and end the session.

        Paused engine threads are released with :class:`SessionCancelled`,
        which the user's code receives from ``backward()``; the target's
        thread is joined, worker threads the session started are shut down
        and the gate is unsubscribed. The engine stays usable.
        """
        self.cancel()
        self._target.join(timeout)
        self._hooks.unhook(self._listener, self)
        self._record.recorder.close()  # the trace no longer changes once stop() returns
        self._hooks.leave(timeout)

    def cancel(self) -> None:
        """Cancel the backward in progress and stop gating, without waiting for anything.

        Paused engine threads go on with :class:`SessionCancelled`, and a
        :meth:`step` or :meth:`continue_` waiting on another thread returns
        ``None`` at once. :meth:`stop` does this first, then cleans up.
        """
        with self._cond:
            self._cancelled = True
            self._gated = False
            for paused in self._paused:
                paused.cancel = True
                ACTIVITY.unblock()
            self._paused.clear()
            self._cond.notify_all()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` (or :meth:`stop`) was called."""
        return self._cancelled

    # -- what the session has seen ---------------------------------------------------
    @property
    def trace(self) -> Trace:
        """Every event let through so far, in the order it was let through."""
        return self._record.trace

    @property
    def last(self) -> int | None:
        """How many of the target's calls the session keeps (``None``: every one)."""
        return self._record.window.last

    @property
    def dropped(self) -> int:
        """Events forgotten so far as older calls left the window (Note [A live flight
        recorder]); positions before a move less those dropped during it are positions after."""
        return self._record.window.dropped

    @property
    def frontier(self) -> int:
        """How many events the engine has been let through."""
        return self._record.frontier

    @property
    def state(self) -> ExecutionState:
        """The engine's state at :attr:`position`."""
        return self.trace.state_at(self.position)

    @property
    def finished(self) -> bool:
        """Whether the target has returned (or raised) and no engine thread is paused."""
        with self._cond:
            return self._finished and not self._paused

    def back(self, steps: int = 1) -> int:
        """Move :attr:`position` back over recorded events; returns the new position."""
        return self._record.back(steps)

    # -- moving forward --------------------------------------------------------------
    def step(self, timeout: float | None = None) -> TraceEvent | None:
        """Apply one event: replay a recorded one, or let the engine take one step.

        Returns:
            The event, or ``None`` when the target finished without another event.

        Raises:
            TimeoutError: ``timeout`` seconds passed with no event to let through.
        """
        replayed = self._record.replayed()
        if replayed is not None:
            return replayed
        record = self._release_one(timeout)
        if record is not None:
            self.position = self.frontier
        return record

    def step_node(self, timeout: float | None = None) -> TraceEvent | None:
        """Step until a ``node_start`` has been applied; returns it (``None`` at the end)."""
        while True:
            record = self.step(timeout)
            if record is None or record.kind == "node_start":
                return record

    def continue_(
        self, timeout: float | None = None, ignore_breakpoints: bool = False
    ) -> TraceEvent | None:
        """Run until an event matches a breakpoint (returned, already applied) or the end.

        At the end the target has finished and ``None`` is returned.

        Raises:
            TimeoutError: ``timeout`` seconds passed first; the engine is paused again.
        """
        if self._target.thread is None:
            raise RuntimeError("start the live session first")
        breakpoints = () if ignore_breakpoints else tuple(self.breakpoints)
        while self.position < self.frontier:
            record = self.trace.events[self.position]
            self.position += 1
            if any(b.matches(record) for b in breakpoints):
                return record
        with self._cond:
            self._hit = None
            self._active_breakpoints = breakpoints
            self._gated = False
            self._release_all()
            self._cond.notify_all()
            done = self._cond.wait_for(
                lambda: (
                    self._hit is not None or self._finished or self.truncated or self._cancelled
                ),
                timeout,
            )
            hit = self._hit
            self._gated = not self._cancelled
        self.position = self.frontier
        if not done:
            raise TimeoutError(f"the target still runs after {timeout} s")
        return hit

    def pause(self) -> None:
        """Make a :meth:`continue_` running on another thread stop at the next event.

        Does nothing when no free run is in progress.
        """
        with self._cond:
            if not self._gated:
                self._active_breakpoints = (Breakpoint(),)  # matches every event

    def run_to_end(self, timeout: float | None = None) -> None:
        """Run the target to its end, ignoring breakpoints."""
        self.continue_(timeout, ignore_breakpoints=True)

    def add_breakpoint(
        self,
        node: str | int | None = None,
        kind: str | None = None,
        predicate: Callable[[TraceEvent], bool] | None = None,
    ) -> Breakpoint:
        """Add a :class:`Breakpoint` and return it (pass it to :meth:`remove_breakpoint`)."""
        breakpoint_ = Breakpoint(node, kind, predicate)
        self.breakpoints.append(breakpoint_)
        return breakpoint_

    def remove_breakpoint(self, breakpoint_: Breakpoint) -> None:
        """Remove a breakpoint added before."""
        self.breakpoints.remove(breakpoint_)

    # -- the gate (runs on engine threads) -------------------------------------------

    # Note [Whose work a session gates]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # A session runs inside somebody's process, beside threads that are none
    # of its business. It gates (pauses, records, cancels) only its target's
    # engine work: events emitted on the target's thread, and events of the
    # graph tasks the target started, wherever they run (a device thread, a
    # reentrant pool thread) and including reentrant graph tasks started by
    # their nodes. A graph task is the target's when its graph_task_start is
    # emitted on the target's thread or names a parent graph task that is.
    # Every other event passes untouched and unrecorded: another thread's
    # backward never waits for a step. Once the target has returned or
    # raised, the session gates nobody, whether or not stop() is called: a
    # forgotten session (a notebook) never hangs a later backward.

    def _owns(self, event: Event) -> bool:
        """Whether ``event`` is the target's engine work (Note [Whose work a session gates])."""
        if self._finished or self.truncated:
            return False
        gid = event.graph_task
        if gid in self._tasks:
            return True
        on_target = self._target.on_it
        if on_target and not self._record.window.kept:
            return False  # a backward call the session does not gate (``calls``)
        if event.kind == "graph_task_start" and (
            on_target or event.data.get("parent_graph_task") in self._tasks
        ):
            with self._cond:
                self._tasks.add(gid)
            return True
        return on_target

    def _gate(self, event: Event) -> None:
        if not self._owns(event):
            return
        with self._cond:
            if self._cancelled:
                self._after_cancel(event)
                return
            if self._finished or self.truncated:  # while this thread waited for the lock
                return
            if self._gated:
                paused = _Paused(event)
                self._paused.append(paused)
                ACTIVITY.block()  # see Note [Quiescence]; whoever lets it go unblocks it
                self._cond.notify_all()
                while not paused.permit and not paused.cancel:
                    self._cond.wait()
                if paused.cancel and self._cancellable(event):
                    self._cancel_task(event)
                paused.record = record = self._record_event(event)
            else:
                record = self._record_event(event)
            if not self._gated and any(b.matches(record) for b in self._active_breakpoints):
                self._hit = record
                self._gated = True
            self._cond.notify_all()

    def _record_event(self, event: Event) -> TraceEvent:
        """Keep ``event`` (lock held) and settle what that changes for the gate."""
        record, gone = self._record.record(event)
        if event.kind == "graph_task_end":
            self._settled_tasks.add(event.graph_task)
        if gone:  # forgotten calls (Note [A live flight recorder]): nothing of theirs comes
            self._tasks.difference_update(gone)
            self._settled_tasks.difference_update(gone)
        if self._record.full:
            self._truncate()
        return record

    def _truncate(self) -> None:
        """The session holds ``max_events``: stop gating and recording (lock held)."""
        self.truncated = True
        self._gated = False
        self._release_all()
        warnings.warn(
            f"the live session recorded {self._record.max_events:,} events (max_events) and no "
            "longer pauses or records its target; pass a larger max_events, or record the "
            "program with autograd_viz.record() and save the trace",
            RuntimeWarning,
            stacklevel=2,
        )

    def _release_all(self) -> None:
        """Let every paused thread go on (lock held)."""
        for paused in self._paused:
            paused.permit = True
            ACTIVITY.unblock()
        self._paused.clear()

    def _after_cancel(self, event: Event) -> None:
        """After :meth:`stop`: fail every unfinished graph task at its next event."""
        if event.kind in _SETTLING:
            self._settled_tasks.add(event.graph_task)
        elif self._cancellable(event):
            self._cancel_task(event)

    def _cancellable(self, event: Event) -> bool:
        """Whether raising at ``event`` fails its graph task (Note [Where a stop cancels])."""
        if event.kind in _SETTLING or event.graph_task in self._settled_tasks:
            return False
        return not (event.kind == "enqueue" and event.data.get("reason") == "wake-up")

    # Note [Where a stop cancels]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # stop() fails a graph task by raising SessionCancelled at its next event;
    # the engine catches it where a node runs and fails the graph task, and
    # raises it from backward() where the graph task starts. At an event that
    # follows the end of a graph task there is nothing left to fail, and the
    # engine does not expect a listener to raise there: graph_task_end (the
    # thread that completes a task still has to wake its owner) and the
    # wake-up enqueue that follows it. A raise there left the owner asleep in
    # backward() forever. Those events, errors and reentrant exits are let
    # through instead.

    def _cancel_task(self, event: Event) -> None:
        self._settled_tasks.add(event.graph_task)
        raise SessionCancelled(
            "the live session was stopped; this backward pass was cancelled "
            f"at {event.kind} {event.node_name or ''}".rstrip()
        )

    # -- the controller side (runs on the thread that calls step) --------------------
    def _release_one(self, timeout: float | None) -> TraceEvent | None:
        if self._target.thread is None:
            raise RuntimeError("start the live session first")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._settle()
            with self._cond:
                if self._cancelled:
                    return None
                if self._paused:
                    paused = self._choose()
                    paused.permit = True
                    self._paused.remove(paused)
                    ACTIVITY.unblock()
                    self._last_thread = paused.thread
                    self._cond.notify_all()
                    self._cond.wait_for(functools.partial(self._let_through, paused))
                    return paused.record
                if self._finished or self.truncated:
                    return None
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"no engine event within {timeout} s")
                wait = 0.05 if remaining is None else min(0.05, remaining)
                self._cond.wait(wait)

    def _settle(self) -> None:
        """Wait for quiescence (Note [One step at a time]), a few ms at a time: a
        :meth:`cancel` ends the wait at once."""
        deadline = time.monotonic() + self._settle_timeout
        while not self._cancelled:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or ACTIVITY.wait_quiescent(min(remaining, 0.05)):
                return

    def _let_through(self, paused: _Paused) -> bool:
        return paused.record is not None or self._cancelled

    def _choose(self) -> _Paused:
        for paused in self._paused:
            if paused.thread == self._last_thread:
                return paused
        return min(self._paused, key=lambda p: (p.thread, p.event.seq))
