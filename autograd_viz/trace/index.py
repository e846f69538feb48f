"""Opening one backward call of a long trace without reading the rest.

Note [Seeking a call]
~~~~~~~~~~~~~~~~~~~~~
A training run's trace holds thousands of backward calls in hundreds of
megabytes, and a view wants one of them. Every call starts with its
``graph_task`` record, a line that begins ``{"type":"graph_task",`` (the
writer puts ``type`` first), and runs to the next call's: so the file is its
own index. :func:`calls_in` finds those lines with ``bytes.find`` over blocks
of the file (C speed, memory of one block, whatever the file's size), reads
each such line alone, and keeps the calls from user code (``parent`` null)
with their ``call`` numbers and byte ranges. A call's forward pass is written
before its ``graph_task`` line, as the events of no graph task (the NaN
checks' findings): its range starts where the run of such lines just before
that line starts (:func:`forward_start`, read backwards a block at a time).
:func:`load_call` then reads the
header and that one byte range, through the same validating loader as
:func:`~autograd_viz.trace.file.load`: events of graph tasks that are not in
the range (another thread's call, recorded at the same time) are left out. A
file that does not start its records this way (written by hand, or by
something else) is loaded whole and the call picked from it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from autograd_viz.trace import file as _file
from autograd_viz.trace import reading
from autograd_viz.trace.document import Trace
from autograd_viz.trace.records import TraceEvent, TraceFormatError, paused_gc

MARK = b'\n{"type":"graph_task",'
"""How a graph task's record line starts, after the line before it."""
BLOCK = 1 << 20
"""Bytes read at a time while looking for calls."""


class CallNotFoundError(LookupError):
    """The trace holds no backward call with that number."""


@dataclass(frozen=True)
class CallSpan:
    """Where one backward call from user code lies in a trace file."""

    call: int | None
    """Its ``call`` number (its index in the run), if the recorder counted calls."""
    graph_task: int
    """Its graph task id."""
    start: int
    """The byte offset of its ``graph_task`` line."""
    end: int
    """The byte offset of the next call's ``graph_task`` line, or the file's size."""


def calls_in(path: str | os.PathLike[str]) -> list[CallSpan]:
    """The backward calls from user code in the trace at ``path``, in file order.

    Raises:
        OSError: the file cannot be read.
        TraceFormatError: the file is special (a FIFO, a device), or a
            ``graph_task`` line is not valid JSON.
    """
    name = os.fspath(path)
    starts: list[tuple[int, int | None, int]] = []  # offset, call, graph task
    with reading.open_trace(name) as f:
        size = os.fstat(f.fileno()).st_size
        across = _scan(f, name, starts)
        for offset in across:  # lines that ran past the block they start in
            f.seek(offset)
            if not _take(f.readline(reading.MAX_LINE_BYTES), offset, name, starts):
                break
    if not starts:
        return []
    starts.sort()
    ends = [offset for offset, _, _ in starts[1:]] + [size]
    return [
        CallSpan(call, gid, offset, end)
        for (offset, call, gid), end in zip(starts, ends, strict=True)
    ]


def _scan(f: Any, name: str, starts: list[tuple[int, int | None, int]]) -> list[int]:
    """Read the file a block at a time, taking every graph_task line that ends in its block.

    Returns:
        The offsets of the graph_task lines that run past their block.
    """
    across: list[int] = []
    position = 0
    tail = b""
    while True:
        block = f.read(BLOCK)
        if not block:
            return across
        data = tail + block
        base = position - len(tail)
        at = data.find(MARK)
        while at >= 0:
            end = data.find(b"\n", at + 1)
            if end < 0:
                across.append(base + at + 1)
            else:
                _take(data[at + 1 : end + 1], base + at + 1, name, starts)
            at = data.find(MARK, at + 1)
        position += len(block)
        tail = data[-(len(MARK) - 1) :]  # a mark cut in two by the block's end


