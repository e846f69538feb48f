"""A trace written as it is recorded, and a trace joined from parts.

Note [Streamed traces]
~~~~~~~~~~~~~~~~~~~~~~
A training run makes thousands of backward calls; keeping them all in memory
until the program ends grows without bound, and loses everything if the
process dies. A :class:`TraceWriter` appends each finished part (the backward
calls that ended, handed on by the recorder once none is in flight) to the
file as soon as it is done, in one ``write``, so the file is a valid trace
after every part and the process holds only the call in flight. The header
is line 1 and must be written first, yet the sources of events are known only
as calls arrive (and a process's rank once its script has made its process
group): the header line is padded with spaces (JSON allows them) and
rewritten in place when it changes. A process killed in the middle of a
write leaves a last line cut short; :func:`autograd_viz.trace.file.load`
drops what follows the last finished call and says how much it dropped.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
import weakref
from collections.abc import Iterable
from typing import Any

from autograd_viz.trace.document import Trace
from autograd_viz.trace.records import GraphTaskInfo, TraceStats
from autograd_viz.trace.writing import body_records, encode_line, open_output

HEADER_BYTES = 1024
"""The header line's length in a streamed trace, spaces included, so it can be rewritten."""


class TraceWriter:
    """Appends finished parts of a trace to a file (Note [Streamed traces]).

    Args:
        path: the trace file; created, or emptied if it exists.
        header: the trace's header (its ``sources`` may grow later).

    Raises:
        OutputBusyError: another process is writing the file.
        OSError: the file cannot be created.
    """

    def __init__(self, path: str | os.PathLike[str], header: dict[str, Any]) -> None:
        self.path = os.fspath(path)
        """Where the trace goes."""
        self.error: OSError | None = None
        """The first write that failed; nothing more is written after it."""
        self._pid = os.getpid()
        # Through a link or into a device, locked against a second run (Note [Writing an
        # output file] in autograd_viz/trace/writing.py).
        self._fd = open_output(self.path)
        _writers.add(self)
        self._lock = threading.Lock()
        self._header = _header_copy(header)
        self._counts = [0, 0, 0, 0, 0]  # graph tasks, nodes, events, errors, anomalies
        self._first_ns: int | None = None
        self._last_ns = 0
        self.calls = 0
        """Backward calls written so far."""
        self._started = False
        self._fixed = False
        self._write_header()

    def write(self, part: Trace, calls: int = 0) -> None:
        """Append ``part`` (a trace whose header is this file's) and make it reach the file.

        A failed write warns once, keeps the error in :attr:`error` and
        writes nothing more: the file keeps every part written before.
        """
        with self._lock:
            if self.error is not None or self._fd < 0 or os.getpid() != self._pid:
                return  # a forked child shares the file descriptor, not the file's order
            blob = b"".join(encode_line(item) for item in body_records(part))
            try:
                _write_all(self._fd, blob)
                if part.header != self._header:
                    self._header = _header_copy(part.header)
                    self._write_header()
            except OSError as exc:
                self._failed(exc)
                return
            self.calls += calls
            self._count(part)

    def close(self, header: dict[str, Any] | None = None) -> None:
        """Close the file (safe to call twice), its header rewritten as ``header`` if given."""
        with self._lock:
            if header is not None and header != self._header and self._fd >= 0:
                self._header = _header_copy(header)
                try:
                    self._write_header()
                except OSError as exc:
                    self._failed(exc)
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    @property
    def events(self) -> int:
        """Events written so far."""
        return self._counts[2]

    def stats(self) -> TraceStats:
        """The counts of :meth:`Trace.stats` over every part written."""
        graph_tasks, nodes, events, errors, anomalies = self._counts
        first = self._first_ns
        return TraceStats(
            graph_tasks=graph_tasks,
            nodes=nodes,
            events=events,
            duration_ns=0 if first is None else self._last_ns - first,
            errors=errors,
            anomalies=anomalies,
        )

    def _count(self, part: Trace) -> None:
        stats = part.stats()
        counts = self._counts
        counts[0] += stats.graph_tasks
        counts[1] += stats.nodes
        counts[2] += stats.events
        counts[3] += stats.errors
        counts[4] += stats.anomalies
        if part.events:
            if self._first_ns is None:
                self._first_ns = part.events[0].t_ns
            self._last_ns = part.events[-1].t_ns

    def _write_header(self) -> None:
        line = encode_line({"type": "header", **self._header})
        first = not self._started
        self._started = True
        if len(line) > HEADER_BYTES:
            if first:  # too long to pad: written as it is, and never grown in place
                self._fixed = True
                _write_all(self._fd, line)
            return
        if self._fixed:
            return
        padded = line[:-1] + b" " * (HEADER_BYTES - len(line)) + b"\n"
        if first:
            _write_all(self._fd, padded)
        else:
            os.pwrite(self._fd, padded, 0)  # leaves the end, where parts go, where it was

    def _failed(self, exc: OSError) -> None:
        self.error = exc
        warnings.warn(
            f"autograd-viz: cannot write trace {self.path}: {exc.strerror or exc}; "
            "recording goes on without writing",
            RuntimeWarning,
            stacklevel=4,
        )


