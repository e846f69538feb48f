"""What the TUI steps through: a recorded trace, or a program running live.

Both drivers move a position over a trace's events and answer with the
:class:`~autograd_viz.trace.replay.ExecutionState` there. A :class:`ReplayDriver`
only moves over events already recorded, so it never blocks. A
:class:`LiveDriver` moves over what its :class:`~autograd_viz.live.LiveSession`
has recorded and, past that, lets the engine take its next steps; those calls
block until the engine emits, so the app runs them in a worker thread.

Breakpoints (:class:`ContinueStops`) belong to the driver, not to the app: a node
breakpoint stops when that node starts running; "break on non-finite" stops at an event that carries
a NaN or Inf gradient, and at anomaly events (a forward birth where its values reach
something: Note [Breaking where a value reaches something] in ``live/breakpoints.py``);
``error`` events always stop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from autograd_viz.live import Breakpoint, LiveSession, is_problem, problems
from autograd_viz.trace import Trace, TraceEvent
from autograd_viz.trace.replay import ExecutionState


@dataclass
class ContinueStops:
    """Where ``continue`` stops."""

    nodes: set[int] = field(default_factory=set)
    """Node ids: stop when one of these nodes starts."""
    non_finite: bool = False
    """Stop at the first event with a NaN or Inf gradient, or an anomaly."""

    def matches(self, event: TraceEvent) -> bool:
        """Whether ``continue`` stops after applying ``event``."""
        if event.kind == "error":
            return True
        if event.kind == "node_start" and event.node_id in self.nodes:
            return True
        return self.non_finite and is_problem(event)

    def toggle(self, node_id: int) -> bool:
        """Add or remove a node breakpoint; returns whether it is now set."""
        if node_id in self.nodes:
            self.nodes.discard(node_id)
            return False
        self.nodes.add(node_id)
        return True


class Driver:
    """Moves over a trace; subclasses say how the trace grows."""

    live = False
    """Whether a program is running behind the trace."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        """Every event seen so far."""
        self.position = 0
        """How many events are applied in :meth:`state`."""
        self.breakpoints = ContinueStops()
        """Where :meth:`continue_` stops."""

    @property
    def recorded(self) -> int:
        """How many events the trace holds now."""
        return len(self.trace.events)

    @property
    def finished(self) -> bool:
        """Whether no event will ever come after the recorded ones."""
        return True

    @property
    def recorded_all(self) -> bool:
        """Whether the trace is complete: the program behind it has ended (or there is none)."""
        return True

    @property
    def truncated(self) -> bool:
        """Whether recording stopped at the session's ``max_events`` while the program ran on."""
        return False

    @property
    def kept_calls(self) -> int | None:
        """How many of the program's last backward calls are kept (``run --last``), if limited."""
        return None

    @property
    def finding(self) -> TraceEvent | None:
        """Where the kept calls' flight recorder found a NaN or Inf (``run --last``), if it did:
        a move forward stops there (Note [A live flight recorder] in ``live/record.py``)."""
        return None

    @property
    def kept_finding(self) -> bool:
        """The call that holds :attr:`finding` has ended: the program runs on unrecorded."""
        return False

    def state(self) -> ExecutionState:
        """The engine after :attr:`position` events."""
        return self.trace.state_at(self.position)

    def goto(self, step: int) -> int:
        """Move to ``step`` among the recorded events (clamped); returns the position."""
        self.position = max(0, min(step, self.recorded))
        return self.position

    def back(self) -> int:
        """Undo one event."""
        return self.goto(self.position - 1)

    def back_node(self) -> int:
        """Move back to just after the previous ``node_start`` (or to step 0)."""
        events = self.trace.events
        for index in range(self.position - 2, -1, -1):
            if events[index].kind == "node_start":
                return self.goto(index + 1)
        return self.goto(0)

    def step(self) -> TraceEvent | None:
        """Apply one more event; ``None`` at the end."""
        if self.position < self.recorded:
            self.position += 1
            return self.trace.events[self.position - 1]
        return None

    def step_node(self) -> TraceEvent | None:
        """Step until a ``node_start`` is applied; ``None`` at the end."""
        return self._advance(lambda event: event.kind == "node_start")

    def continue_(self) -> TraceEvent | None:
        """Step until a breakpoint matches; ``None`` at the end."""
        return self._advance(self.breakpoints.matches)

    def run_to_end(self) -> TraceEvent | None:
        """Apply every event (live with ``run --last``: up to :attr:`finding`, returned)."""
        self._advance(lambda event: False)
        return None

    def first_problem(self) -> TraceEvent | None:
        """Move to just after the first anomaly, error or non-finite gradient, if any."""
        return self._find(problems(self.trace.events), start=0)

    def start(self) -> None:
        """Begin (a replay has nothing to start)."""

    def stop(self) -> None:
        """End the session (a replay has nothing to stop)."""

    def pause(self) -> None:
        """Stop a running ``continue`` at the next event (a replay never runs on its own)."""

    def _advance(self, stop_at: Callable[[TraceEvent], bool]) -> TraceEvent | None:
        return self._find(stop_at, start=self.position, to_end=True)

    def _find(
        self, stop_at: Callable[[TraceEvent], bool], start: int, to_end: bool = False
    ) -> TraceEvent | None:
        events = self.trace.events
        for index in range(start, len(events)):
            if stop_at(events[index]):
                self.position = index + 1
                return events[index]
        if to_end:
            self.position = len(events)
        return None


