"""A recorded trace as a timeline for Perfetto (ui.perfetto.dev) or ``chrome://tracing``.

The output is the Chrome Trace Event Format (a JSON object with a
``traceEvents`` list). Each engine thread is a lane; on it:

* every node execution is a complete slice (``ph: "X"``) named after the node,
  from its ``node_start`` until it has passed its gradients on (see Note
  [Node slices cover routing]), or to its ``error``, or to the end of the
  trace when the recording stopped while it ran;
* the module calls that made the nodes (``NodeInfo.scope``) are nested slices
  around them (see Note [Module slices]), so a viewer shows which layer's
  backward took the time;
* every graph task is a slice on the thread that called backward, from
  ``graph_task_start`` to ``graph_task_end``, so a reentrant backward sits
  inside the node that started it; a reentrant graph task handed to a pool
  thread is also a slice on that pool thread's lane;
* errors, anomalies and accumulations into leaves are instant events.

A flow arrow joins each ``enqueue`` to the ``node_start`` of the task it
queued, across threads. Timestamps are microseconds from the earliest event.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autograd_viz.trace import Trace, TraceEvent
from autograd_viz.trace.records import DERIVED_ORDER, observed, values_recorded
from autograd_viz.trace.scopes import owner_scope
from autograd_viz.trace.summary import TensorSummary
from autograd_viz.trace.text import printable, thread_name

PROCESS_ID = 1
"""The one process every lane belongs to."""
POOL_THREAD_PREFIX = "autograd-pool-"
"""How the engine names its reentrant pool threads (``engine.workers``)."""

_Clock = Callable[[int], float]
"""Engine nanoseconds to timeline microseconds."""

_JS_SAFE_INT = 2**53
"""Larger integers lose digits in JavaScript viewers; they are written as strings."""

# Note [Node slices cover routing]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The engine emits node_end when apply and its post hooks return, then, on
# the same thread, decrements the dependencies of the next nodes, accumulates
# into their input buffers and enqueues the ready ones. A flow arrow starts at
# that enqueue and must bind to a slice enclosing it; on a device thread there
# is no other slice than the node's. So a node's slice runs on through these
# routing events (as PyTorch's profiler shows evaluate_function around the
# node), and its ``apply_us`` argument keeps the node_start → node_end time.


@dataclass(slots=True)
class _Slice:
    """A complete event being built; times in engine nanoseconds."""

    thread: str
    name: str
    category: str
    start: int
    end: int
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class _NodeRun:
    """A node execution and what identifies the events that belong to it."""

    span: _Slice
    graph_task: int
    node_id: int


def to_chrome_trace(trace: Trace) -> dict[str, Any]:
    """Build a Chrome Trace Event Format document from ``trace``.

    Args:
        trace: a recorded or loaded trace.

    Returns:
        A JSON-serializable dict with ``traceEvents``, ``displayTimeUnit`` and
        ``otherData``; every slice has ``ts`` and ``dur >= 0``, every flow
        start has its finish, and slices on one lane nest.
    """
    events = trace.events
    calls_only = observed(trace.header) == "calls"
    # At the call level a node's time was not observed: the calls are the slices.
    runs = [] if calls_only else _node_runs(events)
    _say_values_not_recorded(runs, values_recorded(trace.header))
    comm = _comm_slices(events)
    lanes = _lanes(trace, [s.thread for s, _ in comm])
    # Module slices first: one that starts and ends with its only node encloses it.
    slices = _module_slices(trace, runs) + [run.span for run in runs]
    slices += _graph_task_slices(trace, calls_only)
    slices += [s for s, _ in comm]
    for lane in _group_by_thread(slices).values():
        _nest(lane)
    origin = min((e.t_ns for e in events), default=0)

    def us(t_ns: int) -> float:
        return (t_ns - origin) / 1000

    timed: list[dict[str, Any]] = [
        {
            "name": s.name,
            "cat": s.category,
            "ph": "X",
            "ts": us(s.start),
            "dur": (s.end - s.start) / 1000,
            "pid": PROCESS_ID,
            "tid": lanes[s.thread],
            "args": s.args,
        }
        for s in slices
    ]
    flows = [] if calls_only else _flows(events, lanes, us)
    timed.extend(flows)
    timed.extend(_comm_flows(comm, lanes, us, len(flows) // 2 + 1))
    timed.extend(_instants(events, lanes, us))
    # At one ts, enclosing slices come first, then the flows and instants that bind to them.
    timed.sort(key=lambda item: (item["ts"], item["ph"] != "X", -item.get("dur", 0)))
    stats = trace.stats()
    document = {
        "traceEvents": _metadata(lanes) + timed,
        "displayTimeUnit": "ns",
        "otherData": {
            "generator": "autograd-viz",
            "engine": str(trace.header.get("engine", "")),
            "graph_tasks": stats.graph_tasks,
            "nodes_run": stats.nodes,
            "events": stats.events,
            "errors": stats.errors,
            "anomalies": stats.anomalies,
            "origin_ns": origin,
            "values": values_recorded(trace.header),
            "observe": observed(trace.header),
        },
    }
    shown: dict[str, Any] = _shown(document)
    return shown


def _shown(value: Any) -> Any:
    """``value`` with every string :func:`printable`: names in a timeline are text.

    A viewer shows the JSON's strings as they are; control characters among
    them would reach whatever displays them (Note [Names are text]), and a
    lone surrogate makes the file invalid for strict JSON readers.
    """
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {key: _shown(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shown(item) for item in value]
    return value


def save_chrome_trace(trace: Trace, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Write :func:`to_chrome_trace` of ``trace`` to ``path`` as JSON.

    Returns:
        The document written.

    Raises:
        OSError: ``path`` cannot be written.
    """
    document = to_chrome_trace(trace)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f, allow_nan=False, separators=(",", ":"))
        f.write("\n")
    return document


