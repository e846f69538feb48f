"""Trace files: JSON Lines, one record per line, validated line by line on load.

Line 1 is the header (``{"type": "header", "format": ..., "version": ...}``);
then, in engine order, ``graph_task`` records (each followed by its ``node``
records) and ``event`` records. ``docs/trace-format.md`` is the reference;
:mod:`autograd_viz.trace.writing` writes them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, TypeVar

from autograd_viz.trace import fast, reading
from autograd_viz.trace import schema as s
from autograd_viz.trace.records import (
    FORMAT,
    READABLE_VERSIONS,
    GraphTaskInfo,
    NodeInfo,
    TraceEvent,
    TraceFormatError,
    TraceRecord,
    paused_gc,
)

R = TypeVar("R", bound=TraceRecord)
"""The class a load builds: :class:`~autograd_viz.trace.document.Trace` when
:meth:`~autograd_viz.trace.document.Trace.load` asks (Note [The trace and its record])."""

_RECORDS = fast.Compiled({"node": s.NODE, "event": s.EVENT})
"""The readers of the records read by the thousand, compiled (Note [One reader])."""
_EVENT_DATA = fast.Compiled(s.EVENT_DATA_READERS)
"""The readers of each kind of event's data, compiled."""


# Note [Event order]
# ~~~~~~~~~~~~~~~~~~
# A recorder keeps events in the engine's emission order (seq), but a live
# session records them in the order it let paused threads go, which may differ
# between threads. Both are valid histories: events that touch the same state
# are emitted under the same lock, so they keep their seq order either way.
# The loader therefore checks that seq is unique, and increasing within each
# thread, not across the whole file.


