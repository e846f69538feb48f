"""Chrome Trace Event Format timelines: lanes, slices, nesting, flows and instants."""

from __future__ import annotations

import json
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

import autograd_viz
import engine
from autograd_viz.live import thread_name
from autograd_viz.timeline import save_chrome_trace, to_chrome_trace
from autograd_viz.trace import GraphTaskInfo, Trace, TraceEvent
from engine.engine import MAX_RECURSION_DEPTH
from tests.graphs import FailsInBackward, Reentrant

EPS = 1e-6  # microseconds; timestamps are floats


class _MakesNaN(engine.Function):
    @staticmethod
    def forward(ctx: Any, x: engine.Tensor) -> engine.Tensor:
        return x * 1.0

    @staticmethod
    def backward(ctx: Any, grad: engine.Tensor) -> engine.Tensor:
        return grad * float("nan")


def _two_device_trace() -> Trace:
    with autograd_viz.record() as trace:
        x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
        left = (x.to("sim:0") * 2.0).exp().to("cpu")
        right = (x.to("sim:1") ** 2).to("cpu")
        (left + right).sum().backward()
    return trace


def _reentrant_trace(depth: int) -> Trace:
    with autograd_viz.record() as trace:
        y = engine.tensor([2.0], requires_grad=True, name="y")
        Reentrant.apply(y, depth).sum().backward()
    return trace


def _of(doc: dict[str, Any], ph: str, cat: str | None = None) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e["ph"] == ph and (cat is None or e.get("cat") == cat)]


def _lanes(doc: dict[str, Any]) -> dict[str, int]:
    return {e["args"]["name"]: e["tid"] for e in _of(doc, "M") if e["name"] == "thread_name"}


def _end(s: dict[str, Any]) -> float:
    return s["ts"] + s["dur"]


def _inside(inner: dict[str, Any], outer: dict[str, Any]) -> bool:
    return outer["ts"] - EPS <= inner["ts"] and _end(inner) <= _end(outer) + EPS


def _enclosing(doc: dict[str, Any], item: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        s
        for s in _of(doc, "X")
        if s["tid"] == item["tid"] and s["ts"] - EPS <= item["ts"] <= _end(s) + EPS
    ]


def _assert_valid(doc: dict[str, Any]) -> None:
    """What Perfetto and chrome://tracing need: times, pairs, and a proper tree per lane."""
    json.loads(json.dumps(doc, allow_nan=False))
    lanes = set(_lanes(doc).values())
    for e in doc["traceEvents"]:
        if e["ph"] != "M":
            assert e["tid"] in lanes and e["ts"] >= 0
    for s in _of(doc, "X"):
        assert s["dur"] >= 0
    starts = Counter(e["id"] for e in _of(doc, "s"))
    finishes = Counter(e["id"] for e in _of(doc, "f"))
    assert starts == finishes and set(starts.values()) <= {1}
    by_lane: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for s in _of(doc, "X"):
        by_lane[s["tid"]].append(s)
    for slices in by_lane.values():
        slices.sort(key=lambda s: (s["ts"], -s["dur"]))
        stack: list[dict[str, Any]] = []
        for s in slices:
            while stack and _end(stack[-1]) <= s["ts"] + EPS:
                stack.pop()
            assert not stack or _end(s) <= _end(stack[-1]) + EPS, (s, stack[-1])
            stack.append(s)


def test_a_node_slice_per_node_start_named_after_the_node() -> None:
    trace = _two_device_trace()
    doc = to_chrome_trace(trace)
    _assert_valid(doc)
    started = Counter(e.node_name for e in trace.events if e.kind == "node_start")
    sliced = Counter(s["name"] for s in _of(doc, "X", "node"))
    assert sliced == started and sum(sliced.values()) == trace.stats().nodes
    for s in _of(doc, "X", "node"):
        assert s["args"]["status"] == "ok"
        assert 0 <= s["args"]["apply_us"] <= s["dur"] + EPS
        assert {"node_id", "sequence_nr", "topological_nr", "graph_task"} <= set(s["args"])
    mul = next(s for s in _of(doc, "X", "node") if s["name"] == "MulBackward0")
    assert len(mul["args"]["inputs"]) == 1
    assert mul["args"]["inputs"][0].startswith("float32[2] sim:0 norm=")


