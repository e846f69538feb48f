"""The gate of a live session: the target's engine events paused, let through one at a time
or freely until a breakpoint, recorded, or cancelled.

Engine threads call the gate's :attr:`Gate.listener` with each event and wait
in it while the gate is closed; the thread that drives the session (a TUI, a
test) lets them through with :meth:`Gate.release_one` or :meth:`Gate.free_run`.
Everything let through is recorded into the session's
:class:`~autograd_viz.live.window.SessionRecord`.

Note [One step at a time]
~~~~~~~~~~~~~~~~~~~~~~~~~
:meth:`Gate.release_one` (a session's ``step``) lets exactly one event
through, and always the same one for the same program: before choosing, it
waits until the engine is quiescent (every engine thread is paused at the
gate or asleep waiting for work; see Note [Quiescence] in
``engine.activity``). Then the set of paused events no longer depends on
timing, and the choice is fixed: the thread that went last goes again if it
is paused, else the paused thread whose name sorts first. The released
thread runs until its next event, so each step is one engine step even with
several device threads.

:meth:`Gate.free_run` (``continue_``) opens the gate instead, checking
breakpoints in the listener; the first event that matches closes it again.
Free running is as fast as recording, and as timing-dependent as the engine
itself.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import warnings
import weakref
from typing import Any

from autograd_viz.live.breakpoints import Breakpoint
from autograd_viz.live.running import Target
from autograd_viz.live.window import SessionRecord
from autograd_viz.sources.tracebacks import RaisedOnPurpose
from autograd_viz.trace import TraceEvent
from engine.activity import ACTIVITY
from engine.events import Event

_SETTLING = frozenset({"error", "graph_task_end", "reentrant_exit"})
"""Events after which a graph task has nothing left to cancel (Note [Where a stop cancels])."""


_gates: weakref.WeakSet[Any] = weakref.WeakSet()
"""Every gate alive, for :func:`_forked`."""


def _forked() -> None:
    """In a forked child, no gate gates (Note [Whose work a session gates])."""
    for gate in list(_gates):
        gate._forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class SessionCancelled(RuntimeError, RaisedOnPurpose):  # noqa: N818 - reads as what happened
    """Raised inside the user's code when its live session is stopped mid-backward.

    Its traceback ends at the program's frame (Note [A traceback as without us]).
    """

    _engine_propagate = True  # the engine fails the graph task with it (engine.events)


# Note [A cancel is no error of the node]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# When the session is stopped mid-backward (the user quits the TUI, SIGTERM),
# SessionCancelled fails the graph task at the node that was paused. Anomaly
# mode takes any failure of a node for an error of its computation and warns
# "Error detected in XBackward0" with the node's forward traceback: after the
# TUI has closed, pointing at a healthy line. Our engine leaves that warning
# out for an exception a listener raised on purpose (Note [No anomaly warning
# for a listener's raise] in engine/completion.py). PyTorch's engine warns
# from C++ whenever its anomaly mode (the program's own
# ``torch.autograd.detect_anomaly()``) is on, and the warning comes out in
# ``torch.autograd.graph`` as ``backward()`` returns on the target's thread.
# Turning anomaly mode off would change the program's state; so, from the
# first cancel with PyTorch's anomaly mode on until the target ends, a
# warnings filter ignores exactly those warnings from that module. The
# target's results, its exception and every other warning are as they were.

_TORCH_ANOMALY_WARNING = r"\s*(Error detected in |Previous calculation was induced by )"
"""The start of PyTorch's anomaly mode warnings about a failed node."""


