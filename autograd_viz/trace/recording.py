"""A recording of a run: a :class:`Recorder` and where the calls it keeps go.

Three places, chosen by the :class:`~autograd_viz.trace.calls.CallSelection`
and an output path:

* memory (no ``last``, no output): the :class:`~autograd_viz.trace.Trace`
  holds every recorded call, as :func:`~autograd_viz.trace.recorder.record`
  always did, unless someone reads the calls as they end (``observe``, as
  ``nan`` does): then memory holds only the call in flight;
* a file, written as calls end (an output, no ``last``): memory holds only the
  call in flight (Note [Streamed traces] in ``autograd_viz/trace/stream.py``);
* a :class:`FlightRecorder` (``last``): the last N recorded calls in memory,
  written when the run ends, when the program is stopped (the command line
  saves on SIGINT, SIGTERM and SIGHUP) or at once when a call holds a
  non-finite value (an ``anomaly`` event of the NaN checks; without them, a
  gradient it summarizes with a NaN or Inf): recording stops there, so the file
  keeps the call where the NaN was found and the N-1 before it. At the call
  level it holds PyTorch's calls underived and derives the N it writes (Note
  [Calls derived later] in ``autograd_viz/sources/pytorch/call_level.py``).
"""

from __future__ import annotations

import collections
import contextlib
import os
import stat
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from autograd_viz.sources.arming import every_source
from autograd_viz.trace.calls import CallSelection
from autograd_viz.trace.document import Trace
from autograd_viz.trace.recorder import HeldCalls, Recorder
from autograd_viz.trace.records import DEFAULT_MAX_VALUES, TraceEvent, TraceStats
from autograd_viz.trace.stream import TraceWriter, join
from autograd_viz.trace.summary import TensorSummary
from autograd_viz.trace.writing import open_output, write_whole


class FlightRecorder:
    """The last ``last`` recorded backward calls, in parts as the recorder hands them on.

    Args:
        last: how many calls to keep.
        gradients: stop at a gradient summarized with a NaN or Inf in it too, not only
            at an ``anomaly`` event (a recording without the NaN checks, which make
            those events: ``record --last``).
    """

    def __init__(self, last: int, gradients: bool = False) -> None:
        self.last = last
        """How many calls are kept."""
        self.gradients = gradients
        """Whether a non-finite gradient stops it, besides an ``anomaly`` event."""
        self.found = False
        """A part held an ``anomaly`` event (or, with :attr:`gradients`, a non-finite
        gradient): the recorder froze there."""
        self._parts: collections.deque[tuple[Trace, int]] = collections.deque()
        self._calls = 0
        self._lock = threading.Lock()

    def add(self, part: Trace, calls: int) -> bool:
        """Keep ``part`` (``calls`` backward calls); drop the oldest parts past :attr:`last`.

        Returns:
            Whether ``part`` holds a non-finite value (then nothing more is kept).
        """
        with self._lock:
            if self.found:
                return False
            parts = self._parts
            parts.append((part, calls))
            self._calls += calls
            while len(parts) > 1 and self._calls - parts[0][1] >= self.last:
                self._calls -= parts.popleft()[1]
            self.found = finds(part.events, self.gradients)
            return self.found

    def trace(self, header: dict[str, object]) -> Trace:
        """The calls kept, as one trace (held calls derived now: Note [Calls derived later]
        in ``autograd_viz/sources/pytorch/call_level.py``)."""
        with self._lock:
            return join([_derived(part) for part, _ in self._parts], header)

    @property
    def calls(self) -> int:
        """How many calls are held now."""
        return self._calls


_GRADIENTS = frozenset({"node_end", "accumulate", "capture"})
"""The events whose summaries are gradients: a node's outputs, a buffer's or a leaf's sum,
what ``grad()`` captured."""


_claims: weakref.WeakSet[Recording] = weakref.WeakSet()
"""Every recording holding its flight recorder's file, for :func:`_forget_in_child`."""