# -- lanes -----------------------------------------------------------------------------


def _lanes(trace: Trace, extra: Sequence[str] = ()) -> dict[str, int]:
    """A tid per thread, in order of first appearance (the caller's thread first), then
    ``extra`` lanes (communication)."""
    lanes: dict[str, int] = {}
    threads = [e.thread for e in trace.events if e.kind != "comm"]
    threads += [g.thread for g in trace.graph_tasks.values()]
    for thread in [*threads, *extra]:
        if thread not in lanes:
            lanes[thread] = len(lanes) + 1
    return lanes


def _metadata(lanes: Mapping[str, int]) -> list[dict[str, Any]]:
    def meta(kind: str, tid: int, **args: Any) -> dict[str, Any]:
        return {"name": kind, "ph": "M", "pid": PROCESS_ID, "tid": tid, "args": args}

    items = [meta("process_name", 0, name="autograd engine")]
    for thread, tid in lanes.items():
        items += [
            meta("thread_name", tid, name=thread_name(thread)),
            meta("thread_sort_index", tid, sort_index=tid),
        ]
    return items


def _group_by_thread(slices: Iterable[_Slice]) -> dict[str, list[_Slice]]:
    out: dict[str, list[_Slice]] = {}
    for s in slices:
        out.setdefault(s.thread, []).append(s)
    return out


def _nest(lane: list[_Slice]) -> None:
    """Clip slices that outlast the slice enclosing them, so the lane is a proper tree.

    It happens when a graph task fails on another thread: the owner stops
    waiting and moves on before the failing thread emits ``graph_task_end``.
    """
    lane.sort(key=lambda s: (s.start, -s.end))
    stack: list[_Slice] = []
    for s in lane:
        while stack and stack[-1].end <= s.start:
            stack.pop()
        if stack and s.end > stack[-1].end:
            s.end = stack[-1].end
            s.args["clipped"] = True
        stack.append(s)


# -- node slices -----------------------------------------------------------------------


def _node_runs(events: Sequence[TraceEvent]) -> list[_NodeRun]:
    """One run per ``node_start``, ended as Note [Node slices cover routing] says."""
    runs: list[_NodeRun] = []
    running: dict[tuple[int, int], _NodeRun] = {}
    routing: dict[str, _NodeRun] = {}  # per thread: the node passing its gradients on
    last = max((e.t_ns for e in events), default=0)
    for e in events:
        passing = routing.get(e.thread)
        if passing is not None:
            if _routes(e, passing):
                passing.span.end = max(passing.span.end, e.t_ns)
                if e.kind == "error":
                    _mark_error(passing.span, e)
            else:
                del routing[e.thread]
        if e.node_id is None:
            continue
        key = (e.graph_task, e.node_id)
        if e.kind == "node_start":
            run = _NodeRun(_Slice(e.thread, e.node_name or "?", "node", e.t_ns, last), *key)
            run.span.args.update(_node_args(e))
            running[key] = run
            runs.append(run)
        elif e.kind == "node_end" and key in running:
            run = running.pop(key)
            run.span.end = max(run.span.start, e.t_ns)
            run.span.args["apply_us"] = (run.span.end - run.span.start) / 1000
            run.span.args["outputs"] = _summaries(e.data.get("outputs", ()))
            routing[e.thread] = run
        elif e.kind == "error" and key in running:
            run = running.pop(key)
            run.span.end = max(run.span.start, e.t_ns)
            _mark_error(run.span, e)
    for run in running.values():
        run.span.args["status"] = "unfinished"
    return runs