def test_one_lane_per_engine_thread_with_the_thread_names() -> None:
    trace = _two_device_trace()
    doc = to_chrome_trace(trace)
    lanes = _lanes(doc)
    assert set(lanes) == {thread_name(e.thread) for e in trace.events}
    assert {"main", "sim:0", "sim:1"} <= set(lanes)
    assert len(set(lanes.values())) == len(lanes)
    for s in _of(doc, "X", "node"):
        event = next(
            e for e in trace.events if e.kind == "node_start" and e.node_id == s["args"]["node_id"]
        )
        assert s["tid"] == lanes[thread_name(event.thread)]
    assert [e for e in _of(doc, "M") if e["name"] == "process_name"]


def test_timestamps_are_microseconds_from_the_first_event() -> None:
    trace = _two_device_trace()
    doc = to_chrome_trace(trace)
    task = _of(doc, "X", "graph_task")[0]
    assert task["ts"] == 0.0
    assert task["dur"] == pytest.approx(trace.stats().duration_ns / 1000)
    assert doc["displayTimeUnit"] == "ns" and doc["otherData"]["events"] == len(trace)


def test_flows_join_each_enqueue_to_its_node_start_across_threads() -> None:
    trace = _two_device_trace()
    doc = to_chrome_trace(trace)
    starts = {e["id"]: e for e in _of(doc, "s")}
    finishes = {e["id"]: e for e in _of(doc, "f")}
    assert len(starts) == trace.stats().nodes, "every node that ran was enqueued once"
    assert any(starts[i]["tid"] != finishes[i]["tid"] for i in starts)
    node_slices = _of(doc, "X", "node")
    for flow_id, finish in finishes.items():
        start = starts[flow_id]
        assert finish["bp"] == "e" and start["ts"] <= finish["ts"]
        assert (start["name"], start["cat"]) == (finish["name"], finish["cat"])
        assert _enclosing(doc, start), f"flow {flow_id} starts outside any slice"
        target = [s for s in node_slices if s["tid"] == finish["tid"] and s["ts"] == finish["ts"]]
        assert len(target) == 1 and target[0]["name"] == start["args"]["node"]


def test_reentrant_graph_tasks_nest_inside_the_node_that_started_them() -> None:
    trace = _reentrant_trace(3)
    doc = to_chrome_trace(trace)
    _assert_valid(doc)
    tasks = {s["args"]["graph_task"]: s for s in _of(doc, "X", "graph_task")}
    assert len(tasks) == 4
    nodes = _of(doc, "X", "node")
    origin = min(e.t_ns for e in trace.events)
    for task_id, task in tasks.items():
        parent = task["args"]["parent"]
        if parent is None:
            continue
        starter = [
            s
            for s in nodes
            if s["name"] == "ReentrantBackward"
            and s["args"]["graph_task"] == parent
            and s["tid"] == task["tid"]
        ]
        assert len(starter) == 1
        assert _inside(task, starter[0]) and task["dur"] < starter[0]["dur"]
        assert _inside(starter[0], tasks[parent])
        exit_ = next(
            e for e in trace.events if e.kind == "reentrant_exit" and e.graph_task == task_id
        )
        assert _end(task) == pytest.approx((exit_.t_ns - origin) / 1000), "it covers the wait"


def test_a_graph_task_handed_to_the_pool_is_a_slice_on_the_pool_lane() -> None:
    trace = _reentrant_trace(MAX_RECURSION_DEPTH + 2)
    doc = to_chrome_trace(trace)
    _assert_valid(doc)
    lanes = _lanes(doc)
    pool_lanes = {tid for name, tid in lanes.items() if name.startswith("pool-")}
    assert pool_lanes
    on_pool = [s for s in _of(doc, "X", "graph_task") if s["args"].get("on_pool")]
    assert on_pool and all(s["tid"] in pool_lanes for s in on_pool)
    for task in on_pool:
        gid = task["args"]["graph_task"]
        own = [s for s in _of(doc, "X", "node") if s["args"]["graph_task"] == gid]
        assert own and all(_inside(s, task) for s in own if s["tid"] == task["tid"])
        owner = next(
            s
            for s in _of(doc, "X", "graph_task")
            if s["args"]["graph_task"] == gid
            and s["tid"] == lanes[thread_name(task["args"]["owner"])]
        )
        assert _inside(task, owner), "the owner waits for the pool thread to finish"