def _forget_in_child() -> None:
    """A forked child lets go of its copy of each flight recorder's file (and so of its lock):
    the parent writes it."""
    for recording in list(_claims):
        claim, recording._claim = recording._claim, None
        if claim is not None:
            with contextlib.suppress(OSError):
                os.close(claim)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def finds(events: Iterable[TraceEvent], gradients: bool) -> bool:
    """Whether ``events`` hold an ``anomaly`` event or, with ``gradients``, a non-finite one:
    where a flight recorder stops (this one, and a live session's: ``run --last``)."""
    if not gradients:
        return any(e.kind == "anomaly" and _counts(e.data) for e in events)
    for e in events:
        kind = e.kind
        if (kind == "anomaly" and _counts(e.data)) or (kind in _GRADIENTS and _non_finite(e.data)):
            return True
    return False


def _counts(data: Mapping[str, Any]) -> bool:
    """Whether an ``anomaly`` event is a finding: not a numbered forward birth, which counts
    only once an event says its values reached the loss, a gradient, a parameter or the
    model's output (Note [Lineage] in ``autograd_viz/nan/forward/lineage.py``)."""
    return "birth" not in data


def _non_finite(data: Mapping[str, Any]) -> bool:
    """Whether an event's data holds a summary with a NaN or an Inf (alone or in a sequence)."""
    for value in data.values():
        if type(value) is TensorSummary:
            if value.nan_count or value.inf_count:
                return True
        elif type(value) is tuple or type(value) is list:
            for item in value:
                if type(item) is TensorSummary and (item.nan_count or item.inf_count):
                    return True
    return False


def _derived(part: Trace) -> Trace:
    """``part`` with its held calls derived, if it holds some."""
    return part.trace() if isinstance(part, HeldCalls) else part