def _routes(e: TraceEvent, run: _NodeRun) -> bool:
    """Whether ``e`` is ``run``'s node passing its gradients on (or failing to)."""
    if e.graph_task != run.graph_task:
        return False
    if e.kind in ("dependency_decrement", "accumulate", "skip"):
        return e.data.get("from_node") == run.node_id
    if e.kind == "enqueue":
        return e.data.get("reason") == "ready"
    return e.kind in ("release_variables", "anomaly", "error") and e.node_id == run.node_id


def _node_args(e: TraceEvent) -> dict[str, Any]:
    return {
        "node_id": e.node_id,
        "sequence_nr": _js_int(e.sequence_nr),
        "topological_nr": _js_int(e.topological_nr),
        "graph_task": e.graph_task,
        "device": e.device,
        "status": "ok",
        "inputs": _summaries(e.data.get("inputs", ())),
    }


def _say_values_not_recorded(runs: list[_NodeRun], values: str) -> None:
    """Below the tier ``all`` a gradient without a summary was not recorded: say so, rather
    than "undefined" (Note [Values tiers] in ``autograd_viz/trace/records.py``)."""
    if values == "all":
        return
    for run in runs:
        args = run.span.args
        if values == "leaves" and run.span.name in _LEAF_NODES:
            continue
        for key in ("inputs", "outputs"):
            shown = args.get(key)
            if isinstance(shown, list):
                args[key] = [NOT_RECORDED if v == "undefined" else v for v in shown]


NOT_RECORDED = "not recorded"
"""A gradient's summary in a trace recorded without it."""
_LEAF_NODES = frozenset({"AccumulateGrad", "torch::autograd::AccumulateGrad"})


def _mark_error(s: _Slice, e: TraceEvent) -> None:
    s.args["status"] = "error"
    s.args["error"] = f"{e.data.get('exc_type')}: {e.data.get('message')}"


# -- module slices ---------------------------------------------------------------------

# Note [Module slices]
# ~~~~~~~~~~~~~~~~~~~~
# A node's scope names the module calls that made it in the forward. On each
# lane, the runs of one graph task are taken in order, and a module call's
# slice spans the consecutive runs whose scopes go through it: it opens at
# the first one's start and closes at the last one's end, nested calls inside
# it. Backward mostly runs a model's layers one after the other, so a layer's
# backward is one slice; where the engine interleaves two modules' nodes, a
# call gets a slice per stretch. A slice is named after the module's path, so
# a viewer's totals by name are the time spent in each module (every call of
# an unrolled cell together); its arguments give the class, the call and the
# nodes it holds. Another graph task's runs (a reentrant backward inside a
# node) have their own slices, inside that node's. A compiled model's parameter
# is in its module's slices, as the module tree draws it
# (autograd_viz.trace.scopes.owner_scope).


def _module_slices(trace: Trace, runs: Sequence[_NodeRun]) -> list[_Slice]:
    """The module call slices of each lane (Note [Module slices]), outermost first at a time."""
    infos = trace.graph_tasks
    lanes: dict[tuple[str, int], list[_NodeRun]] = {}
    for run in runs:
        lanes.setdefault((run.span.thread, run.graph_task), []).append(run)
    made: list[tuple[int, _Slice]] = []
    for (thread, gid), lane in lanes.items():
        info = infos.get(gid)
        if info is None or not info.modules:
            continue
        open_: list[tuple[tuple[str, int], _Slice]] = []
        for run in lane:
            node = info.nodes.get(run.node_id)
            scope = owner_scope(node) if node is not None else ()
            keep = 0
            while keep < len(open_) and keep < len(scope) and open_[keep][0] == scope[keep]:
                keep += 1
            del open_[keep:]
            for depth in range(keep, len(scope)):
                path, call = scope[depth]
                args = {
                    "module": path,
                    "class": info.modules.get(path, ""),
                    "call": call,
                    "graph_task": gid,
                    "nodes": 0,
                }
                span = _Slice(thread, path, "module", run.span.start, run.span.end, args)
                open_.append((scope[depth], span))
                made.append((depth, span))
            for _entry, span in open_:
                span.end = max(span.end, run.span.end)
                span.args["nodes"] += 1
    made.sort(key=lambda item: (item[1].start, -item[1].end, item[0]))
    return [span for _depth, span in made]