_writers: weakref.WeakSet[TraceWriter] = weakref.WeakSet()
"""Every writer made in this process, for :func:`_forget_in_child`."""


def _forget_in_child() -> None:
    """A forked child lets go of its copy of every writer's file: the file and its lock stay
    the parent's alone (a child that outlives it would hold the lock, and refuse a new run)."""
    for writer in list(_writers):
        fd, writer._fd = writer._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _header_copy(header: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, list) else v for k, v in header.items()}


def _write_all(fd: int, blob: bytes) -> None:
    view = memoryview(blob)
    while view:
        view = view[os.write(fd, view) :]


def join(parts: Iterable[Trace], header: dict[str, Any] | None = None) -> Trace:
    """One trace of ``parts`` (recorded one after the other), events and graph tasks renumbered.

    Args:
        parts: traces whose events follow one another in time.
        header: the joined trace's header (default: the last part's).
    """
    events: list[Any] = []
    graph_tasks: dict[int, GraphTaskInfo] = {}
    last_header = header
    for part in parts:
        offset = len(events)
        events.extend(e._replace(index=e.index + offset) for e in part.events)
        for gid, info in part.graph_tasks.items():
            graph_tasks[gid] = _moved(info, offset) if offset else info
        if header is None:
            last_header = part.header
    return Trace(_header_copy(last_header) if last_header else None, graph_tasks, events)


def forget_before(trace: Trace, position: int) -> tuple[int, ...]:
    """Forget the first ``position`` events of ``trace`` and the graph tasks that began there.

    A flight recorder's window moving on. What is left is renumbered from 0,
    each graph task's ``first_event`` with it; a late event of a forgotten
    graph task (the wake-up its last thread sends its owner) goes too. The
    event list and the graph-task dict are replaced, not changed in place, so
    a reader that took them a moment ago goes on reading a whole, older
    window. Call it holding ``trace.lock``.

    Returns:
        The ids of the graph tasks forgotten.
    """
    if position <= 0:
        return ()
    gone = frozenset(gid for gid, info in trace.graph_tasks.items() if info.first_event < position)
    events: list[Any] = []
    moved: dict[int, int] = {}  # an event's index before -> after
    for event in trace.events[position:]:
        if event.graph_task not in gone:
            moved[event.index] = len(events)
            events.append(event._replace(index=len(events)))
    trace.graph_tasks = {
        gid: _moved(info, moved[info.first_event] - info.first_event)
        for gid, info in trace.graph_tasks.items()
        if gid not in gone
    }
    trace.events = events
    trace._replayer = None  # it indexed the events that moved
    return tuple(gone)


def _moved(info: GraphTaskInfo, offset: int) -> GraphTaskInfo:
    fields = {name: getattr(info, name) for name in GraphTaskInfo.__slots__}
    fields["first_event"] += offset
    return GraphTaskInfo(**fields)
