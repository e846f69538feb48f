"""Where backward calls from user code begin and end, for watchers that keep only some.

Note [Backward calls]
~~~~~~~~~~~~~~~~~~~~~
A recorder that keeps only some backward calls (every 100th, calls 10 to 12,
the last ten) must know where each call from user code starts and ends even
while nobody listens to events: it then listens during the calls it keeps
only, and a call it skips runs exactly as unwatched (Note [Free when nobody
listens] in ``engine/events.py``). Every source tells :data:`CALLS` when a
backward call from user code starts and ends, on the thread that made it: our
``Engine.execute`` on a user thread, and the PyTorch bridge's chokepoint. A
call started while this thread is already inside one (a reentrant backward,
or one engine's backward called from a node of the other) belongs to the
outer call and is not counted. With no watcher, a source pays one attribute
check per call.

A recorder that listens only for the calls it keeps starts listening when the
previous call ends (or when it starts recording) if the next call is one it
keeps, so that what a call's forward pass shows (the module calls, the NaN
checks) is seen too. While every such recorder waits for a call it does not
keep, :attr:`_Calls.idle` is non-zero: watchers of the forward pass that cost
something per op or per module call (the PyTorch bridge's module hooks) may
stop then (:attr:`_Calls.idle_changed`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

__all__ = ["CALLS", "CallWatcher"]


class CallWatcher(Protocol):
    """What :data:`CALLS` tells: called on the thread that makes the call."""

    def call_started(self) -> None:
        """A backward call from user code starts on this thread."""

    def call_ended(self) -> None:
        """The call this thread started has returned or raised."""


class _Calls:
    """The watchers of backward calls, and each thread's nesting (Note [Backward calls])."""

    __slots__ = ("_local", "_lock", "idle", "idle_changed", "watchers")

    def __init__(self) -> None:
        self.watchers: tuple[CallWatcher, ...] = ()
        """Sources check this first: empty, a call costs nothing more."""
        self.idle = 0
        """Recorders waiting, not listening, for a call they keep (Note [Backward calls])."""
        self.idle_changed: list[Callable[[bool], None]] = []
        """Called with ``True`` when :attr:`idle` leaves 0, with ``False`` when it returns."""
        self._lock = threading.Lock()
        self._local = threading.local()  # .depth: this thread's calls in progress

    def add(self, watcher: CallWatcher) -> None:
        """Tell ``watcher`` about every backward call from now on."""
        with self._lock:
            self.watchers = (*self.watchers, watcher)

    def remove(self, watcher: CallWatcher) -> None:
        """Stop telling ``watcher`` (no error if it was not added)."""
        with self._lock:
            self.watchers = tuple(w for w in self.watchers if w is not watcher)

    def set_idle(self, idle: bool) -> None:
        """One recorder starts (``True``) or stops waiting for a call it keeps."""
        with self._lock:
            before = self.idle
            self.idle += 1 if idle else -1
            changed = bool(before) != bool(self.idle)
        if changed:
            for then in self.idle_changed:
                then(idle)

    def start(self) -> bool:
        """A source starts a backward call on this thread; tell the watchers if it is outermost.

        Returns:
            Whether the call was counted: pass it to :meth:`end`.
        """
        local = self._local
        try:
            depth = local.depth
        except AttributeError:
            depth = 0
        local.depth = depth + 1
        if depth:
            return False
        for watcher in self.watchers:
            watcher.call_started()
        return True

    def end(self, counted: bool) -> None:
        """The call :meth:`start` began has ended (call it in a ``finally``)."""
        self._local.depth -= 1
        if counted:
            for watcher in self.watchers:
                watcher.call_ended()


CALLS = _Calls()
"""The process-wide watchers of backward calls."""