# -- graph task slices -----------------------------------------------------------------


def _graph_task_slices(trace: Trace, calls_only: bool = False) -> list[_Slice]:
    """A slice per graph task on its owner's lane, and one on each pool thread it ran on.

    ``calls_only``: the trace was recorded at the call level (Note [Observation
    levels]): each slice is a ``call``, its nodes' order derived, not observed.
    """
    events = trace.events
    last = max((e.t_ns for e in events), default=0)
    ends: dict[int, TraceEvent] = {}
    spans: dict[tuple[int, str], list[int]] = {}  # (graph task, thread) -> [first, last]
    on_pool: set[int] = set()
    for e in events:
        if e.kind == "graph_task_end":
            ends.setdefault(e.graph_task, e)
        elif e.kind == "reentrant_enter" and e.data.get("on_pool"):
            on_pool.add(e.graph_task)
        span = spans.setdefault((e.graph_task, e.thread), [e.t_ns, e.t_ns])
        span[0] = min(span[0], e.t_ns)
        span[1] = max(span[1], e.t_ns)
    slices = []
    for gid, info in trace.graph_tasks.items():
        end_event = ends.get(gid)
        args: dict[str, Any] = {
            "graph_task": gid,
            "parent": info.parent,
            "reentrant_depth": info.reentrant_depth,
            "roots": [f"{name} (node {node_id})" for node_id, name, _ in info.roots],
            "keep_graph": info.keep_graph,
            "create_graph": info.create_graph,
            "nodes": len(info.nodes),
            "status": "unfinished" if end_event is None else end_event.data.get("status"),
        }
        if calls_only:
            args["order"] = DERIVED_ORDER
        if end_event is not None and end_event.data.get("status") == "error":
            args["error"] = f"{end_event.data.get('exc_type')}: {end_event.data.get('message')}"
        start = events[info.first_event].t_ns if info.first_event < len(events) else last
        end = last if end_event is None else end_event.t_ns
        # The owner's own events of this task (reentrant_exit) come after graph_task_end.
        owner_last = spans.get((gid, info.thread), [start, start])[1]
        name = f"graph task {gid}"
        category = "call" if calls_only else "graph_task"
        slices.append(_Slice(info.thread, name, category, start, max(start, end, owner_last), args))
        if gid in on_pool:
            for (task, thread), (first, final) in spans.items():
                if task == gid and thread != info.thread and thread.startswith(POOL_THREAD_PREFIX):
                    pool_args = {**args, "on_pool": True, "owner": info.thread}
                    slices.append(_Slice(thread, name, "graph_task", first, final, pool_args))
    return slices


# -- communication ----------------------------------------------------------------------

COMM_LANE = "communication: bucket "
"""The lanes of a distributed job's collectives, one per DDP gradient bucket; FSDP2's are
``communication: all_gather bucket N`` and ``communication: reduce_scatter bucket N``."""


def _comm_slices(events: Sequence[TraceEvent]) -> list[tuple[_Slice, TraceEvent]]:
    """A slice per collective (a DDP bucket's allreduce, an FSDP2 parameter group's
    all-gather or reduce-scatter), from launched to finished.

    Each is on its bucket's lane, one per kind of collective (allreduces of
    several buckets overlap), and comes with its ``launched`` event, where the
    backward was when it began (or the forward pass, graph task 0, for FSDP2's
    all-gathers before a module's forward).
    """
    launched: dict[tuple[int, Any, Any], TraceEvent] = {}
    out = []
    last = max((e.t_ns for e in events), default=0)
    for e in events:
        if e.kind != "comm":
            continue
        key = (e.graph_task, e.data.get("bucket"), e.data.get("op"))
        if e.data.get("phase") == "launched":
            launched[key] = e
            continue
        start = launched.pop(key, None)
        if start is not None:
            # A clock that ran backwards (crafted, or another thread's) ends it where it
            # began, as the node runs do: a slice never has a negative duration.
            out.append((_comm_slice(start, max(start.t_ns, e.t_ns), "finished"), start))
    out += [(_comm_slice(start, last, "unfinished"), start) for start in launched.values()]
    return out


