"""Writing trace files: a trace as JSON Lines records, one per line (``docs/trace-format.md``).

:mod:`autograd_viz.trace.file` reads them back; a streamed trace
(:mod:`autograd_viz.trace.stream`) appends a call's records as it ends.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Iterator
from typing import Any

from autograd_viz.trace import schema as s
from autograd_viz.trace.records import GraphTaskInfo, NodeInfo, TraceEvent, TraceRecord
from autograd_viz.trace.summary import TensorSummary


def _json_value(value: Any) -> Any:
    if isinstance(value, TensorSummary):
        return s.encode_summary(value)
    if isinstance(value, float):
        return s.encode_float(value)
    if isinstance(value, tuple | list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return value


def _node_record(graph_task: int, node: NodeInfo, scope_refs: dict[int, int]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "node",
        "graph_task": graph_task,
        "id": node.id,
        "name": node.name,
        "sequence_nr": node.sequence_nr,
        "topological_nr": node.topological_nr,
        "device": node.device,
        "next_edges": _json_value(node.next_edges),
        "inputs": _json_value(node.inputs),
        "dependencies": node.dependencies,
        "status": node.status,
        "captures": _json_value(node.captures),
        "saved": _json_value(node.saved),
        "hooks": _json_value(node.hooks),
        "traceback": _json_value(node.traceback),
    }
    if node.leaf is not None:
        leaf = node.leaf
        out["leaf"] = {
            "name": leaf.name,
            "shape": list(leaf.shape),
            "dtype": leaf.dtype,
            "device": leaf.device,
            "grad": _json_value(leaf.grad),
        }
        if leaf.aliases:
            out["leaf"]["aliases"] = list(leaf.aliases)
    if node.scope:
        out["scope_ref"] = scope_refs[id(node.scope)]
    return out


# Note [Scopes by reference]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# A node's scope lists every module call around it, outermost first, so in a
# model whose calls nest D deep the scopes of its nodes repeat D, D-1, ... calls,
# each path as long as its depth: written out per node, a trace grew with the
# cube of the depth (a 2,000-deep module tree: 8 GB). Since version 12 a graph
# task lists each distinct chain of calls once, in `scopes`, each entry as its
# innermost call and the earlier entry it is below, and a node names its entry
# (`scope_ref`): the scopes cost one entry per module call the graph's nodes
# were made in. Readers build the scopes back, one shared tuple per entry.


def _scope_table(info: GraphTaskInfo) -> tuple[list[list[Any]], dict[int, int]]:
    """The ``scopes`` of a graph task's record and, by ``id()`` of each node's scope, the
    index of its entry (Note [Scopes by reference])."""
    table: list[list[Any]] = []
    index: dict[tuple[tuple[str, int], ...], int] = {}  # a scope, by value → its entry
    refs: dict[int, int] = {}
    for node in info.nodes.values():
        scope = node.scope
        if not scope or id(scope) in refs:
            continue
        # The longest outer scope listed already (Python compares them, not a loop of ours),
        # then one entry per call below it.
        end = len(scope)
        while end and scope[:end] not in index:
            end -= 1
        at = index[scope[:end]] if end else None
        for depth in range(end, len(scope)):
            path, call = scope[depth]
            table.append([at, path, call])
            at = index[scope[: depth + 1]] = len(table) - 1
        refs[id(scope)] = index[scope]
    return table, refs


def _graph_task_record(info: GraphTaskInfo, scopes: list[list[Any]]) -> dict[str, Any]:
    out = {
        "type": "graph_task",
        "id": info.id,
        "parent": info.parent,
        "reentrant_depth": info.reentrant_depth,
        "keep_graph": info.keep_graph,
        "create_graph": info.create_graph,
        "root": info.root,
        "roots": _json_value(info.roots),
        "outputs": _json_value(info.outputs),
        "thread": info.thread,
        "nodes": len(info.nodes),
    }
    if info.modules:
        out["modules"] = dict(info.modules)
    if scopes:
        out["scopes"] = scopes
    if info.call is not None:
        out["call"] = info.call
    if info.cut is not None:
        out["cut"] = info.cut
    return out


def _event_record(event: TraceEvent) -> dict[str, Any]:
    node = None
    if event.node_id is not None:
        node = [event.node_id, event.node_name, event.sequence_nr, event.topological_nr]
    return {
        "type": "event",
        "kind": event.kind,
        "seq": event.seq,
        "t_ns": event.t_ns,
        "thread": event.thread,
        "device": event.device,
        "graph_task": event.graph_task,
        "node": node,
        "data": _json_value(dict(event.data)),
    }


def iter_records(trace: TraceRecord) -> Iterator[dict[str, Any]]:
    """The JSON records of ``trace``, in file order."""
    yield {"type": "header", **trace.header}
    yield from body_records(trace)


def body_records(trace: TraceRecord) -> Iterator[dict[str, Any]]:
    """The JSON records of ``trace`` after its header: what a stream appends for a part."""
    starts = {info.first_event: info for info in trace.graph_tasks.values()}
    for event in trace.events:
        info = starts.get(event.index)
        if info is not None and event.kind == "graph_task_start":
            scopes, refs = _scope_table(info)
            yield _graph_task_record(info, scopes)
            for node in info.nodes.values():
                yield _node_record(info.id, node, refs)
        yield _event_record(event)


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_ASCII_ENCODER = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def encode_line(item: dict[str, Any]) -> bytes:
    text = _ENCODER.encode(item)
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        # A lone surrogate (an exception message can hold one) has no UTF-8 form;
        # escaped as \udXXX it reads back as the same string.
        return _ASCII_ENCODER.encode(item).encode("ascii") + b"\n"


# Note [Writing an output file]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# `-o PATH` names where the trace goes, not a file to replace: a symbolic link
# is written through (its target gets the trace, the link stays), and so is a
# device node or a FIFO (`-o /dev/null` writes into /dev/null, never replaces
# it). A regular file is locked (flock, exclusive) for as long as a run writes
# it, so a second run started with the same `-o` says at once that it cannot
# write, instead of both saying "saved" over one interleaved file that does not
# load. A file replaced between the open and the lock (renamed over by another
# writer) is opened again, so the lock is always on the file the path names.


class OutputBusyError(OSError):
    """Another process is writing the output file (it holds the file's lock)."""


def open_output(path: str | os.PathLike[str], truncate: bool = True) -> int:
    """Open ``path`` to write a trace into, through any link, locked if it is a regular file.

    Note [Writing an output file]. A file that did not exist is created; with
    ``truncate`` a regular file is emptied once it is locked (never before).

    Returns:
        The file descriptor; closing it releases the lock.

    Raises:
        OutputBusyError: another process holds the file's lock.
        OSError: the file cannot be opened.
    """
    for _ in range(100):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
        try:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):
                return fd  # a device or a FIFO: written through as it is
            if not _lock(fd):
                raise OutputBusyError(
                    errno.EBUSY, "another process is writing it (a run with the same -o)"
                )
            try:
                named = os.stat(path)
            except FileNotFoundError:
                named = None
            if named is not None and (named.st_dev, named.st_ino) == (
                opened.st_dev,
                opened.st_ino,
            ):
                if truncate:
                    os.ftruncate(fd, 0)
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # replaced under us: the lock must be on the file the path names now
    raise OutputBusyError(errno.EBUSY, "it keeps being replaced by another process")