class Recording:
    """A :class:`Recorder` for a run and where its calls go (see the module's docstring).

    Args:
        max_values: tensors with at most this many elements keep their values.
        calls: which backward calls to record, and how many to keep.
        output: the trace file: written as calls end, or with ``calls.last``,
            when the recording ends or finds a non-finite value.
        gated: listen to events only while a recorded call runs (a call not
            recorded then costs next to nothing); a recording that needs every
            event, such as the NaN checks' findings, says ``False``. A gated
            flight recorder, which gets no such findings, stops at the first
            gradient it summarizes with a NaN or Inf; an ungated one at the
            first ``anomaly`` event.
        values: which gradients are summarized: ``"all"``, ``"leaves"``,
            ``"none"`` (Note [Values tiers] in ``autograd_viz/trace/records.py``).
        observe: called with each finished part (whole calls, in order) before
            it goes to the file or the flight recorder; without either, the
            part is then dropped, so the trace holds only the calls in flight.
        watch: ``"nodes"`` or ``"calls"`` (Note [Observation levels] in
            ``autograd_viz/trace/records.py``).

    Raises:
        OutputBusyError: another process is writing ``output``.
        OSError: the output file cannot be created.
        ValueError: ``values`` is not a tier.
    """

    def __init__(
        self,
        max_values: int = DEFAULT_MAX_VALUES,
        calls: CallSelection | None = None,
        output: str | os.PathLike[str] | None = None,
        gated: bool = True,
        values: str = "all",
        observe: Callable[[Trace], object] | None = None,
        watch: str = "nodes",
    ) -> None:
        self.calls = calls if calls is not None else CallSelection()
        """Which calls are recorded."""
        self.output = None if output is None else os.fspath(output)
        """The trace file, if any."""
        self.gated = gated
        # Without the NaN checks (gated), their anomaly events never come: the flight
        # recorder stops at the first gradient it summarizes with a NaN or Inf instead
        # (with values "none" it summarizes none: nothing to read).
        last = self.calls.last
        gradients = gated and values != "none"
        self.ring = FlightRecorder(last, gradients) if last is not None else None
        """The flight recorder (with ``last``)."""
        self.observe = observe
        """What reads each finished part, if anything."""
        in_memory = self.ring is None and self.output is None and observe is None
        self.recorder = Recorder(
            max_values,
            calls=self.calls,
            on_calls=None if in_memory else self._take,
            values=values,
            observe=watch,
        )
        """The event listener."""
        # A flight recorder at the call level derives only the calls it still holds when
        # it is written (Note [Calls derived later] in sources/pytorch/call_level.py).
        self.recorder.takes_calls = self.ring is not None and watch == "calls" and observe is None
        self.writer: TraceWriter | None = None
        """The streamed file (with an output and no ``last``)."""
        self._claim: int | None = None  # the flight recorder's file, held from the start
        if self.output is not None and self.ring is None:
            self.writer = TraceWriter(self.output, self.recorder.trace.header)
        elif self.output is not None:
            # Opened (through a link, locked) now, so that a second run writing the same file
            # is told before it runs; written when the recording ends (Note [Writing an output
            # file] in autograd_viz/trace/writing.py).
            self._claim = open_output(self.output, truncate=False)
            _claims.add(self)
            opened = os.fstat(self._claim)
            if stat.S_ISREG(opened.st_mode) and opened.st_size == 0:
                write_whole(self._claim, Trace(self.recorder.trace.header))  # loads until then
        self.saved_found = False
        """The flight recorder was written when it found a non-finite value."""
        self.save_error: OSError | None = None
        """Why the flight recorder's file could not be written, if it could not."""
        self._finished = False
        self._pid = os.getpid()
        self.forks_observe = False
        """A forked child hands its calls to ``observe`` instead of keeping them (it prints
        them: ``run --print``)."""

    @property
    def trace(self) -> Trace:
        """What :func:`record` yields: filled as calls end, or with ``last`` when it ends."""
        return self.recorder.trace

    @contextmanager
    def running(self) -> Iterator[Recording]:
        """Record inside the block (every source armed); :meth:`finish` after it."""
        try:
            with every_source(), self.recorder.listening(gated=self.gated):
                yield self
        finally:
            self.finish()

    def finish(self) -> None:
        """Stop recording and put what was kept in place: the trace, the file. Safe twice."""
        self.recorder.close()
        if self._finished or os.getpid() != self._pid:
            return
        self._finished = True
        trace = self.recorder.trace
        if self.ring is not None:
            kept = self.ring.trace(trace.header)
            with trace.lock:
                trace.events, trace.graph_tasks = kept.events, kept.graph_tasks
                trace._replayer = None
            if self.output is not None and not self.saved_found:
                self._save(kept)
            self.release()
        elif self.writer is not None:
            self.writer.close(trace.header)

    def stats(self) -> TraceStats:
        """What was recorded: written to the file, or held in the trace."""
        if self.writer is not None:
            return self.writer.stats()
        return self.recorder.trace.stats()

    def events_recorded(self) -> int:
        """Events recorded so far (for a progress line)."""
        written = self.writer.events if self.writer is not None else 0
        return written + len(self.recorder.trace.events)

    def _take(self, part: Trace, calls: int) -> None:
        """The recorder's ``on_calls``: a finished part goes to the ring or the file."""
        if os.getpid() != self._pid:
            # A forked child (multiprocessing) inherited this recording: the file and the
            # ring are its parent's, so it keeps its calls in its trace, which it saves itself;
            # or, where each call is only read as it ends (run --print), it reads them.
            if self.forks_observe and self.observe is not None:
                self.observe(part)
                return
            trace = self.recorder.trace
            part = _derived(part)
            trace.events, trace.graph_tasks = part.events, dict(part.graph_tasks)
            return
        if self.observe is not None:
            self.observe(part)
        if self.ring is not None:
            if self.ring.add(part, calls) and self.observe is None:
                # The calls after a finding are not kept (one that reads each call as it
                # ends, run --print, goes on reading them; the ring keeps no more).
                self.recorder.closed = True
                if self.output is not None:
                    self.saved_found = self._save(self.ring.trace(part.header))
        elif self.writer is not None:
            self.writer.write(part, calls)

    def release(self) -> None:
        """Let the flight recorder's file go (its lock with it), once it is written."""
        if self._claim is not None and os.getpid() == self._pid:
            claim, self._claim = self._claim, None
            os.close(claim)

    def _save(self, trace: Trace) -> bool:
        assert self._claim is not None
        try:
            write_whole(self._claim, trace)
        except OSError as exc:
            self.save_error = exc
            return False
        return True