def _comm_slice(start: TraceEvent, end: int, status: str) -> _Slice:
    d = start.data
    args = {
        "graph_task": start.graph_task,
        "bucket": d.get("bucket"),
        "bytes": d.get("bytes"),
        "params": list(d.get("params", ())),
        "launched_by": start.node_name,
        "node_id": start.node_id,
        "status": status,
    }
    name = f"{d.get('op')} bucket {d.get('bucket')}"
    lane = (
        f"{COMM_LANE}{d.get('bucket')}" if d.get("op") == "allreduce" else f"communication: {name}"
    )
    return _Slice(lane, name, "comm", start.t_ns, end, args)


def _comm_flows(
    comm: Sequence[tuple[_Slice, TraceEvent]], lanes: Mapping[str, int], us: _Clock, first_id: int
) -> list[dict[str, Any]]:
    """An arrow from the node whose gradient launched each collective to the collective."""
    out: list[dict[str, Any]] = []
    for flow_id, (span, start) in enumerate(comm, first_id):
        common = {"name": "launch", "cat": "flow", "id": flow_id, "pid": PROCESS_ID}
        at = us(start.t_ns)
        out.append({**common, "ph": "s", "ts": at, "tid": lanes[start.thread], "args": {}})
        out.append({**common, "ph": "f", "bp": "e", "ts": at, "tid": lanes[span.thread]})
    return out


# -- flows and instants ----------------------------------------------------------------


def _flows(
    events: Sequence[TraceEvent], lanes: Mapping[str, int], us: _Clock
) -> list[dict[str, Any]]:
    """A start/finish pair per enqueue whose node later started (same graph task)."""
    queued: dict[tuple[int, int], list[TraceEvent]] = {}
    out: list[dict[str, Any]] = []
    for e in events:
        if e.node_id is None:
            continue
        key = (e.graph_task, e.node_id)
        if e.kind == "enqueue":
            queued.setdefault(key, []).append(e)
        elif e.kind == "node_start" and queued.get(key):
            source = queued[key].pop(0)
            flow_id = len(out) // 2 + 1
            common = {"name": "enqueue", "cat": "flow", "id": flow_id, "pid": PROCESS_ID}
            out.append(
                {
                    **common,
                    "ph": "s",
                    "ts": us(source.t_ns),
                    "tid": lanes[source.thread],
                    "args": {
                        "node": e.node_name,
                        "queue": source.data.get("queue"),
                        "reason": source.data.get("reason"),
                        "queue_length": source.data.get("queue_length"),
                    },
                }
            )
            out.append({**common, "ph": "f", "bp": "e", "ts": us(e.t_ns), "tid": lanes[e.thread]})
    return out


def _instants(
    events: Sequence[TraceEvent], lanes: Mapping[str, int], us: _Clock
) -> list[dict[str, Any]]:
    """Errors, anomalies and accumulations into leaves, as thread-scoped instants."""
    out = []
    for e in events:
        if e.kind == "error":
            name = f"error: {e.data.get('exc_type')}"
            args = {"message": e.data.get("message"), "first": e.data.get("first")}
        elif e.kind == "anomaly":
            name = f"anomaly: {e.data.get('value')} in {e.node_name}"
            args = {
                "output_index": e.data.get("output_index"),
                "grad": _summary(e.data.get("grad")),
            }
        elif e.kind == "accumulate" and e.data.get("target") == "leaf":
            name = f"accumulate into {e.data.get('leaf_name') or 'leaf'}"
            args = {"action": e.data.get("action"), "grad": _summary(e.data.get("grad"))}
        else:
            continue
        args.update(graph_task=e.graph_task, node=e.node_name, node_id=e.node_id)
        out.append(
            {
                "name": name,
                "cat": e.kind,
                "ph": "i",
                "s": "t",
                "ts": us(e.t_ns),
                "pid": PROCESS_ID,
                "tid": lanes[e.thread],
                "args": args,
            }
        )
    return out


# -- short text for arguments ----------------------------------------------------------


def _summaries(values: Iterable[Any]) -> list[str]:
    return [_summary(v) for v in values]


def _summary(value: Any) -> str:
    """``float32[2, 3] sim:0 norm=1.5``; NaN and Inf counts when there are any."""
    if not isinstance(value, TensorSummary):
        return "undefined"
    text = f"{value.dtype}{list(value.shape)} {value.device}"
    if value.norm is not None:
        text += f" norm={value.norm:.4g}"
    if value.nan_count:
        text += f" nan={value.nan_count}"
    if value.inf_count:
        text += f" inf={value.inf_count}"
    return text