def _take(line: bytes, offset: int, name: str, starts: list[tuple[int, int | None, int]]) -> bool:
    """Note the graph_task record ``line`` if it is a call from user code.

    Returns:
        ``False`` for a last line cut short (Note [Streamed traces]).

    Raises:
        TraceFormatError: the line is not valid JSON.
    """
    try:
        item = json.loads(line)
    except ValueError:
        if not line.endswith(b"\n"):
            return False
        raise TraceFormatError(
            f"{name}: the graph_task record at byte {offset} is not valid JSON"
        ) from None
    if isinstance(item, dict) and item.get("parent") is None:
        call, gid = item.get("call"), item.get("id")
        if isinstance(gid, int):
            starts.append((offset, call if isinstance(call, int) else None, gid))
    return True


def pick(spans: list[CallSpan], call: int) -> CallSpan:
    """The span of call number ``call`` (by position when the trace has no numbers).

    Raises:
        CallNotFoundError: there is no such call; the message says which there are.
    """
    numbered = [span for span in spans if span.call is not None]
    if numbered:
        for span in numbered:
            if span.call == call:
                return span
        raise CallNotFoundError(
            f"the trace holds no backward call {call}; it holds calls "
            f"{_ranges([s.call for s in numbered if s.call is not None])}"
        )
    if 0 <= call < len(spans):
        return spans[call]
    raise CallNotFoundError(
        f"the trace holds {len(spans)} backward call"
        f"{'' if len(spans) == 1 else 's'} (0 to {len(spans) - 1}), "
        f"not call {call}"
    )


def _ranges(numbers: list[int]) -> str:
    """``0-2, 10, 20-21``, at most a dozen parts."""
    parts: list[str] = []
    start = prev = None
    for n in sorted(set(numbers)):
        if prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(parts[:12]) + (", ..." if len(parts) > 12 else "")


def load_call(path: str | os.PathLike[str], call: int) -> Trace:
    """Load backward call number ``call`` of the trace at ``path`` (Note [Seeking a call]).

    Args:
        path: a trace file.
        call: the call's number (``GraphTaskInfo.call``), or its position
            among the trace's calls from user code when they are not numbered.

    Returns:
        A trace of that call alone: its graph tasks (reentrant ones included)
        and their events.

    Raises:
        CallNotFoundError: the trace holds no such call.
        TraceFormatError: the file is not a valid trace.
        OSError: the file cannot be read.
    """
    name = os.fspath(path)
    spans = calls_in(name)
    if not spans:
        return _from_whole(name, call)
    span = pick(spans, call)
    with reading.open_trace(name) as f, paused_gc():
        header = f.readline(reading.MAX_LINE_BYTES)
        start, end = forward_start(f, span.start), span.end
        if end < os.fstat(f.fileno()).st_size:
            end = forward_start(f, end)  # the next call's forward pass is the next call's
        return _read_span(name, f, header, start, end, f"call {call}")


def iter_calls(path: str | os.PathLike[str]) -> Iterator[Trace]:
    """The trace at ``path`` one backward call at a time, in file order, each read alone.

    What comes before the first call (a forward pass checked for NaNs, in a
    script that had not called backward yet) comes first, on its own. Memory
    is that of one call, whatever the file's size; a file not laid out as the
    writer does (Note [Seeking a call]) comes whole.

    Raises:
        TraceFormatError: the file is not a valid trace.
        OSError: the file cannot be read.
    """
    name = os.fspath(path)
    spans = calls_in(name)
    if not spans:
        yield Trace.load(name)
        return
    with reading.open_trace(name) as f:
        header = f.readline(reading.MAX_LINE_BYTES)
        body = f.tell()
        starts = [forward_start(f, span.start) for span in spans]
        ends = [*starts[1:], os.fstat(f.fileno()).st_size]
        if starts[0] > body:
            with paused_gc():
                before = _read_span(name, f, header, body, starts[0], "before call 0")
            if before.events:
                yield before
        for i, (span, start, end) in enumerate(zip(spans, starts, ends, strict=True)):
            what = f"call {span.call if span.call is not None else i}"
            with paused_gc():
                part = _read_span(name, f, header, start, end, what)
            yield part


