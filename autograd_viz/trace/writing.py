"""Writing trace files: a trace as JSON Lines records, one per line (``docs/trace-format.md``).

:mod:`autograd_viz.trace.file` reads them back; a streamed trace
(:mod:`autograd_viz.trace.stream`) appends a call's records as it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

from autograd_viz.trace import GraphTaskInfo, NodeInfo, Trace, TraceEvent
from autograd_viz.trace import schema as s
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


def _node_record(graph_task: int, node: NodeInfo) -> dict[str, Any]:
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
        out["scope"] = [list(entry) for entry in node.scope]
    return out


def _graph_task_record(info: GraphTaskInfo) -> dict[str, Any]:
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


def iter_records(trace: Trace) -> Iterator[dict[str, Any]]:
    """The JSON records of ``trace``, in file order."""
    yield {"type": "header", **trace.header}
    yield from body_records(trace)


def body_records(trace: Trace) -> Iterator[dict[str, Any]]:
    """The JSON records of ``trace`` after its header: what a stream appends for a part."""
    starts = {info.first_event: info for info in trace.graph_tasks.values()}
    for event in trace.events:
        info = starts.get(event.index)
        if info is not None and event.kind == "graph_task_start":
            yield _graph_task_record(info)
            for node in info.nodes.values():
                yield _node_record(info.id, node)
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


def save(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` to ``path`` (see :meth:`Trace.save`).

    The file is written next to ``path`` and renamed over it at the end, so a
    failed save leaves any previous file whole.
    """
    tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"  # processes of one job never share one
    trace = trace.copy()  # a recorder may still be filling it
    try:
        with open(tmp, "wb") as f:
            for item in iter_records(trace):
                f.write(encode_line(item))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
