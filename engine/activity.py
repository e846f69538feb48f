"""How many engine threads are busy: what a debugger needs to step deterministically.

Note [Quiescence]
~~~~~~~~~~~~~~~~~
A debugger that pauses engine threads at events (``autograd_viz``'s live
sessions) must know, before it releases the next event, that every engine
thread has either reached an event and is paused there, or is blocked
waiting for work. Otherwise which thread reaches the debugger next would
depend on timing, and stepping would not be repeatable.

The engine therefore counts the threads *inside* it (device and pool threads
for their whole life, a user thread for the duration of its ``backward()``
call) and those *blocked*: asleep in a ready queue's ``pop``, on a
:class:`TrackedLock`, on a :class:`Completion`, or paused by a debugger. The
engine is quiescent when the two counts are equal.

Whoever wakes a blocked thread counts it as running *before* waking it (the
push that notifies a sleeping ``pop``, the release of a contended lock), so a
thread that is runnable but not yet scheduled never looks blocked.

The counts cost one lock round trip on paths that block anyway. Graph-task
locks are :class:`TrackedLock` only while a debugger asked for tracking
(:meth:`Activity.track`); plain locks otherwise.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = [
    "ACTIVITY",
    "Activity",
    "Completion",
    "TrackedLock",
]


class Activity:
    """The process-wide counts of Note [Quiescence]."""

    __slots__ = ("_cond", "_lock", "_watchers", "blocked", "inside", "tracking")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._watchers = 0
        """Threads in :meth:`wait_quiescent`: only they need waking when a count moves."""
        self.inside = 0
        """Threads inside the engine."""
        self.blocked = 0
        """Of those, threads blocked (waiting for work, a lock, or a debugger)."""
        self.tracking = 0
        """How many debuggers asked for :class:`TrackedLock` graph-task locks."""

    # Every backward call enters and leaves, so both take the plain lock (no
    # Python-level ``Condition.__enter__``) and wake no one unless a debugger
    # is waiting for quiescence.

    def enter(self) -> None:
        """This thread starts working for the engine."""
        with self._lock:
            self.inside += 1

    def leave(self) -> None:
        """This thread stops working for the engine."""
        with self._lock:
            self.inside -= 1
            if self._watchers:
                self._cond.notify_all()

    def block(self, n: int = 1) -> None:
        """``n`` threads are about to block."""
        with self._lock:
            self.blocked += n
            if self._watchers:
                self._cond.notify_all()

    def unblock(self, n: int = 1) -> None:
        """``n`` blocked threads are being woken (called by whoever wakes them)."""
        with self._lock:
            self.blocked -= n

    def quiescent(self) -> bool:
        """Whether every thread inside the engine is blocked."""
        return self.inside == self.blocked

    def wait_quiescent(self, timeout: float | None = None) -> bool:
        """Wait until :meth:`quiescent`; returns ``False`` if ``timeout`` expired first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._watchers += 1
            try:
                while self.inside != self.blocked:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._cond.wait(remaining)
                return True
            finally:
                self._watchers -= 1

    def track(self, on: bool) -> None:
        """Ask for (or stop asking for) tracked graph-task locks."""
        with self._lock:
            self.tracking += 1 if on else -1

    def new_lock(self) -> Any:
        """A lock for a new graph task: tracked while a debugger asks for it."""
        return TrackedLock() if self.tracking else threading.Lock()


ACTIVITY = Activity()
"""The engine's counts; see Note [Quiescence]."""


class TrackedLock:
    """A mutex whose waiters count as blocked (see Note [Quiescence])."""

    __slots__ = ("_cond", "_held", "_waiting")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._held = False
        self._waiting = 0

    def acquire(self) -> bool:
        """Take the lock, waiting (counted as blocked) while another thread holds it."""
        with self._cond:
            while self._held:
                self._waiting += 1
                ACTIVITY.block()
                self._cond.wait()  # the releaser counted us as running again
            self._held = True
        return True

    def release(self) -> None:
        """Give the lock back, counting one waiter as running before waking it."""
        with self._cond:
            self._held = False
            if self._waiting:
                self._waiting -= 1
                ACTIVITY.unblock()
                self._cond.notify()

    def __enter__(self) -> TrackedLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Completion:
    """A one-shot flag to wait on (a graph task's future); its waiters count as blocked.

    Its condition is made by the first waiter (Note [A condition made when first
    needed] in :mod:`engine.graph_task`): most graph tasks are waited on by no one.
    """

    __slots__ = ("_cond", "_lock", "_set", "_waiting")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond: threading.Condition | None = None
        self._set = False
        self._waiting = 0

    def set(self) -> None:
        """Mark it done and wake every waiter."""
        with self._lock:
            self._set = True
            if self._waiting:
                ACTIVITY.unblock(self._waiting)
                self._waiting = 0
                assert self._cond is not None  # the first waiter made it
                self._cond.notify_all()

    def is_set(self) -> bool:
        """Whether :meth:`set` was called."""
        return self._set

    def wait(self) -> None:
        """Block until :meth:`set`."""
        with self._lock:
            while not self._set:
                self._waiting += 1
                ACTIVITY.block()
                if self._cond is None:
                    self._cond = threading.Condition(self._lock)
                self._cond.wait()
