"""What a live session lets through and keeps: its record, and the window of calls it keeps.

Note [A live flight recorder]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
With ``last`` a session keeps only the target's last N gated calls, so the
TUI can follow a long run (to the step where a NaN is born) in bounded
memory and still step back over the calls before it. A call's events run
from the end of the kept call before it (its forward pass, with the NaN
checks' findings) to its own end. When a kept call starts while N-1
finished ones are held, the oldest go (:func:`forget_before`): not at once
on the target's thread, which runs on between two steps while the UI reads
the trace, but when the session records the new call's first event, while
whoever drives the session waits for it in a move; it learns how many
events went from :attr:`CallWindow.dropped`.

It stops where ``record --last`` stops: at the first event that holds a NaN
or an Inf (an ``anomaly`` event of the NaN checks, or a gradient summarized
with one: :func:`~autograd_viz.trace.recording.finds`). That event is the
window's :attr:`CallWindow.finding`; a free run stops there, as at a
breakpoint, whatever breakpoints are set (``e`` too), so the view opens on it
with the calls before it still kept. The call that holds it is recorded to its
end; then the session gates and records nothing more (Note [Whose work a
session gates]): the window keeps that call and the N-1 before it, which is
what ``-o`` writes, while the program runs on unwatched.
"""

from __future__ import annotations

import collections

from autograd_viz.trace import Trace, TraceEvent
from autograd_viz.trace.calls import CallSelection
from autograd_viz.trace.recorder import Recorder
from autograd_viz.trace.recording import finds
from autograd_viz.trace.stream import forget_before
from engine.events import DATA, Event


class CallWindow:
    """Which of the target's backward calls a session gates, and the last N it keeps
    (Note [A live flight recorder]).

    Args:
        calls: the calls to gate (``steps``, ``every``) and how many to keep
            (``last``); ``None`` gates and keeps them all.
        gradients: with ``last``, a gradient summarized with a NaN or Inf stops the
            window too, not only an ``anomaly`` event (values are summarized).
    """

    def __init__(self, calls: CallSelection | None, gradients: bool = False) -> None:
        self.selection = calls if calls is not None and calls.filters else None
        """The ``steps`` and ``every`` of the calls gated, or ``None`` for every call."""
        self.last = calls.last if calls is not None else None
        """How many calls are kept, or ``None`` for every one."""
        self.seen = 0
        """The target's backward calls so far, gated or not."""
        self.kept = True
        """Whether the target's call now running (or its next one) is gated."""
        self.dropped = 0
        """Events forgotten so far, as older calls left the window."""
        self.gradients = gradients
        """Whether a non-finite gradient is a finding, besides an ``anomaly`` event."""
        self.finding: TraceEvent | None = None
        """With ``last``: the first event kept that holds a NaN or Inf, as the trace holds it
        now (Note [A live flight recorder])."""
        self.ended_finding = False
        """The call that holds :attr:`finding` has ended: nothing more is kept."""
        self._ends: collections.deque[int] = collections.deque()  # each kept call's end
        self._due = False  # a kept call has started: make room at its first event

    @property
    def counts(self) -> bool:
        """Whether the target's calls are counted (``steps``, ``every`` or ``last``)."""
        return self.selection is not None or self.last is not None

    def started(self) -> int | None:
        """The target starts a backward call: its index in the run when it is gated."""
        index = self.seen
        self.seen += 1
        self.kept = self.selection is None or self.selection.wants(index)
        if not self.kept:
            return None
        self._due = self.last is not None
        return index

    def ended(self, recorded: int) -> None:
        """The target's call ended with ``recorded`` events in the trace."""
        if self.kept and self.last is not None:
            self._ends.append(recorded)
            # A finding in the forward before a call is that call's: it ends with the call.
            self.ended_finding = self.finding is not None
        self.kept = True  # what the target does next (a forward, its NaN checks) is gated

    def found(self, event: TraceEvent) -> bool:
        """Whether ``event``, just kept, is the window's first finding (then it is kept as
        :attr:`finding`)."""
        if self.last is None or self.finding is not None or not finds((event,), self.gradients):
            return False
        self.finding = event
        return True

    def make_room(self, trace: Trace) -> tuple[int, tuple[int, ...]]:
        """Before recording an event: forget the calls past the last N, if one just started.

        Returns:
            How many events were forgotten, and which graph tasks.
        """
        if not self._due:
            return 0, ()
        self._due = False
        assert self.last is not None
        excess = len(self._ends) - (self.last - 1)
        if excess <= 0:
            return 0, ()
        cut = self._ends[excess - 1]
        self._ends = collections.deque(end - cut for end in list(self._ends)[excess:])
        before = len(trace.events)
        with trace.lock:
            gone = forget_before(trace, cut)
            forgotten = before - len(trace.events)
            if self.finding is not None:  # found in the forward before this call: renumbered
                seq = self.finding.seq
                self.finding = next((e for e in reversed(trace.events) if e.seq == seq), None)
        self.dropped += forgotten
        return forgotten, gone