class _QuietAnomaly:
    """PyTorch's anomaly warnings about a cancelled node, ignored until the target ends
    (Note [A cancel is no error of the node])."""

    def __init__(self) -> None:
        self._filter: Any = None
        self._lock = threading.Lock()

    def quiet(self) -> None:
        """From now on, until :meth:`restore`, if PyTorch's anomaly mode is on."""
        torch = sys.modules.get("torch")
        is_enabled = getattr(torch, "is_anomaly_enabled", None)
        if is_enabled is None or not is_enabled():
            return
        with self._lock:
            if self._filter is None:
                warnings.filterwarnings(
                    "ignore",
                    message=_TORCH_ANOMALY_WARNING,
                    category=UserWarning,
                    module=r"torch\.autograd\.graph",
                )
                self._filter = warnings.filters[0]

    def restore(self) -> None:
        """Take the filter out again."""
        with self._lock:
            entry, self._filter = self._filter, None
        filters: list[Any] = warnings.filters  # type: ignore[assignment]  # a list at run time
        if entry is not None and entry in filters:
            filters.remove(entry)
            warnings._filters_mutated()  # type: ignore[attr-defined]


class _Paused:
    """An engine thread waiting at the gate with its event."""

    __slots__ = ("cancel", "event", "permit", "record", "thread")

    def __init__(self, event: Event) -> None:
        self.event = event
        self.thread = event.thread
        self.permit = False
        self.cancel = False
        self.record: TraceEvent | None = None


