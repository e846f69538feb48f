"""The :class:`Trace` users hold: a trace's records with its file and its replay.

:class:`~autograd_viz.trace.records.TraceRecord` is the data; this module adds
:meth:`Trace.load`, :meth:`Trace.save` and :meth:`Trace.state_at` on top, each
handing the record to the module that does the work
(:mod:`~autograd_viz.trace.file`, :mod:`~autograd_viz.trace.writing`,
:mod:`~autograd_viz.trace.replay`). Those import only the records, so the
arrows point one way (Note [The trace and its record]).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from autograd_viz.trace.records import GraphTaskInfo, TraceEvent, TraceRecord

if TYPE_CHECKING:
    from autograd_viz.trace.replay import ExecutionState, Replayer


class Trace(TraceRecord):
    """Graph snapshots and events of one or more backward calls, in engine order.

    Build one with :func:`record` or a :class:`Recorder`, or load one with
    :meth:`load`. ``trace.state_at(k)`` is the engine's state after ``k``
    events (see :mod:`autograd_viz.trace.replay`).
    """

    def __init__(
        self,
        header: Mapping[str, Any] | None = None,
        graph_tasks: Mapping[int, GraphTaskInfo] | None = None,
        events: list[TraceEvent] | None = None,
    ) -> None:
        super().__init__(header, graph_tasks, events)
        self._replayer: Replayer[Trace] | None = None

    @property
    def _replayed_len(self) -> int:
        """How many events the replayer has indexed (-1 without one); a recorder that
        inserts an event before that drops the replayer."""
        return -1 if self._replayer is None else self._replayer.applied

    def state_at(self, step: int) -> ExecutionState[Trace]:
        """The engine's state after the first ``step`` events (0 is before any).

        Raises:
            IndexError: ``step`` is outside ``0 .. len(trace)``.
        """
        # Imported here: a recording process never replays (Note [Lazy top-level names]).
        from autograd_viz.trace.replay import Replayer

        if self._replayer is None:
            # Lazy: a step indexes the events up to it, a trace grows by itself.
            self._replayer = Replayer(self, lazy=True)
        return self._replayer.state_at(step)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the trace as JSON Lines (see ``docs/trace-format.md``).

        Safe while a recorder still fills the trace: what is written is a
        :meth:`copy` taken when the save starts.
        """
        from autograd_viz.trace.writing import save

        save(self, path)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], progress: Callable[[int, int], object] | None = None
    ) -> Trace:
        """Read and validate a trace file.

        Args:
            path: the file.
            progress: called as ``progress(bytes_read, file_size)`` now and then
                while reading, for a big file's progress bar.

        Raises:
            TraceFormatError: the file is not a trace this version understands;
                the message names the line and what was wrong.
            OSError: the file cannot be read.
        """
        from autograd_viz.trace.file import load

        return load(path, progress, cls)


# Note [The trace and its record]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A Trace is loaded by trace/file.py, saved by trace/writing.py and replayed by
# trace/replay.py, and each of those reads a trace. If the class that offers
# load, save and state_at were the class they read, each would import the
# other: a circle through the whole package. So the data is TraceRecord, in
# records.py, which imports none of them; they take and build TraceRecords;
# Trace, here, above them all, adds the three methods and hands itself down.
# The loader builds the class it is given (Trace.load passes cls), and
# TraceRecord.copy builds type(self), so every trace a user holds is a Trace.