class _Loader:
    """Builds a trace from records, checking how they fit together."""

    def __init__(self) -> None:
        self.header: dict[str, Any] | None = None
        self.graph_tasks: dict[int, GraphTaskInfo] = {}
        self.events: list[TraceEvent] = []
        self.last_seq: dict[str, int] = {}  # per thread: see Note [Event order]
        self.seqs: set[int] = set()
        self.pending: dict[str, Any] | None = None  # a graph_task still reading its nodes
        self.pending_nodes: dict[int, NodeInfo] = {}
        self.expect_start: int | None = None  # a graph_task whose start event comes next
        self.scopes: dict[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]] = {}
        """One object per distinct scope: most nodes share their module call's."""
        self.pending_scopes: list[tuple[tuple[str, int], ...]] | None = None
        """The scopes of the graph task still reading its nodes, from its ``scopes``."""
        self.running: set[int] = set()  # graph tasks started and not ended
        self.quiet = (0, 0)  # events, graph tasks: the last point where none was running

    def feed(self, item: Any) -> None:
        if not isinstance(item, dict):
            raise s.SchemaError(f"expected a JSON object, got {s.kind(item)}")
        kind = item.get("type")
        if kind == "event" and self.pending is None and self.header is not None:
            self.read_event(item)  # the common case, as the general one below would
            return
        if self.header is None:
            if kind != "header":
                raise s.SchemaError("the first line must be the trace header")
            self.read_header(item)
            return
        if kind == "node":
            self.read_node(item)
            return
        self.finish_graph_task()
        if self.expect_start is not None and kind != "event":
            raise s.SchemaError(f"graph task {self.expect_start} has no graph_task_start event")
        if kind == "graph_task":
            fields = s.GRAPH_TASK(item)
            if fields["id"] in self.graph_tasks:
                raise s.SchemaError(f"graph task {fields['id']} appears twice")
            parent = fields["parent"]
            if parent is not None and parent not in self.graph_tasks:
                # A reentrant call starts inside a node of its parent, so after it;
                # this also rules out a cycle of parents.
                raise s.SchemaError(
                    f"graph task {fields['id']} names parent {parent}, which did not start "
                    "before it"
                )
            table = fields.pop("scopes", None)
            self.pending_scopes = (
                _scopes(table, fields.get("modules", _NO_MODULES)) if table is not None else None
            )
            self.pending = fields
            self.pending_nodes = {}
        elif kind == "event":
            self.read_event(item)
        else:
            raise s.SchemaError(
                f"unknown record type {s.show(kind)}; expected graph_task, node or event"
            )

    def read_header(self, item: dict[str, Any]) -> None:
        if item.get("format") != FORMAT:
            raise s.SchemaError(
                f"not an autograd-viz trace (format is {s.show(item.get('format'))}, "
                f"expected {FORMAT!r})"
            )
        version = item.get("version")
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise s.SchemaError(
                f"unknown trace schema version {s.show(version)}; this autograd-viz reads "
                f"versions {', '.join(str(v) for v in READABLE_VERSIONS[:-1])} "
                f"and {READABLE_VERSIONS[-1]}"
            )
        header = s.HEADER(item)
        del header["type"]
        if "sources" in header:
            header["sources"] = list(header["sources"])  # a recording header's list
        self.header = header

    def read_node(self, item: dict[str, Any]) -> None:
        gid, info = _RECORDS["node"](item)
        pending = self.pending
        if pending is None or gid != pending["id"]:
            raise s.SchemaError("a node record must follow its graph_task record")
        if info.id in self.pending_nodes:
            raise s.SchemaError(f"node {info.id} appears twice in graph task {pending['id']}")
        scope = info.scope
        if type(scope) is int:  # a scope_ref (version 12), checked with its graph task
            table = self.pending_scopes
            if table is None or scope >= len(table):
                raise s.SchemaError(
                    f"node {info.id}'s scope_ref {scope} is not an index of its graph task's "
                    f"scopes ({0 if table is None else len(table)} of them)"
                )
            shared = self.scopes.setdefault(table[scope], table[scope])
            object.__setattr__(info, "scope", shared)
        elif scope:
            modules = pending.get("modules", _NO_MODULES)
            for path, _call in scope:
                if path not in modules:
                    raise s.SchemaError(
                        f"node {info.id}'s scope names module {s.show(path)}, which its graph "
                        f"task's modules do not list"
                    )
            shared = self.scopes.setdefault(scope, scope)
            if shared is not scope:
                object.__setattr__(info, "scope", shared)
        self.pending_nodes[info.id] = info

    def finish_graph_task(self) -> None:
        pending = self.pending
        if pending is None:
            return
        self.pending = None
        self.pending_scopes = None
        if len(self.pending_nodes) != pending["nodes"]:
            raise s.SchemaError(
                f"graph task {pending['id']} declares {pending['nodes']} nodes but "
                f"{len(self.pending_nodes)} follow it"
            )
        nodes = self.pending_nodes
        if nodes and pending["root"] not in nodes:
            raise s.SchemaError(
                f"graph task {pending['id']} starts from node {pending['root']}, which is not "
                "among its nodes"
            )
        _check_acyclic(pending["id"], nodes)
        _check_topological_order(pending["id"], nodes)
        self.expect_start = pending["id"]
        del pending["type"], pending["nodes"]
        self.graph_tasks[pending["id"]] = GraphTaskInfo(
            **pending, first_event=len(self.events), nodes=self.pending_nodes
        )

    def read_event(self, item: dict[str, Any]) -> None:
        fields = _RECORDS["event"](item)
        kind = fields["kind"]
        data = _read_event_data(kind, fields["data"])
        seq, thread = fields["seq"], fields["thread"]
        last = self.last_seq.get(thread)
        if last is not None and seq <= last:
            raise s.SchemaError(
                f"seq {seq} is not after {last}, the previous event of thread {s.show(thread)}"
            )
        if seq in self.seqs:
            raise s.SchemaError(f"seq {seq} appears twice")
        self.last_seq[thread] = seq
        self.seqs.add(seq)
        index = len(self.events)
        gid = fields["graph_task"]
        expected = self.expect_start
        if kind == "graph_task_start" and gid != expected:
            raise s.SchemaError(f"graph_task_start of {gid} without its graph_task record")
        if expected is not None and (kind != "graph_task_start" or gid != expected):
            raise s.SchemaError(f"graph task {expected} has no graph_task_start event")
        self.expect_start = None
        if kind == "graph_task_start":
            self.running.add(gid)
        elif kind == "graph_task_end":
            self.running.discard(gid)
        if not self.running:
            self.quiet = (index + 1, len(self.graph_tasks))
        node_id, node_name, sequence_nr, topological_nr = fields["node"] or _NO_NODE
        self.events.append(
            _new_event(
                (
                    index,
                    kind,
                    seq,
                    fields["t_ns"],
                    thread,
                    fields["device"],
                    gid,
                    node_id,
                    node_name,
                    sequence_nr,
                    topological_nr,
                    data,
                )
            )
        )

    def cut_to_quiet(self) -> None:
        """Forget what follows the last point where no graph task was running."""
        events, graph_tasks = self.quiet
        del self.events[events:]
        for gid in list(self.graph_tasks)[graph_tasks:]:
            del self.graph_tasks[gid]
        self.pending = None
        self.expect_start = None

    def trace(self, cls: type[R]) -> R:
        if self.header is None:
            raise s.SchemaError("the file is empty (expected the trace header)")
        if self.expect_start is not None:
            raise s.SchemaError(f"graph task {self.expect_start} has no graph_task_start event")
        return cls(self.header, self.graph_tasks, self.events)