class SessionRecord:
    """What a session let through, and where its view of it stands: recording and moving back.

    Args:
        max_values: tensors with at most this many elements keep their values.
        values: which gradients are summarized (Note [Values tiers]).
        calls: which of the target's calls are gated and kept (:class:`CallWindow`).
        max_events: the most events kept (``None``: no limit).
    """

    def __init__(
        self,
        max_values: int,
        values: str,
        calls: CallSelection | None,
        max_events: int | None,
    ) -> None:
        self.recorder = Recorder(max_values, arrival_order=True, values=values)
        """The recorder, in the order the session lets events through."""
        self.window = CallWindow(calls, gradients=values != "none")
        """Which calls are gated, and the last N kept."""
        self.max_events = max_events
        """The most events kept."""
        self.position = 0
        """The step shown; less than :attr:`frontier` after moving back."""

    @property
    def trace(self) -> Trace:
        """Every event kept, in the order it was let through."""
        return self.recorder.trace

    @property
    def frontier(self) -> int:
        """How many events are kept."""
        return len(self.recorder.trace.events)

    def replayed(self) -> TraceEvent | None:
        """Move forward over an event already kept, if :attr:`position` is behind."""
        if self.position >= self.frontier:
            return None
        self.position += 1
        return self.trace.events[self.position - 1]

    def back(self, steps: int) -> int:
        """Move :attr:`position` back over kept events; returns it."""
        self.position = max(0, self.position - steps)
        return self.position

    def record(self, event: Event) -> tuple[TraceEvent, tuple[int, ...]]:
        """Keep ``event`` (its session holds the lock, so events are kept in the order let
        through), first forgetting the calls past the window (Note [A live flight recorder]).

        Returns:
            The event as kept (or as shown, when a recorder error cut its graph task), and
            the graph tasks forgotten to make room for it.
        """
        recorder = self.recorder
        forgotten, gone = self.window.make_room(recorder.trace)
        if forgotten:
            self.position = max(0, self.position - forgotten)
        before = len(recorder.trace.events)
        try:
            recorder(event)
        except Exception as exc:  # as the hub does for it (Note [Listener errors])
            if getattr(exc, "_engine_propagate", False):
                raise
            recorder.on_error(exc, event.graph_task)  # cuts that graph task; the next are recorded
        events_ = recorder.trace.events
        if len(events_) == before:  # of a graph task cut by a recorder error: shown, not kept
            return TraceEvent._make((before, *event[:DATA], {})), gone
        kept = events_[-1]
        self.window.found(kept)
        return kept, gone

    @property
    def full(self) -> bool:
        """Whether :attr:`max_events` are kept."""
        return self.max_events is not None and self.frontier >= self.max_events

    def call_started(self) -> None:
        """The target starts a backward call (the session's lock held)."""
        self.recorder.set_call(self.window.started())

    def call_ended(self) -> None:
        """The target's call ended (the session's lock held)."""
        self.window.ended(self.frontier)
        self.recorder.set_call(None)