def test_a_failing_node_ends_at_its_error_and_the_error_is_an_instant() -> None:
    with autograd_viz.record() as trace:
        x = engine.tensor([1.0, 2.0], requires_grad=True)
        with pytest.raises(ValueError, match="this backward always fails"):
            FailsInBackward.apply(x.to("sim:0")).sum().backward()
    doc = to_chrome_trace(trace)
    _assert_valid(doc)
    failed = next(s for s in _of(doc, "X", "node") if s["name"] == "FailsInBackwardBackward")
    error = _of(doc, "i", "error")
    assert len(error) == 1 and error[0]["name"] == "error: ValueError"
    assert failed["args"]["status"] == "error"
    assert failed["args"]["error"] == "ValueError: this backward always fails"
    assert _end(failed) == pytest.approx(error[0]["ts"])
    task = _of(doc, "X", "graph_task")[0]
    assert task["args"]["status"] == "error"
    assert doc["otherData"]["errors"] == 1


def test_anomalies_and_accumulations_into_leaves_are_instants() -> None:
    with autograd_viz.record() as trace:
        x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
        (x * 3.0).sum().backward()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # anomaly mode warns when enabled and on the NaN
            with engine.detect_anomaly(), pytest.raises(RuntimeError, match="returned nan"):
                _MakesNaN.apply(x).sum().backward()
    doc = to_chrome_trace(trace)
    _assert_valid(doc)
    leaves = _of(doc, "i", "accumulate")
    assert [e["name"] for e in leaves] == ["accumulate into x"]
    assert leaves[0]["args"]["grad"].startswith("float32[2] cpu norm=")
    anomaly = _of(doc, "i", "anomaly")
    assert [e["name"] for e in anomaly] == ["anomaly: nan in _MakesNaNBackward"]
    assert len(_of(doc, "i", "error")) == 1


def test_a_trace_cut_mid_run_gives_unfinished_slices_to_its_last_event() -> None:
    trace = _two_device_trace()
    cut = next(i for i, e in enumerate(trace.events) if e.kind == "node_start") + 1
    cut = next(i for i in range(cut, len(trace)) if trace.events[i].kind == "node_start") + 1
    events = trace.events[:cut]
    doc = to_chrome_trace(Trace(trace.header, trace.graph_tasks, events))
    _assert_valid(doc)
    last_us = (events[-1].t_ns - min(e.t_ns for e in events)) / 1000
    unfinished = [s for s in _of(doc, "X", "node") if s["args"]["status"] == "unfinished"]
    assert len(unfinished) == 1 and unfinished[0]["name"] == events[-1].node_name
    assert _end(unfinished[0]) == pytest.approx(last_us)
    task = _of(doc, "X", "graph_task")[0]
    assert task["args"]["status"] == "unfinished" and _end(task) == pytest.approx(last_us)
    assert len(_of(doc, "s")) == 2, "the second node's flow has a start and a finish"


def _event(
    index: int, kind: str, thread: str, gid: int, node: int | None, **data: Any
) -> TraceEvent:
    name = None if node is None else f"Node{node}Backward"
    return TraceEvent(
        index, kind, index + 1, 1000 * (index + 1), thread, "cpu", gid, node, name, node, 0, data
    )


def _task(gid: int, parent: int | None, first_event: int) -> GraphTaskInfo:
    return GraphTaskInfo(
        gid,
        parent,
        gid - 1,
        False,
        False,
        gid,
        ((gid, f"Node{gid}Backward", 0),),
        (),
        "MainThread",
        first_event,
    )