class Gate:
    """A live session's gate on its target's engine events (see the module notes).

    Args:
        target: the code the session runs (whose thread and graph tasks are gated).
        record: where what is let through is recorded.
        settle_timeout: how long a step waits for quiescence before choosing among
            the threads already paused.
    """

    def __init__(self, target: Target, record: SessionRecord, settle_timeout: float) -> None:
        self._target = target
        self._record = record
        self._settle_timeout = settle_timeout
        self.listener = self._gate
        """The event listener (one bound method, so that unsubscribing finds it)."""
        self.truncated = False
        """The record reached ``max_events``: the gate no longer gates or records."""
        self.kept_finding = False
        """The call where the flight recorder found a NaN or Inf has ended: the gate no
        longer gates or records (Note [A live flight recorder])."""
        self.cancelled = False
        """Whether :meth:`cancel` was called."""
        self._cond = threading.Condition(threading.Lock())
        self._paused: list[_Paused] = []
        self._gated = True
        self._settled_tasks: set[int] = set()  # ended, failed or cancelled: never cancel again
        self._active_breakpoints: tuple[Breakpoint, ...] = ()
        self._hit: TraceEvent | None = None
        self._last_thread: str | None = None
        self._tasks: set[int] = set()  # see Note [Whose work a session gates]
        self._finished = False
        self._quiet = _QuietAnomaly()
        self._forked = False  # Note [Whose work a session gates]: in a forked child
        self._said_forked = False
        _gates.add(self)

    def _say_unwatched(self, event: Event) -> None:
        """A forked child's first backward: one line says it runs unwatched."""
        if self._said_forked or event.kind != "graph_task_start":
            return
        self._said_forked = True
        try:
            sys.stderr.write(
                f"autograd-viz: process {os.getpid()}, forked from the program, runs its "
                "backward calls unwatched: the TUI steps the program's own process\n"
            )
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    @property
    def finished(self) -> bool:
        """Whether the target has returned (or raised) and no engine thread is paused."""
        with self._cond:
            return self._finished and not self._paused

    def finish(self) -> None:
        """The target returned or raised: it gates nobody from now on (Note [Whose work a
        session gates]); what still waits at the gate is let through."""
        with self._cond:
            self._finished = True
            self._release_all()
            self._cond.notify_all()
        self._quiet.restore()  # Note [A cancel is no error of the node]

    def call_started(self) -> None:
        """A backward call starts: is it one the session gates (the record's window)?"""
        if self._target.on_it:
            with self._cond:
                self._record.call_started()

    def call_ended(self) -> None:
        """The call ended: what the target does next (a forward, its NaN checks) is gated,
        unless it held the flight recorder's finding (Note [A live flight recorder])."""
        if self._target.on_it:
            with self._cond:
                self._record.call_ended()
                if self._record.window.ended_finding and not self.kept_finding:
                    self.kept_finding = True
                    self._gated = False
                    self._release_all()
                    self._cond.notify_all()

    @property
    def _closed(self) -> bool:
        """The target ended, or the gate stopped recording it (``max_events``, a finding)."""
        return self._finished or self.truncated or self.kept_finding

    def cancel(self) -> None:
        """Stop gating: paused threads go on with :class:`SessionCancelled`, and a step or
        free run waiting on another thread returns at once."""
        with self._cond:
            self.cancelled = True
            self._gated = False
            for paused in self._paused:
                paused.cancel = True
                ACTIVITY.unblock()
            self._paused.clear()
            self._cond.notify_all()

    # -- the engine side: the listener, on engine threads ----------------------------

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
    # forgotten session (a notebook) never hangs a later backward. A process
    # forked from the target's (multiprocessing's fork start, os.fork) has no
    # UI to step it: the session gates nothing there, and says so in one line
    # on the child's stderr at its first backward (its parent would otherwise
    # wait forever for a child paused at a gate nobody opens).

    def _owns(self, event: Event) -> bool:
        """Whether ``event`` is the target's engine work (Note [Whose work a session gates])."""
        if self._closed:
            return False
        if self._forked:
            self._say_unwatched(event)
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
        """The listener: pause, record or cancel ``event`` if it is the target's."""
        if not self._owns(event):
            return
        with self._cond:
            if self.cancelled:
                self._after_cancel(event)
                return
            if self._closed:  # while this thread waited for the lock
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
            if not self._gated and (
                record is self._record.window.finding  # Note [A live flight recorder]
                or any(b.matches(record) for b in self._active_breakpoints)
            ):
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
        """After a stop: fail every unfinished graph task at its next event."""
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
        self._quiet.quiet()  # Note [A cancel is no error of the node]
        raise SessionCancelled(
            "the live session was stopped; this backward pass was cancelled "
            f"at {event.kind} {event.node_name or ''}".rstrip()
        )

    # -- the controller side: the thread that steps ------------------------------------
    def release_one(self, timeout: float | None) -> TraceEvent | None:
        """Let exactly one paused event through (Note [One step at a time]) and return it
        once recorded; ``None`` when the target finished without another, or on a cancel.

        Raises:
            TimeoutError: ``timeout`` seconds passed with no event to let through.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._settle()
            with self._cond:
                if self.cancelled:
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
                if self._closed:
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
        while not self.cancelled:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or ACTIVITY.wait_quiescent(min(remaining, 0.05)):
                return

    def _let_through(self, paused: _Paused) -> bool:
        return paused.record is not None or self.cancelled

    def _choose(self) -> _Paused:
        for paused in self._paused:
            if paused.thread == self._last_thread:
                return paused
        return min(self._paused, key=lambda p: (p.thread, p.event.seq))

    def free_run(
        self, breakpoints: tuple[Breakpoint, ...], timeout: float | None
    ) -> tuple[bool, TraceEvent | None]:
        """Open the gate until an event matches one of ``breakpoints`` or is the flight
        recorder's finding (closed again there), the target finishes, the gate stops
        recording or a cancel; returns whether that happened within ``timeout``, and the
        event that matched, if one did."""
        with self._cond:
            self._hit = None
            self._active_breakpoints = breakpoints
            self._gated = False
            self._release_all()
            self._cond.notify_all()
            done = self._cond.wait_for(
                lambda: self._hit is not None or self._closed or self.cancelled,
                timeout,
            )
            hit = self._hit
            self._gated = not self.cancelled
        return done, hit

    def wait_finished(self, timeout: float | None) -> bool:
        """Wait until the target has ended (or a cancel); returns whether it did in time."""
        with self._cond:
            return self._cond.wait_for(lambda: self._finished or self.cancelled, timeout)

    def pause(self) -> None:
        """Make a free run stop at the next event; nothing when none is in progress."""
        with self._cond:
            if not self._gated:
                self._active_breakpoints = (Breakpoint(),)  # matches every event