INDEX_CHUNK = 2048
"""Events a replay indexes ahead at a time (Note [A replay indexes ahead])."""

# Note [A replay indexes ahead]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A state at step k is the nearest checkpoint plus at most CHECKPOINT_EVERY
# events, once the trace is indexed that far; a trace is indexed lazily, so
# that its first steps come at once. The first jump far ahead (e, a, a click
# on a late event) would then index everything before it: seconds for a
# 100,000-event trace. So a replay indexes the rest in a thread from the start,
# a chunk at a time; the replayer lets one thread index at a time, and a seek
# waits for at most the chunk under way. Should indexing fail (a trace that
# cannot be replayed past some event), the thread stops there: the seek that
# reaches that event meets the same error on the UI's thread, which shows it.


class ReplayDriver(Driver):
    """Steps through a recorded trace, indexing it ahead in a thread (see the note above)."""

    def __init__(self, trace: Trace) -> None:
        super().__init__(trace)
        self.indexed = threading.Event()
        """Set once every event is indexed (or indexing ahead stopped)."""
        self._stopping = False

    def start(self) -> None:
        """Index the trace ahead, in a thread when it is long."""
        if len(self.trace.events) <= INDEX_CHUNK:
            self.indexed.set()
            return
        self.trace.state_at(0)  # the replayer is made here, on the caller's thread
        thread = threading.Thread(target=self._index, name="autograd-viz index", daemon=True)
        thread.start()

    def stop(self) -> None:
        """Stop indexing ahead."""
        self._stopping = True

    def _index(self) -> None:
        total = len(self.trace.events)
        step = 0
        try:
            while step < total and not self._stopping:
                step = min(total, step + INDEX_CHUNK)
                self.trace.state_at(step)
        except Exception:  # noqa: BLE001 - the seek that gets there shows it (see the note)
            pass
        finally:
            self.indexed.set()


class LiveDriver(Driver):
    """Steps a program through a :class:`LiveSession`; forward moves may block.

    Only one blocking move runs at a time; the app runs them in a worker thread
    and keeps the UI responsive. :meth:`stop` cancels the backward in progress.
    """

    live = True

    def __init__(self, session: LiveSession, *, attached: bool = False) -> None:
        super().__init__(session.trace)
        self.session = session
        """The session running the program."""
        self.attached = attached
        """The session was :meth:`~LiveSession.attach`-ed to a thread that runs the program
        itself (``autograd-viz run``, on the main thread): the driver never starts it, and
        :meth:`stop` only cancels it, so quitting never waits for the program."""
        self.interrupted = False
        """:meth:`stop` cancelled the program while it still ran (the user quit early)."""
        self._lock = threading.Lock()
        self._started = attached
        self._dropped = session.dropped

    @property
    def finished(self) -> bool:
        return self.session.finished and self.position >= self.recorded

    @property
    def recorded_all(self) -> bool:
        return self.session.finished

    @property
    def truncated(self) -> bool:
        return self.session.truncated

    @property
    def kept_calls(self) -> int | None:
        return self.session.last

    @property
    def finding(self) -> TraceEvent | None:
        return self.session.finding

    @property
    def kept_finding(self) -> bool:
        return self.session.kept_finding

    def goto(self, step: int) -> int:
        position = super().goto(step)
        self.session.position = position
        return position

    def step(self) -> TraceEvent | None:
        return self._live(super().step, self.session.step)

    def step_node(self) -> TraceEvent | None:
        return self._live(super().step_node, self.session.step_node)

    def continue_(self) -> TraceEvent | None:
        return self._live(super().continue_, lambda: self._run_until(self.breakpoints.matches))

    def run_to_end(self) -> TraceEvent | None:
        super().run_to_end()
        if self.session.finished:
            return None
        with self._lock:
            self.session.position = self.position
            return self._sync(self.session.run_to_end())

    def first_problem(self) -> TraceEvent | None:
        found = super().first_problem()
        if found is not None or self.session.finished:
            return found

        return self._live(lambda: None, lambda: self._run_until(is_problem))

    def start(self) -> None:
        """Start the program; it pauses at its first engine event."""
        if not self._started:
            self._started = True
            self.session.start()

    def stop(self) -> None:
        if self.attached:
            self.interrupted = not self.session.finished
            self.session.cancel()
        elif self._started:
            self.session.stop()

    def pause(self) -> None:
        self.session.pause()

    def _run_until(self, stop_at: Callable[[TraceEvent], bool]) -> TraceEvent | None:
        """Let the engine run freely until an event matches ``stop_at`` (or the end)."""
        self.session.breakpoints[:] = [Breakpoint(predicate=stop_at)]
        return self.session.continue_()

    def _live(
        self,
        recorded: Callable[[], TraceEvent | None],
        engine_move: Callable[[], TraceEvent | None],
    ) -> TraceEvent | None:
        """Try the move over recorded events first; then let the engine go on."""
        event = recorded()
        if event is not None:
            return self._sync(event)
        with self._lock:
            self.session.position = self.position
            return self._sync(engine_move())

    def _sync(self, event: TraceEvent | None) -> TraceEvent | None:
        dropped = self.session.dropped  # older calls forgotten during the move (run --last)
        if dropped != self._dropped:
            self.position = max(0, self.position - (dropped - self._dropped))
            self._dropped = dropped
        self.position = self.session.position = max(self.position, self.session.position)
        return event