_NO_NODE = (None, None, None, None)
_NO_MODULES: dict[str, str] = {}


def _scopes(
    table: list[tuple[int | None, str, int]], modules: dict[str, str]
) -> list[tuple[tuple[str, int], ...]]:
    """A graph task's ``scopes`` (version 12) as the scopes they stand for, outermost first.

    Each entry names its innermost call and the earlier entry it is below, so a
    scope is written once per graph task, its calls once each, whatever its
    depth (Note [Scopes by reference] in ``autograd_viz/trace/writing.py``).
    """
    out: list[tuple[tuple[str, int], ...]] = []
    for index, (parent, path, call) in enumerate(table):
        if path not in modules:
            raise s.SchemaError(
                f"scopes: entry {index} names module {s.show(path)}, which its graph task's "
                "modules do not list"
            )
        if parent is None:
            out.append(((path, call),))
        elif parent < index:
            out.append((*out[parent], (path, call)))
        else:
            raise s.SchemaError(
                f"scopes: entry {index} is below entry {parent}, which does not come before it"
            )
    return out


def _new_event(fields: tuple[Any, ...]) -> TraceEvent:
    """``TraceEvent(*fields)`` without the named tuple's argument parsing (every field given)."""
    event: TraceEvent = tuple.__new__(TraceEvent, fields)
    return event


def _read_event_data(kind: str, data: Any) -> dict[str, Any]:
    """An event's ``data``, read by its kind's reader."""
    if kind not in s.EVENT_DATA_READERS:
        raise s.SchemaError(f"unknown event kind {s.show(kind)}")
    try:
        result: dict[str, Any] = _EVENT_DATA[kind](data)
    except s.SchemaError as exc:
        raise s.SchemaError(f"data: {exc}") from None
    return result


def _check_topological_order(graph_task: int, nodes: dict[int, NodeInfo]) -> None:
    """Raise when an edge goes to a node whose topological_nr is not smaller.

    A node's topological_nr is the longest path from it to a leaf, so every
    edge goes to a smaller one (PyTorch fixes a node's number once it has a
    parent); the drawn graph lays nodes out in layers by it.
    """
    for info in nodes.values():
        for edge in info.next_edges:
            if edge is None:
                continue
            target = nodes.get(edge[0])
            if target is not None and target.topological_nr >= info.topological_nr:
                raise s.SchemaError(
                    f"graph task {graph_task}: node {info.id} (topological_nr "
                    f"{info.topological_nr}) has an edge to node {target.id} (topological_nr "
                    f"{target.topological_nr}); an edge always goes to a smaller one"
                )