def test_a_slice_outliving_its_parent_on_the_lane_is_clipped_to_it() -> None:
    # A reentrant graph task fails on a device thread, its owner returns and the node
    # that started it ends before the failing thread emits graph_task_end.
    main, sim = "MainThread", "autograd-sim:0"
    kinds = [
        ("graph_task_start", main, 1, 1, {}),
        ("enqueue", main, 1, 1, {"reason": "root", "queue": "cpu"}),
        ("node_start", main, 1, 1, {"inputs": ()}),
        ("graph_task_start", main, 2, 2, {}),
        ("reentrant_enter", main, 2, None, {"on_pool": False}),
        ("enqueue", main, 2, 2, {"reason": "root", "queue": "sim:0"}),
        ("node_start", sim, 2, 2, {"inputs": ()}),
        ("error", sim, 2, 2, {"exc_type": "ValueError", "message": "no", "first": True}),
        ("reentrant_exit", main, 2, None, {"ok": False}),
        ("node_end", main, 1, 1, {"outputs": ()}),
        (
            "graph_task_end",
            sim,
            2,
            None,
            {"status": "error", "exc_type": "ValueError", "message": "no"},
        ),
        ("graph_task_end", main, 1, None, {"status": "ok"}),
    ]
    events = [
        _event(i, kind, thread, gid, node, **data)
        for i, (kind, thread, gid, node, data) in enumerate(kinds)
    ]
    doc = to_chrome_trace(Trace(None, {1: _task(1, None, 0), 2: _task(2, 1, 3)}, events))
    _assert_valid(doc)
    tasks = {s["args"]["graph_task"]: s for s in _of(doc, "X", "graph_task")}
    outer = next(s for s in _of(doc, "X", "node") if s["args"]["graph_task"] == 1)
    assert tasks[2]["args"]["clipped"] and _end(tasks[2]) == _end(outer) == 9.0
    assert "clipped" not in tasks[1]["args"] and _end(tasks[1]) == 11.0
    inner = next(s for s in _of(doc, "X", "node") if s["args"]["graph_task"] == 2)
    assert (inner["ts"], inner["dur"], inner["args"]["status"]) == (6.0, 1.0, "error")


def test_an_empty_trace_is_a_valid_timeline() -> None:
    doc = to_chrome_trace(Trace())
    _assert_valid(doc)
    assert [e["name"] for e in doc["traceEvents"]] == ["process_name"]


def test_saved_timeline_loads_back_and_a_loaded_trace_gives_the_same(tmp_path: Path) -> None:
    trace = _two_device_trace()
    trace.save(tmp_path / "t.jsonl")
    written = save_chrome_trace(Trace.load(tmp_path / "t.jsonl"), tmp_path / "t.json")
    loaded = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    assert loaded == written == to_chrome_trace(trace)


def test_the_programs_thread_is_called_main_in_the_timeline_as_everywhere() -> None:
    from autograd_viz.live import LiveSession

    def program() -> None:
        x = engine.tensor([1.0, 2.0], requires_grad=True)
        (x * x).sum().backward()

    with LiveSession(program) as session:
        session.run_to_end(timeout=10)
    with autograd_viz.record() as trace:
        program()
    for recorded in (session.trace, trace):
        lanes = [
            e["args"]["name"]
            for e in to_chrome_trace(recorded)["traceEvents"]
            if e["name"] == "thread_name"
        ]
        assert lanes == ["main"]


# -- modules --------------------------------------------------------------------------------


def _modules_trace() -> Trace:
    """An encoder of two layers, each two scopes deep, then an unrolled cell, on our engine."""
    w = engine.tensor([0.5, -1.5], requires_grad=True, name="w")
    v = engine.tensor([2.0, 0.25], requires_grad=True, name="v")
    with autograd_viz.record() as trace:
        h = engine.tensor([1.0, 2.0])
        with engine.scope("encoder", kind="Encoder"):
            for i in range(2):
                with engine.scope(f"layer{i}", kind="Layer"):
                    with engine.scope("mix", kind="Linear"):
                        h = (h * w).tanh()
                    h = h + 1.0
        with engine.scope("cell", kind="Cell"):
            pass  # a call that made no node: it is no call of this graph
        for _ in range(3):
            with engine.scope("cell", kind="Cell"):
                h = (h * v).sin()
        h.sum().backward()
    return trace


