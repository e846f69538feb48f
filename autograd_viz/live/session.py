"""Live sessions: run user code with a gate on engine events, step it, break, stop.

A :class:`LiveSession` runs a callable or a script in a background thread and
subscribes a gate to the engine's events. Every engine thread that emits an
event while the gate is closed pauses inside the listener until the session
lets that one event through. Everything let through is recorded into
:attr:`LiveSession.trace`, so the session can also move back over what it has
seen and forward again without touching the engine.

It is a small façade over one object per job: the target that runs
(:class:`~autograd_viz.live.running.Target`), the gate that pauses, lets
through and cancels the target's events (:class:`~autograd_viz.live.gate.Gate`,
Note [One step at a time]), the record of what was let through and moving
back over it (:class:`~autograd_viz.live.window.SessionRecord`), and the
hooks into the engine undone at stop (:class:`~autograd_viz.live.running.Hooks`).

A session gates only its target's engine work, and nobody once the target
has finished (Note [Whose work a session gates]); it records at most
``max_events`` events, and with ``calls.last`` only the target's last calls
(Note [A live flight recorder]).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from autograd_viz.launch.script import check_script
from autograd_viz.live.breakpoints import Breakpoint
from autograd_viz.live.gate import Gate, SessionCancelled  # noqa: F401 - its old home
from autograd_viz.live.running import Hooks, Target, run_script_raising
from autograd_viz.live.window import SessionRecord
from autograd_viz.trace import DEFAULT_MAX_VALUES, Trace, TraceEvent
from autograd_viz.trace.calls import CallSelection
from autograd_viz.trace.replay import ExecutionState
from autograd_viz.trace.text import LIVE_THREAD

if TYPE_CHECKING:
    from autograd_viz.trace.recorder import Recorder

DEFAULT_MAX_EVENTS = 1_000_000
"""The most events a live session records unless told otherwise (a 400 MB trace file)."""


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
        self._gate = Gate(self._target, self._record, settle_timeout)
        self._hooks = Hooks()
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

    @property
    def truncated(self) -> bool:
        """The session reached ``max_events``: it no longer gates or records the target."""
        return self._gate.truncated

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
        self._hooks.hook(self._gate.listener, self if self._record.window.counts else None)
        self._target.thread = thread

    def call_started(self) -> None:
        """A backward call starts (:data:`engine.calls.CALLS`): is it one the session gates?"""
        self._gate.call_started()

    def call_ended(self) -> None:
        """The call ended: what the target does next (a forward, its NaN checks) is gated."""
        self._gate.call_ended()

    def _main(self) -> None:
        try:
            self._target.main()
        finally:
            self._gate.finish()

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel the backward in progress, if any, and end the session.

        Paused engine threads are released with :class:`SessionCancelled`,
        which the user's code receives from ``backward()``; the target's
        thread is joined, worker threads the session started are shut down
        and the gate is unsubscribed. The engine stays usable.
        """
        self.cancel()
        self._target.join(timeout)
        self._hooks.unhook(self._gate.listener, self)
        self._record.recorder.close()  # the trace no longer changes once stop() returns
        self._hooks.leave(timeout)

    def cancel(self) -> None:
        """Cancel the backward in progress and stop gating, without waiting for anything.

        Paused engine threads go on with :class:`SessionCancelled`, and a
        :meth:`step` or :meth:`continue_` waiting on another thread returns
        ``None`` at once. :meth:`stop` does this first, then cleans up.
        """
        self._gate.cancel()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` (or :meth:`stop`) was called."""
        return self._gate.cancelled

    # -- what the session has seen ---------------------------------------------------
    @property
    def trace(self) -> Trace:
        """Every event let through so far, in the order it was let through."""
        return self._record.trace

    @property
    def recorder(self) -> Recorder:
        """What fills :attr:`trace`; a watch notes a call's findings into it (``run --why``)."""
        return self._record.recorder

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
    def finding(self) -> TraceEvent | None:
        """With ``calls.last``: the first event kept that holds a NaN or Inf, where a free run
        stopped; the session records nothing after the call that holds it (Note [A live
        flight recorder])."""
        return self._record.window.finding

    @property
    def kept_finding(self) -> bool:
        """The call that holds :attr:`finding` has ended: the target runs on unrecorded."""
        return self._gate.kept_finding

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
        return self._gate.finished

    def back(self, steps: int = 1) -> int:
        """Move :attr:`position` back over recorded events; returns the new position."""
        return self._record.back(steps)

    # -- moving forward --------------------------------------------------------------
    def step(self, timeout: float | None = None) -> TraceEvent | None:
        """Apply one event: replay a recorded one, or let the engine take one step.

        Returns:
            The event, or ``None`` when the target finished without another event (or the
            session stopped recording it).

        Raises:
            TimeoutError: ``timeout`` seconds passed with no event to let through.
        """
        replayed = self._record.replayed()
        if replayed is not None:
            return replayed
        if self._target.thread is None:
            raise RuntimeError("start the live session first")
        record = self._gate.release_one(timeout)
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
        """Run until an event matches a breakpoint or is the flight recorder's finding
        (returned, already applied), or the end.

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
        done, hit = self._gate.free_run(breakpoints, timeout)
        self.position = self.frontier
        if not done:
            raise TimeoutError(f"the target still runs after {timeout} s")
        return hit

    def pause(self) -> None:
        """Make a :meth:`continue_` running on another thread stop at the next event.

        Does nothing when no free run is in progress.
        """
        self._gate.pause()

    def run_to_end(self, timeout: float | None = None) -> TraceEvent | None:
        """Run the target to its end, ignoring breakpoints; with ``calls.last``, only up to
        the flight recorder's finding, which is returned (Note [A live flight recorder]).

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
        """
        found = self.continue_(timeout, ignore_breakpoints=True)
        if found is None and self.kept_finding and not self._gate.wait_finished(timeout):
            raise TimeoutError(f"the target still runs after {timeout} s")
        return found

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