def _check_acyclic(graph_task: int, nodes: dict[int, NodeInfo]) -> None:
    """Raise when the edges among ``nodes`` form a cycle: a backward graph never does.

    Views walk the graph from its root; a cycle would send them round forever.
    Edges to nodes outside the snapshot are ignored here.
    """
    done: set[int] = set()
    for start, info in nodes.items():
        if start in done:
            continue
        on_path = {start}
        stack = [(start, iter(info.next_edges))]
        while stack:
            node_id, edges = stack[-1]
            for edge in edges:
                if edge is None or edge[0] not in nodes or edge[0] in done:
                    continue
                if edge[0] in on_path:
                    raise s.SchemaError(
                        f"graph task {graph_task}: the edges from node {node_id} back to node "
                        f"{edge[0]} close a cycle, and a backward graph has none"
                    )
                on_path.add(edge[0])
                stack.append((edge[0], iter(nodes[edge[0]].next_edges)))
                break
            else:
                stack.pop()
                on_path.discard(node_id)
                done.add(node_id)


PROGRESS_EVERY = 1 << 14
"""Lines between two calls of :func:`load`'s ``progress``."""


def load(
    path: str | os.PathLike[str], progress: Callable[[int, int], object] | None, cls: type[R]
) -> R:
    """Read and validate the trace file at ``path`` as a ``cls`` (see :meth:`Trace.load`).

    ``progress(bytes_read, file_size)`` is called every :data:`PROGRESS_EVERY`
    lines, and once at the end.
    """
    name = os.fspath(path)
    loader = _Loader()
    lineno = 0
    done = 0
    quiet_at = 0  # the file offset of loader.quiet
    cut = 0
    size = os.path.getsize(path) if progress is not None else 0
    with reading.open_trace(path) as f, paused_gc():  # Note [Bounded reading]
        try:
            for lineno, raw in reading.lines(f, name):
                if progress is not None and lineno % PROGRESS_EVERY == 0:
                    progress(done, size)
                if not raw.endswith(b"\n") and loader.header is not None:
                    # A process stopped while streaming: Note [Streamed traces] (trace/stream.py).
                    cut = done + len(raw) - quiet_at
                    loader.cut_to_quiet()
                    break
                done += len(raw)
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise TraceFormatError(
                        f"{name}, line {lineno}: not UTF-8 text ({exc.reason} at byte {exc.start})"
                    ) from None
                if not text.endswith("\n"):
                    raise TraceFormatError(
                        f"{name}, line {lineno}: truncated (the last line has no newline)"
                    )
                quiet = loader.quiet
                try:
                    loader.feed(_decode(text))
                except (ValueError, RecursionError) as exc:
                    raise TraceFormatError(f"{name}, line {lineno}: {_problem(exc)}") from None
                if loader.quiet is not quiet or lineno == 1:
                    quiet_at = done
        except MemoryError:
            loader = _Loader()  # what was read goes, so that the error can be raised
            raise reading.out_of_memory(name, max(lineno, 1)) from None
    try:
        loader.finish_graph_task()
        trace = loader.trace(cls)
    except s.SchemaError as exc:
        raise TraceFormatError(f"{name}, line {max(lineno, 1)}: {exc}") from None
    trace.tail_cut = cut
    if progress is not None:
        progress(size, size)
    return trace


def _problem(exc: ValueError | RecursionError) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON ({exc.msg} at column {exc.colno})"
    if "digits" in str(exc) and not isinstance(exc, s.SchemaError):
        # int() refuses numbers of thousands of digits (sys.get_int_max_str_digits).
        return "a number has too many digits"
    return str(exc)


def _reject_constant(name: str) -> Any:
    raise s.SchemaError(f"{name} is not valid JSON (non-finite numbers are written as strings)")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
# What _DECODER.decode scans with (an attribute typeshed does not list).
_scan_once: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def _decode(line: str) -> Any:
    """One line's JSON value, as ``_DECODER.decode(line)`` reads it.

    A line that is one object and its newline (every line a trace file holds)
    is scanned directly, without ``decode``'s two whitespace matches; anything
    else, and any error, goes through ``decode``, which reads and reports it.
    """
    if line[:1] == "{":
        try:
            item, end = _scan_once(line, 0)
        except (ValueError, RecursionError, StopIteration):
            pass  # decode raises it again, with its own message
        else:
            if end == len(line) - 1:  # the caller checked that the line ends in "\n"
                return item
    return _DECODER.decode(line)