def _js_int(value: int | None) -> int | str | None:
    if value is not None and abs(value) >= _JS_SAFE_INT:
        return str(value)
    return value


# -- several processes -----------------------------------------------------------------

# Note [One timeline of several processes]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Each process of a job records its own trace (autograd_viz.launch.processes),
# timed by its own event clock. A merged timeline is each trace's timeline
# with its own pid (a process per rank in Perfetto), moved onto one time
# axis by the header's ``clock`` pair (the event clock and the wall clock
# read together): an event at wall time W sits at W minus the earliest
# process's start. A trace without the pair (recorded by an older version)
# starts at 0, and ``otherData.aligned`` says the clocks are not aligned.


def to_chrome_trace_of_processes(traces: Sequence[Trace]) -> dict[str, Any]:
    """One timeline of several traces of one job: a process per trace, clocks aligned.

    Args:
        traces: the traces of the job's processes (``t.rank0.jsonl``, ...), in
            the order their processes are listed.

    Returns:
        A Chrome Trace Event Format document, as :func:`to_chrome_trace`'s,
        with ``pid`` 1, 2, ... for the traces in order.
    """
    documents = [to_chrome_trace(trace) for trace in traces]
    starts = [_wall_start(trace, doc) for trace, doc in zip(traces, documents, strict=True)]
    aligned = all(start is not None for start in starts)
    base = min((s for s in starts if s is not None), default=0) if aligned else 0
    merged: list[dict[str, Any]] = []
    processes = []
    flow_ids = 0
    for pid, (trace, document, start) in enumerate(zip(traces, documents, starts, strict=True), 1):
        shift = (start - base) / 1000 if aligned and start is not None else 0.0
        last_flow = 0
        for item in document["traceEvents"]:
            item["pid"] = pid
            if "ts" in item:
                item["ts"] += shift
            if item.get("cat") == "flow":
                last_flow = max(last_flow, item["id"])
                item["id"] += flow_ids  # flow ids are global: each process gets its own range
            if item["name"] == "process_name":
                item["args"]["name"] = _process_label(trace, pid)
            merged.append(item)
        flow_ids += last_flow
        merged.append(_process_meta("process_sort_index", pid, sort_index=pid))
        processes.append({**document["otherData"], "pid": pid, **_process_fields(trace)})
    merged.sort(key=lambda item: (item["ph"] != "M", item.get("ts", 0)))
    shown: dict[str, Any] = _shown(
        {
            "traceEvents": merged,
            "displayTimeUnit": "ns",
            "otherData": {"generator": "autograd-viz", "aligned": aligned, "processes": processes},
        }
    )
    return shown


def save_chrome_trace_of_processes(
    traces: Sequence[Trace], path: str | os.PathLike[str]
) -> dict[str, Any]:
    """Write :func:`to_chrome_trace_of_processes` of ``traces`` to ``path`` as JSON.

    Raises:
        OSError: ``path`` cannot be written.
    """
    document = to_chrome_trace_of_processes(traces)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f, allow_nan=False, separators=(",", ":"))
        f.write("\n")
    return document


def _process_fields(trace: Trace) -> dict[str, Any]:
    process = trace.header.get("process")
    if not isinstance(process, dict):
        return {}
    keys = ("rank", "world_size", "host", "pid", "backend", "launcher")
    return {("process_id" if k == "pid" else k): process.get(k) for k in keys}


def _wall_start(trace: Trace, document: dict[str, Any]) -> int | None:
    """The wall-clock time of ``document``'s time 0 (Note [One timeline of several processes])."""
    process = trace.header.get("process")
    clock = process.get("clock") if isinstance(process, dict) else None
    if not clock:
        return None
    origin: int = document["otherData"]["origin_ns"]
    return int(origin - clock[0] + clock[1])


def _process_label(trace: Trace, pid: int) -> str:
    """``rank 1 of 2 (pid 4242 on host)``, or ``process 2`` for a trace that does not say."""
    process = trace.header.get("process")
    if not isinstance(process, dict):
        return f"process {pid}"
    if process.get("rank") is not None:
        who = f"rank {process['rank']}"
        if process.get("world_size") is not None:
            who += f" of {process['world_size']}"
    else:
        who = "process"
    return f"{who} (pid {process.get('pid')} on {process.get('host')})"


def _process_meta(kind: str, pid: int, **args: Any) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": 0, "args": args}