def remove_output(path: str | os.PathLike[str]) -> None:
    """Remove an output file a run wrote nothing into: a regular file only, never a link
    (nor its target) or a device node (Note [Writing an output file])."""
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.remove(path)


def _lock(fd: int) -> bool:
    """Lock ``fd``'s file exclusively without waiting; whether it was free."""
    try:
        import fcntl
    except ImportError:  # no flock on this platform: written unlocked
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return True  # a file system without locks (some network ones): written unlocked
    return True


def write_whole(fd: int, trace: TraceRecord) -> None:
    """Write ``trace`` as the whole content of ``fd`` (from :func:`open_output`)."""
    if stat.S_ISREG(os.fstat(fd).st_mode):
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
    trace = trace.copy()  # a recorder may still be filling it
    with os.fdopen(os.dup(fd), "wb") as f:
        for item in iter_records(trace):
            f.write(encode_line(item))


def save(trace: TraceRecord, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` to ``path`` (see :meth:`Trace.save`).

    A regular file is written next to ``path`` and renamed over it at the end,
    so a failed save leaves any previous file whole; a link is written through
    (the file it points to gets the trace), and a device node or a FIFO is
    written into as it is (Note [Writing an output file]).
    """
    target = os.path.realpath(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and (not stat.S_ISREG(st.st_mode) or st.st_nlink > 1):
        # A device or a FIFO, or a file with other names (hard links): into it, in place.
        fd = open_output(target, truncate=False)
        try:
            write_whole(fd, trace)
        finally:
            os.close(fd)
        return
    # A file another run is writing is left to it (its lock, held through the rename).
    held = open_output(target, truncate=False) if st is not None else None
    tmp = f"{target}.{os.getpid()}.tmp"  # processes of one job never share one
    trace = trace.copy()  # a recorder may still be filling it
    try:
        with open(tmp, "wb") as f:
            for item in iter_records(trace):
                f.write(encode_line(item))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    finally:
        if held is not None:
            os.close(held)