@contextmanager
def record(
    max_values: int = DEFAULT_MAX_VALUES,
    *,
    steps: str | Iterable[int] | None = None,
    every: int | None = None,
    last: int | None = None,
    output: str | os.PathLike[str] | None = None,
    values: str | None = None,
    observe: str = "nodes",
) -> Iterator[Trace]:
    """Record the backward calls made inside the ``with`` block: our engine's and PyTorch's.

    Example:
        >>> with autograd_viz.record() as trace:
        ...     loss.backward()
        >>> trace.state_at(len(trace)).leaves

    A training loop records the calls that matter (see
    :class:`~autograd_viz.trace.calls.CallSelection`); a call not recorded
    runs as unwatched::

        with autograd_viz.record(every=100, output="run.jsonl"):
            train()  # calls 0, 100, 200, ... written to run.jsonl as each ends

        with autograd_viz.record(last=5) as trace:
            train()  # afterwards, the trace holds the last five calls

    Args:
        max_values: tensors with at most this many elements keep their values.
        steps: record only these backward calls, by index from 0 in the block
            (``"10-12,100"``, or ints).
        every: record calls 0, N, 2N, ...
        last: keep only the last N recorded calls (a flight recorder): the
            trace holds them once the block ends; a call holding a NaN or Inf
            (an ``anomaly`` event, or a gradient summarized with one) stops the
            recording there.
        output: a trace file. Without ``last``, each call is written to it as
            it ends and the trace holds only the calls in flight, so memory
            stays flat however long the run; with ``last``, the kept calls are
            written when the block ends.
        values: which gradients are summarized: ``"all"`` (every tensor of
            every event), ``"leaves"`` (leaves' gradients, the root's and
            ``grad()``'s results) or ``"none"`` (the order, threads, times, graph
            and bookkeeping of each call without values: the cheapest, for a
            flight recorder left on for a whole run). The trace's header says
            which (Note [Values tiers] in ``autograd_viz/trace/records.py``).
            Left out: ``"all"``, or ``"none"`` with ``observe="calls"``.
        observe: ``"nodes"`` (every node watched as it runs) or ``"calls"``
            (no node watched: each recorded call's order, dependencies and
            buffers are derived from its graph after it ends, and only the
            call's times are observed; no values). The header says which (Note
            [Observation levels] in ``autograd_viz/trace/records.py``). With
            ``last``, a PyTorch call is held underived, and only the calls
            kept are derived, when the block ends: the light tier, a flight
            recorder to leave on for a whole run (Note [Calls derived later]
            in ``autograd_viz/sources/pytorch/call_level.py``).

    Yields:
        The :class:`Trace`.

    Raises:
        CallSelectionError: ``steps``, ``every`` or ``last`` names no calls.
        OSError: ``output`` cannot be created.
        ValueError: ``values`` is not one of the tiers, ``observe`` not a
            level, or ``observe="calls"`` with values.
    """
    if values is None:
        values = "none" if observe == "calls" else "all"
    recording = Recording(
        max_values,
        CallSelection(steps, every, last),
        output,
        values=values,
        watch=observe,
    )
    with recording.running():
        yield recording.trace