def test_module_calls_are_nested_slices_around_their_nodes() -> None:
    trace = _modules_trace()
    doc = to_chrome_trace(trace)
    _assert_valid(doc)
    (info,) = trace.graph_tasks.values()
    modules = _of(doc, "X", "module")
    assert {m["name"] for m in modules} == {
        "encoder", "encoder.layer0", "encoder.layer1", "encoder.layer0.mix",
        "encoder.layer1.mix", "cell",
    }  # fmt: skip
    for m in modules:
        assert m["args"]["class"] == info.modules[m["name"]]
    nodes = _of(doc, "X", "node")
    for node in nodes:
        scope = info.nodes[node["args"]["node_id"]].scope
        around = [
            m for m in modules if _inside(node, m) and (m["name"], m["args"]["call"]) in scope
        ]
        # Every module call of the node's scope is a slice around it, and no other is.
        assert sorted((m["name"], m["args"]["call"]) for m in around) == sorted(scope), node
        others = [m for m in modules if _inside(node, m)]
        assert len(others) == len(scope)
    # A slice holds as many nodes as sit inside it.
    for m in modules:
        inside = [n for n in nodes if _inside(n, m)]
        assert m["args"]["nodes"] == len(inside)


def test_an_unrolled_cells_calls_are_slices_of_one_name() -> None:
    doc = to_chrome_trace(_modules_trace())
    cells = [m for m in _of(doc, "X", "module") if m["name"] == "cell"]
    # Backward runs the last step first; w's and v's AccumulateGrad belong to call 0.
    assert sorted({m["args"]["call"] for m in cells}) == [0, 1, 2]
    assert all(m["args"]["class"] == "Cell" for m in cells)


def test_a_trace_without_modules_has_no_module_slices() -> None:
    doc = to_chrome_trace(_two_device_trace())
    assert _of(doc, "X", "module") == []


def test_hostile_module_paths_are_text_in_the_timeline() -> None:
    from tests.hostile.names import HOSTILE

    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    with autograd_viz.record() as trace:
        with engine.scope(HOSTILE["osc_title"], kind=HOSTILE["bell_backspace"]):
            y = x * 2.0
        y.sum().backward()
    doc = to_chrome_trace(trace)
    _assert_valid(doc)
    (module,) = _of(doc, "X", "module")
    text = json.dumps(module)
    assert "\\u001b" not in text and "\\u0007" not in text
    assert "pwned" in module["name"] and "a" in module["args"]["class"]


def test_a_collective_whose_clock_ran_backwards_has_no_negative_duration() -> None:
    # Crafted timestamps: the allreduce finishes 5 µs before it was launched.
    main = "MainThread"
    comm = {"op": "allreduce", "bucket": 0, "bytes": 8, "params": ["w"]}
    kinds = [
        ("graph_task_start", main, 1, 1, {}),
        ("enqueue", main, 1, 1, {"reason": "root", "queue": "cpu"}),
        ("node_start", main, 1, 1, {"inputs": ()}),
        ("comm", main, 1, 1, {**comm, "phase": "launched"}),
        ("node_end", main, 1, 1, {"outputs": ()}),
        ("comm", main, 1, None, {**comm, "phase": "finished"}),
        ("graph_task_end", main, 1, None, {"status": "ok"}),
    ]
    events = [
        _event(i, kind, thread, gid, node, **data)
        for i, (kind, thread, gid, node, data) in enumerate(kinds)
    ]
    earlier = events[3].t_ns - 5000
    events[5] = TraceEvent(5, "comm", 6, earlier, main, "cpu", 1, None, None, None, 0, kinds[5][4])
    doc = to_chrome_trace(Trace(None, {1: _task(1, None, 0)}, events))
    _assert_valid(doc)
    (collective,) = _of(doc, "X", "comm")
    assert collective["dur"] == 0 and collective["args"]["status"] == "finished"
    origin = min(e.t_ns for e in events)  # the crafted one: timestamps count from it
    assert collective["ts"] == (events[3].t_ns - origin) / 1000
    assert all(s["dur"] >= 0 for s in _of(doc, "X"))