FORWARD_LINE = b'{"type":"event",'
"""How an event line starts; one of no graph task holds :data:`FORWARD_FIELD` too."""
FORWARD_FIELD = b',"graph_task":0,'
"""An event of no graph task (``JSON`` escapes the quotes of a string that holds this)."""


def forward_start(f: Any, offset: int) -> int:
    """Where the event lines of no graph task just before byte ``offset`` begin (``offset``
    when there are none): the forward pass of the call whose ``graph_task`` line is there.

    Reads backwards a block at a time; never goes before the header's end.
    """
    f.seek(0)
    floor = len(f.readline(reading.MAX_LINE_BYTES))
    start = offset
    tail = b""  # the start of the line cut by the block read before
    position = offset
    while position > floor:
        size = min(BACK_BLOCK, position - floor)
        position -= size
        f.seek(position)
        data = f.read(size) + tail
        lines = data.split(b"\n")
        tail = lines[0] if position > floor else b""
        complete = lines[1:] if position > floor else lines
        for line in reversed(complete):
            if not line:
                continue  # the newline that ends the line before ``offset``
            if not (line.startswith(FORWARD_LINE) and FORWARD_FIELD in line):
                return start
            start -= len(line) + 1
    return start


BACK_BLOCK = 1 << 16
"""Bytes read at a time, backwards, looking for a call's forward pass."""


def _read_span(name: str, f: Any, header: bytes, start: int, end: int, what: str) -> Trace:
    """The records between byte ``start`` and ``end`` of an open trace, as a trace."""
    loader = _file._Loader()
    known: set[int] = set()
    _feed(loader, name, 1, header)
    f.seek(start)
    remaining = end - start
    while remaining > 0:
        raw = f.readline(min(remaining, reading.MAX_LINE_BYTES + 1))
        if not raw:
            break
        remaining -= len(raw)
        if not raw.endswith(b"\n"):
            loader.cut_to_quiet()  # cut short while streaming
            break
        item = _decode(name, raw, start)
        if isinstance(item, dict):
            kind, gid = item.get("type"), item.get("graph_task")
            if kind == "graph_task" and isinstance(item.get("id"), int):
                known.add(item["id"])
            elif kind == "event" and gid and gid not in known:
                continue  # another call's, recorded at the same time
        try:
            loader.feed(item)
        except ValueError as exc:
            raise TraceFormatError(f"{name}, byte {start}+: {exc}") from None
    try:
        loader.finish_graph_task()
        return loader.trace(Trace)
    except ValueError as exc:
        raise TraceFormatError(f"{name}: {what}: {exc}") from None


def _feed(loader: _file._Loader, name: str, lineno: int, raw: bytes) -> None:
    try:
        loader.feed(_decode(name, raw, 0))
    except ValueError as exc:
        raise TraceFormatError(f"{name}, line {lineno}: {exc}") from None


def _decode(name: str, raw: bytes, offset: int) -> Any:
    try:
        return _file._decode(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise TraceFormatError(f"{name}, near byte {offset}: not a valid record ({exc})") from None


def _from_whole(name: str, call: int) -> Trace:
    """Call ``call`` of a trace whose records are not laid out as the writer does."""
    trace = Trace.load(name)
    top = [info for info in trace.graph_tasks.values() if info.parent is None]
    span = pick([CallSpan(info.call, info.id, 0, 0) for info in top], call)
    wanted = {span.graph_task}
    for info in trace.graph_tasks.values():  # reentrant calls start after their parents
        if info.parent in wanted:
            wanted.add(info.id)
    events: list[TraceEvent] = []
    firsts: dict[int, int] = {}
    for event in trace.events:
        if event.graph_task in wanted or event.graph_task == 0:
            if event.kind == "graph_task_start":
                firsts[event.graph_task] = len(events)
            events.append(event._replace(index=len(events)))
    graph_tasks = {
        gid: dataclasses.replace(info, first_event=firsts[gid])
        for gid, info in trace.graph_tasks.items()
        if gid in wanted
    }
    return Trace(trace.header, graph_tasks, events)
