"""Recording: what a trace's graph snapshots and events hold, and that a save and load keep it."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import engine
from autograd_viz.trace import Trace, TraceEvent, writing
from autograd_viz.trace.recorder import Recorder
from autograd_viz.trace.recording import record
from autograd_viz.trace.records import FORMAT, SCHEMA_VERSION
from engine import events
from tests.graphs import reachable


def _incoming(nodes: dict[int, engine.Node]) -> dict[int, int]:
    counts = dict.fromkeys(nodes, 0)
    for node in nodes.values():
        for fn, _ in node.next_functions:
            if fn is not None:
                counts[fn.node_id] += 1
    return counts


def _reaches(node: engine.Node, target: engine.Node) -> bool:
    """Whether a path of edges leads from ``node`` to ``target``."""
    return any(n is target for n in reachable(node).values())


def _only_task(trace: Trace) -> int:
    (gid,) = trace.graph_tasks
    return gid


# -- graph snapshots ----------------------------------------------------------------------


def test_snapshot_matches_the_live_graph() -> None:
    x = engine.tensor([0.5, 0.75], requires_grad=True, name="x")
    y = engine.tensor([0.1, 0.90], requires_grad=True, name="y")
    z = engine.exp(x * y).sum()
    live = reachable(z.grad_fn)
    with record(max_values=8) as trace:
        z.backward()
    info = trace.graph_tasks[_only_task(trace)]
    assert info.root == z.grad_fn.node_id
    assert info.roots == ((z.grad_fn.node_id, "SumBackward0", 0),)
    assert info.outputs == () and info.parent is None and info.reentrant_depth == 0
    assert not info.keep_graph and not info.create_graph
    assert next(iter(info.nodes)) == z.grad_fn.node_id  # discovery order starts at the root
    assert set(info.nodes) == set(live)
    dependencies = _incoming(live)
    for node_id, node in info.nodes.items():
        real = live[node_id]
        assert node.name == real.name()
        assert node.sequence_nr == real.sequence_nr
        assert node.topological_nr == real.topological_nr
        assert node.next_edges == tuple(
            None if fn is None else (fn.node_id, nr) for fn, nr in real.next_functions
        )
        assert node.dependencies == dependencies[node_id]
        assert node.status == "needed" and node.captures == ()
    names = [n.name for n in info.nodes.values()]
    assert names[:3] == ["SumBackward0", "ExpBackward0", "MulBackward0"]
    assert sorted(names[3:]) == ["AccumulateGrad", "AccumulateGrad"]
    mul = info.nodes[z.grad_fn.next_functions[0][0].next_functions[0][0].node_id]
    assert mul.inputs == (((2,), "float32", "cpu"),)
    # MulBackward0 saved both factors, ExpBackward0 its result.
    saved = [np.asarray(s.values) for s in mul.saved]
    np.testing.assert_array_equal(saved[0], x.data)
    np.testing.assert_array_equal(saved[1], y.data)
    exp = info.nodes[z.grad_fn.next_functions[0][0].node_id]
    np.testing.assert_array_equal(exp.saved[0].values, np.exp(x.data * y.data))
    leaves = {n.leaf.name: n.leaf for n in info.nodes.values() if n.leaf is not None}
    assert set(leaves) == {"x", "y"}
    assert leaves["x"].shape == (2,) and leaves["x"].dtype == "float32"
    assert leaves["x"].device == "cpu" and leaves["x"].grad is None


def test_leaf_info_holds_the_gradient_from_before_the_call() -> None:
    w = engine.tensor([1.0, 2.0, 3.0], dtype=engine.float64, requires_grad=True, name="w")
    (w * 2.0).sum().backward()
    with record() as trace:
        (w * w).sum().backward()
    (leaf,) = [n.leaf for n in trace.graph_tasks[_only_task(trace)].nodes.values() if n.leaf]
    assert leaf.name == "w" and leaf.dtype == "float64"
    assert leaf.grad is not None and leaf.grad.values == (2.0, 2.0, 2.0)


def test_hooks_and_anomaly_tracebacks_are_in_the_snapshot() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with engine.detect_anomaly():
            x = engine.tensor([1.0, 2.0], requires_grad=True)
            x.register_hook(lambda g: g * 1.0)
            h = x * 3.0
            h.retain_grad()
            h.grad_fn.register_hook(lambda outputs, inputs: None)
            loss = h.sum()
    with record() as trace:
        loss.backward()
    nodes = trace.graph_tasks[_only_task(trace)].nodes
    mul = nodes[h.grad_fn.node_id]
    assert dict(mul.hooks) == {"post": 1, "retain_grad": 1}
    assert dict(nodes[x.gradient_edge().function.node_id].hooks) == {"tensor_pre": 1}
    assert mul.traceback is not None and "h = x * 3.0" in "".join(mul.traceback)


def test_backward_inputs_prunes_what_does_not_lead_to_them() -> None:
    x = engine.tensor([0.5, 0.75], requires_grad=True, name="x")
    y = engine.tensor([0.1, 0.90], requires_grad=True, name="y")
    z = (engine.exp(x * y) + y.sin()).sum()
    with record() as trace:
        engine.backward([z], inputs=[x])
    info = trace.graph_tasks[_only_task(trace)]
    acc_x = x.gradient_edge().function
    assert info.outputs == ((acc_x.node_id, 0),)
    live = reachable(z.grad_fn)
    for node_id, node in info.nodes.items():
        expected = "needed" if _reaches(live[node_id], acc_x) else "pruned"
        assert node.status == expected, node.name
        assert node.captures == ()
    statuses = {n.name: n.status for n in info.nodes.values() if n.name != "AccumulateGrad"}
    assert statuses["SinBackward0"] == "pruned" and statuses["ExpBackward0"] == "needed"


def test_grad_records_captures_and_prunes_the_inputs_own_sinks() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    y = engine.tensor([3.0, 4.0], requires_grad=True, name="y")
    h = x * y
    out = (h.exp() + y.cos()).sum()
    with record() as trace:
        engine.grad(out, [x, h])
    info = trace.graph_tasks[_only_task(trace)]
    acc_x = x.gradient_edge().function
    assert info.outputs == ((acc_x.node_id, 0), (h.grad_fn.node_id, 0))
    captures = {n.name if n.leaf is None else n.leaf.name: n.captures for n in info.nodes.values()}
    assert captures["x"] == ((0, 0),)
    assert captures["MulBackward0"] == ((0, 1),)
    assert captures["y"] == ()
    live = reachable(out.grad_fn)
    for node_id, node in info.nodes.items():
        # grad() never runs an input's AccumulateGrad: it only captures what reaches it.
        reaches = _reaches(live[node_id], acc_x) and live[node_id] is not acc_x
        assert node.status == ("needed" if reaches else "pruned"), node.name


def test_max_values_decides_which_summaries_keep_values() -> None:
    small = engine.tensor([1.0, -2.0, 3.0, 4.0], requires_grad=True, name="small")
    big = engine.tensor([1.0, 2.0, 3.0, 4.0, 5.0], requires_grad=True, name="big")
    traces = {}
    for max_values in (0, 4, 5):
        small.grad = big.grad = None
        with record(max_values=max_values) as trace:
            (small * small).sum().backward()
            (big * 2.0).sum().backward()
        traces[max_values] = trace
    for max_values, trace in traces.items():
        assert trace.header["max_values"] == max_values
        leaf_grads = {
            e.data["leaf_name"]: e.data["grad"]
            for e in trace.events
            if e.kind == "accumulate" and e.data["target"] == "leaf"
        }
        for name, summary in leaf_grads.items():
            # The statistics are there whatever max_values says.
            real = (small if name == "small" else big).grad.numpy()
            assert summary.min == real.min() and summary.max == real.max()
            assert math.isclose(summary.norm, float(np.linalg.norm(real)), rel_tol=1e-6)
            keeps = summary.numel <= max_values
            assert (summary.values is not None) == keeps, (max_values, name)
            if keeps:
                np.testing.assert_array_equal(summary.values, real.ravel())
    saved = [s for n in traces[4].graph_tasks.values() for v in n.nodes.values() for s in v.saved]
    assert saved and all(s is not None and s.values is not None for s in saved[:2])


@pytest.mark.parametrize("bad", [-1, 1.5, True, "16", None])
def test_recorder_rejects_a_bad_max_values(bad: object) -> None:
    with pytest.raises(ValueError, match=r"max_values must be a non-negative integer, got "):
        Recorder(bad)  # type: ignore[arg-type]


# -- graph tasks over time -------------------------------------------------------------


class _Reentrant(engine.Function):
    """Its backward runs a nested ``backward()`` (a reentrant graph task)."""

    @staticmethod
    def forward(ctx: object, x: engine.Tensor) -> engine.Tensor:
        return x * 1.0

    @staticmethod
    def backward(ctx: object, grad: engine.Tensor) -> engine.Tensor:
        inner = engine.tensor([1.0], requires_grad=True, name="inner")
        with engine.enable_grad():
            (inner * 3.0).sum().backward()
        return grad * 2.0


def test_a_reentrant_graph_task_links_to_its_parent() -> None:
    x = engine.tensor([2.0], requires_grad=True, name="x")
    loss = _Reentrant.apply(x).sum()
    with record() as trace:
        loss.backward()
    outer, inner = trace.graph_tasks.values()
    assert outer.parent is None and outer.reentrant_depth == 0
    assert inner.parent == outer.id and inner.reentrant_depth == 1
    assert inner.thread == outer.thread
    assert trace.events[inner.first_event].kind == "graph_task_start"
    assert trace.events[inner.first_event].graph_task == inner.id
    # The nested call starts while the parent's custom node is running.
    running = [e for e in trace.events[: inner.first_event] if e.kind == "node_start"]
    assert running[-1].node_name == "_ReentrantBackward"
    kinds = [e.kind for e in trace.events if e.graph_task == inner.id]
    assert kinds[0] == "graph_task_start" and "reentrant_exit" in kinds


def test_many_backward_calls_in_one_trace() -> None:
    w = engine.tensor([1.0, -1.0], dtype=engine.float64, requires_grad=True, name="w")
    loss = (w * w * 3.0).sum()
    with record() as trace:
        for _ in range(4):
            loss.backward(retain_graph=True)
    assert len(trace.graph_tasks) == 4
    ids = list(trace.graph_tasks)
    assert ids == sorted(ids)
    starts = [e.index for e in trace.events if e.kind == "graph_task_start"]
    assert [info.first_event for info in trace.graph_tasks.values()] == starts
    assert [e.index for e in trace.events] == list(range(len(trace)))
    for k, (gid, info) in enumerate(trace.graph_tasks.items()):
        assert info.keep_graph
        own = list(trace.events_of(gid))
        assert own[0].kind == "graph_task_start" and own[-1].kind == "graph_task_end"
        (leaf,) = [n.leaf for n in info.nodes.values() if n.leaf is not None]
        before = None if k == 0 else tuple(6.0 * k * w.data)
        assert (leaf.grad.values if leaf.grad else None) == before
    stats = trace.stats()
    assert stats.graph_tasks == 4 and stats.events == len(trace) and stats.errors == 0
    assert stats.nodes == 4 * len(trace.graph_tasks[ids[0]].nodes)


_DATA = {
    "enqueue": {"queue": "cpu", "queue_owner": "device", "reason": "ready", "queue_length": 1},
    "node_start": {"inputs": []},
    "hook": {"hook": "pre", "replaced": False, "hook_name": "h"},
    "node_end": {"outputs": []},
}


def _event(kind: str, seq: int) -> events.Event:
    return events.Event(kind, seq, seq * 10, "T", "cpu", 7, 42, "F", 0, 0, _DATA[kind])


def test_events_recorded_out_of_order_are_put_back_in_engine_order() -> None:
    recorder = Recorder()
    for kind, seq in (("enqueue", 1), ("node_start", 2), ("node_end", 5)):
        recorder(_event(kind, seq))
    trace = recorder.trace
    assert trace.state_at(3).node(42, 7).status == "done"  # indexes the first three events
    recorder(_event("hook", 3))  # emitted before seq 5, recorded after it
    recorder(_event("hook", 4))
    assert [e.seq for e in trace.events] == [1, 2, 3, 4, 5]
    assert [e.index for e in trace.events] == [0, 1, 2, 3, 4]
    assert [e.kind for e in trace.events] == ["enqueue", "node_start", "hook", "hook", "node_end"]
    during = trace.state_at(3).node(42, 7)
    assert during.status == "running" and during.hooks_run == 1
    after = trace.state_at(5).node(42, 7)
    assert after.status == "done" and after.hooks_run == 2


def test_a_call_that_cannot_be_handed_on_is_said_and_later_calls_are_kept() -> None:
    """Keeping a finished call (writing it to a file) fails: the program's backward goes
    on, one line says so, and the calls after it are handed on."""
    kept: list[int] = []

    def on_calls(part: Trace, calls: int) -> None:
        if not kept:
            kept.append(-1)
            raise ValueError("cannot encode this call")
        kept.append(len(part.graph_tasks))

    x = engine.tensor([0.5, 0.75], requires_grad=True)
    recorder = Recorder(on_calls=on_calls)
    said = r"keeping the last 1 backward call\(s\) failed \(ValueError: cannot encode this call\)"
    with pytest.warns(RuntimeWarning, match=said + ".*later backward calls"), recorder.listening():
        for _ in range(3):
            engine.backward([(x * x).sum()])
    assert kept == [-1, 1, 1]  # the two later calls, each handed on
    assert x.grad is not None and np.array_equal(x.grad.data, 3 * 2 * x.data)
    assert recorder.cut_calls == 1
    assert recorder.first_cut == "keeping 1 backward call: ValueError: cannot encode this call"


# -- save and load ----------------------------------------------------------------------


def _seeds_example() -> Trace:
    x = engine.tensor([0.5, 0.75], requires_grad=True, name="x")
    y = engine.tensor([0.1, 0.90], requires_grad=True, name="y")
    with record() as trace:
        engine.backward([engine.exp(x * y).sum()], inputs=[x])
    return trace


def _non_finite() -> Trace:
    x = engine.tensor([0.0, 1.0, 4.0, -1.0], requires_grad=True, name="x")
    with record(max_values=8) as trace, np.errstate(all="ignore"):
        (x.sqrt() - x.log()).sum().backward()
    grads = [e.data["grad"] for e in trace.events if e.kind == "accumulate"]
    assert any(g.nan_count for g in grads) and any(g.inf_count for g in grads)
    return trace


def _two_devices() -> Trace:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    w = engine.tensor([0.5, 0.25], device="sim:1", requires_grad=True, name="w")
    with record() as trace:
        a = (x.to("sim:0") * 2.0).to("cpu")
        b = (x.to("sim:1") * w).to("cpu")
        (a + b).sum().backward()
    assert {e.device for e in trace.events} >= {"cpu", "sim:0", "sim:1"}
    return trace


class _Boom(engine.Function):
    @staticmethod
    def forward(ctx: object, x: engine.Tensor) -> engine.Tensor:
        return x * 1.0

    @staticmethod
    def backward(ctx: object, grad: engine.Tensor) -> engine.Tensor:
        raise ValueError("no gradient today \udcff é")  # a lone surrogate: not UTF-8


def _error() -> Trace:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    with record() as trace, pytest.raises(ValueError, match="no gradient today"):
        (_Boom.apply(x) * 2.0).sum().backward()
    return trace


def _anomaly() -> Trace:
    x = engine.tensor([0.0, 1.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with engine.detect_anomaly():
            y = x.sqrt()
            with record() as trace, pytest.raises(RuntimeError, match="returned nan values"):
                (y * 0.0).sum().backward()
    assert trace.stats().anomalies == 1
    return trace


def _forward_anomaly() -> Trace:
    """Forward findings (graph task 0) around a backward pass, collected, then one raised."""
    x = engine.tensor([0.0, 2.0], requires_grad=True, name="x")
    with warnings.catch_warnings(), np.errstate(all="ignore"), record() as trace:
        warnings.simplefilter("ignore")
        with engine.detect_anomaly(check_inf=True, check_forward=True, mode="collect"):
            loss = (x.log() * 0.0).sum() + x.sqrt().sum()
            loss.backward()
        with engine.detect_anomaly(check_forward=True), pytest.raises(RuntimeError):
            (x - 1.0).sqrt()
    phases = [e.data["phase"] for e in trace.events if e.kind == "anomaly"]
    assert {"forward", "backward"} <= set(phases) and trace.stats().anomalies == len(phases)
    return trace


def _grad_and_reentrant() -> Trace:
    x = engine.tensor([2.0, 3.0], requires_grad=True, name="x")
    with record() as trace:
        h = x * x
        engine.grad(h.sum(), [x, h], create_graph=True)
        _Reentrant.apply(x).sum().backward()
    return trace


TRACES: dict[str, Callable[[], Trace]] = {
    "seeds-example": _seeds_example,
    "nan-and-inf": _non_finite,
    "two-devices": _two_devices,
    "error": _error,
    "anomaly": _anomaly,
    "forward-anomaly": _forward_anomaly,
    "grad-and-reentrant": _grad_and_reentrant,
}


@pytest.mark.parametrize("name", list(TRACES))
def test_save_then_load_gives_the_same_trace(name: str, tmp_path: Path) -> None:
    trace = TRACES[name]()
    path = tmp_path / "trace.jsonl"
    trace.save(path)
    loaded = Trace.load(path)
    assert loaded == trace
    assert len(loaded) == len(trace) and loaded.stats() == trace.stats()
    again = tmp_path / "again.jsonl"
    loaded.save(again)
    assert again.read_bytes() == path.read_bytes()
    assert not list(tmp_path.glob("*.tmp"))


def test_a_changed_value_makes_traces_unequal(tmp_path: Path) -> None:
    trace = _non_finite()
    path = tmp_path / "trace.jsonl"
    trace.save(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    # The first summary holding a NaN, with that NaN changed into 0.0.
    k = next(i for i, line in enumerate(lines) if '"nan"' in line)
    lines[k] = lines[k].replace('"nan"', "0.0", 1)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert Trace.load(path) != trace
    assert trace != Trace(trace.header, trace.graph_tasks, trace.events[:-1])


def test_file_layout_follows_the_format(tmp_path: Path) -> None:
    trace = _grad_and_reentrant()
    path = tmp_path / "trace.jsonl"
    trace.save(path)
    raw = path.read_bytes()
    assert raw.endswith(b"\n") and b"NaN" not in raw
    records = [json.loads(line) for line in raw.decode("utf-8").splitlines()]
    assert records[0] == {
        "type": "header",
        "format": FORMAT,
        "version": SCHEMA_VERSION,
        "engine": engine.__version__,
        "max_values": 16,
        "sources": ["engine"],
    }
    i = 1
    seqs = []
    while i < len(records):
        item = records[i]
        if item["type"] == "graph_task":
            nodes = records[i + 1 : i + 1 + item["nodes"]]
            assert all(n["type"] == "node" and n["graph_task"] == item["id"] for n in nodes)
            start = records[i + 1 + item["nodes"]]
            assert start["kind"] == "graph_task_start" and start["graph_task"] == item["id"]
            i += 1 + item["nodes"]
            continue
        assert item["type"] == "event"
        seqs.append(item["seq"])
        i += 1
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) == len(trace)


def test_non_finite_values_are_written_as_strings(tmp_path: Path) -> None:
    trace = _non_finite()
    path = tmp_path / "trace.jsonl"
    trace.save(path)
    text = path.read_text(encoding="utf-8")
    assert '"nan"' in text and '"inf"' in text and '"-inf"' in text
    loaded = Trace.load(path)
    grads = [e.data["grad"] for e in loaded.events if e.kind == "accumulate"]
    assert any(g.values is not None and math.isnan(g.values[0]) for g in grads)


def test_save_keeps_the_previous_file_when_writing_fails(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text("old\n", encoding="utf-8")
    trace = _seeds_example()
    broken = TraceEvent(len(trace), "node_end", 10**9, 0, "T", "cpu", 1, data={"x": object()})
    trace.events.append(broken)
    with pytest.raises(TypeError):
        writing.save(trace, path)
    assert path.read_text(encoding="utf-8") == "old\n"
    assert not list(tmp_path.glob("*.tmp"))


# -- forward anomaly events ----------------------------------------------------------------


def test_forward_anomalies_are_recorded_outside_every_graph_task(tmp_path: Path) -> None:
    trace = _forward_anomaly()
    forward = [e for e in trace.events if e.kind == "anomaly" and e.data["phase"] == "forward"]
    assert [(e.node_name, e.data["op"], e.data["value"], e.data["born"]) for e in forward] == [
        ("LogBackward0", "log", "inf", True),
        ("MulBackward0", "mul", "nan", False),  # -inf * 0 passes the log's Inf on, as NaN
        ("SumBackward0", "sum", "nan", False),
        ("AddBackward0", "add", "nan", False),
        ("SqrtBackward0", "sqrt", "nan", True),
    ]
    assert all(e.graph_task == 0 and e.device == "cpu" for e in forward)
    assert [e.data["raised"] for e in forward] == [False] * 4 + [True]
    log = forward[0]
    assert log.data["tensor"].inf_count == 1
    assert log.data["tensor"].values == (-math.inf, float(np.log(np.float32(2.0))))
    assert log.data["inputs"][0].values == (0.0, 2.0) and log.data["nonfinite_inputs"] == ()
    mul = forward[1]
    assert mul.data["inputs"][1] is None and mul.data["nonfinite_inputs"] == (0,)
    path = tmp_path / "trace.jsonl"
    trace.save(path)
    assert Trace.load(path) == trace


def test_forward_anomalies_replay_without_touching_the_graph_tasks() -> None:
    trace = _forward_anomaly()
    (gid,) = trace.graph_tasks
    end = trace.state_at(len(trace))
    assert len(end.anomalies) == trace.stats().anomalies
    # Collected backward findings leave their nodes done; the graph task succeeded.
    assert end.graph_tasks[gid].status == "ok"
    assert all(n.status == "done" for n in end.nodes(gid).values())
    # The last event is the raised forward finding; it names a node in no graph task.
    assert end.event is not None and end.event.graph_task == 0
    assert end.graph_task == gid
    with pytest.raises(KeyError):
        end.node(end.event.node_id, 0)
    first = next(e.index for e in trace.events if e.kind == "anomaly")
    assert trace.state_at(first + 1).graph_task == gid  # before the backward: the next one
    assert trace.state_at(first + 1).anomalies[0].data["op"] == "log"


def test_a_collected_backward_anomaly_does_not_fail_its_node() -> None:
    x = engine.tensor([0.0, 1.0], requires_grad=True)
    with warnings.catch_warnings(), record() as trace:
        warnings.simplefilter("ignore")
        with engine.detect_anomaly(mode="collect"):
            (x.sqrt() * 0.0).sum().backward()
    (anomaly,) = [e for e in trace.events if e.kind == "anomaly"]
    assert anomaly.data["phase"] == "backward" and not anomaly.data["raised"]
    state = trace.state_at(anomaly.index + 1)
    assert state.node(anomaly.node_id).status == "done"
    assert state.anomalies == (anomaly,)


def test_node_infos_built_through_the_twin_class_equal_the_constructors() -> None:
    # Note [Building frozen records]: every field lands where NodeInfo's constructor puts it.
    import dataclasses

    from autograd_viz.trace import NodeInfo
    from autograd_viz.trace.records import new_node_info as _new_node_info

    values = tuple(f"field {i}" for i in range(len(dataclasses.fields(NodeInfo))))
    built = _new_node_info(*values)
    assert type(built) is NodeInfo and built == NodeInfo(*values)
    assert dataclasses.astuple(built) == values
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.name = "x"  # type: ignore[misc]
