"""The call level (``record(observe="calls")``, ``--observe calls``): nodes derived, not observed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autograd_viz import to_dot
from autograd_viz.timeline import to_chrome_trace
from autograd_viz.trace import Trace
from autograd_viz.trace.recorder import Recorder
from autograd_viz.trace.recording import record
from autograd_viz.trace.records import observed, values_recorded

torch = pytest.importorskip("torch")

_ORDERED = ("node_start", "node_end", "enqueue", "dependency_decrement", "capture", "skip")
"""The kinds the call level derives as the node level observes or derives them."""


def _order(trace: Trace) -> list[tuple[Any, ...]]:
    """Each call's node order and bookkeeping: kind, node, topological number, counts."""
    rows = []
    for e in trace.events:
        if e.kind in _ORDERED or (e.kind == "accumulate" and e.data.get("target") == "buffer"):
            rows.append(
                (
                    e.kind,
                    e.node_name,
                    e.topological_nr,
                    e.data.get("remaining"),
                    e.data.get("slot"),
                    e.data.get("action"),
                    e.data.get("output_index"),
                )
            )
        elif e.kind in ("graph_task_start", "graph_task_end", "reentrant_enter", "reentrant_exit"):
            rows.append((e.kind, e.data.get("status"), e.data.get("depth")))
    return rows


def _mlp() -> list[Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x = torch.randn(5, 4)
    for _ in range(2):
        model.zero_grad()
        out = model(x)
        (out.pow(2).sum() + out.sum()).backward()  # one buffer sums two gradients
    return [p.grad.clone() for p in model.parameters()]


def _gru() -> list[Any]:
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(6, 6)
    h = torch.zeros(2, 6)
    for x in torch.randn(4, 2, 6):
        h = cell(x, h)
    (h.pow(2).sum() + h.sum()).backward()
    return [p.grad.clone() for p in cell.parameters()]


def _inputs() -> list[Any]:
    torch.manual_seed(0)
    w1 = torch.randn(3, 3, requires_grad=True)
    w2 = torch.randn(3, 3, requires_grad=True)
    x = torch.randn(2, 3)
    loss = ((x @ w1).relu() @ w2).sum()
    torch.autograd.backward(loss, inputs=[w2])  # only w2's side runs
    (g,) = torch.autograd.grad((x @ w1 @ w2).tanh().sum(), [w1])
    return [w2.grad.clone(), g, w1.grad]


def _retained() -> list[Any]:
    torch.manual_seed(0)
    w = torch.randn(4, requires_grad=True)
    y = (w * w).exp().sum()
    y.backward(retain_graph=True)
    y.backward()  # the same graph again
    return [w.grad.clone()]


def _checkpointed() -> list[Any]:
    torch.manual_seed(0)
    inner, head = torch.nn.Linear(3, 3), torch.nn.Linear(3, 1)
    x = torch.randn(2, 3, requires_grad=True)
    for _ in range(2):
        y = torch.utils.checkpoint.checkpoint(lambda v: inner(v).tanh(), x, use_reentrant=True)
        head(y).sum().backward()  # the checkpoint's backward runs a graph task of its own
    return [x.grad.clone(), *(p.grad.clone() for p in inner.parameters())]


def _two_roots() -> list[Any]:
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    a, b = (w * 2).sum(), (w.exp() * w).sum()
    torch.autograd.backward([a, b])  # PyTorch's GraphRoot hands out both gradients
    return [w.grad.clone()]


PROGRAMS: dict[str, Callable[[], list[Any]]] = {
    "mlp": _mlp,
    "gru": _gru,
    "inputs": _inputs,
    "retain_graph": _retained,
    "checkpoint": _checkpointed,
    "two_roots": _two_roots,
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_derived_order_is_the_observed_order_and_results_stay_bit_identical(
    name: str, tmp_path: Path
) -> None:
    program = PROGRAMS[name]
    plain = program()
    with record(values="none") as nodes:
        watched = program()
    with record(observe="calls") as calls:
        got = program()
    for a, b in zip(plain, got, strict=True):
        assert (a is None and b is None) or torch.equal(a, b), "results are bit-identical"
    for a, b in zip(plain, watched, strict=True):
        assert (a is None and b is None) or torch.equal(a, b)
    assert _order(calls) == _order(nodes)
    assert len(calls.graph_tasks) == len(nodes.graph_tasks) > 0
    node_events = [e for e in calls.events if e.kind in ("node_start", "node_end")]
    assert node_events and all(e.data.get("derived") for e in node_events)
    assert not any(
        e.data.get("derived")
        for e in nodes.events
        if e.kind == "node_start" and e.node_name != "GraphRoot"  # PyTorch never shows it
    )
    assert observed(calls.header) == "calls" and observed(nodes.header) == "nodes"
    assert values_recorded(calls.header) == "none"
    path = tmp_path / "t.jsonl"
    calls.save(path)
    loaded = Trace.load(path)
    assert loaded == calls and observed(loaded.header) == "calls"


@pytest.mark.parametrize("last", [None, 5])
def test_a_reentrant_checkpoint_is_a_child_of_its_call_not_a_call(last: int | None) -> None:
    with record(values="none") as nodes:
        _checkpointed()
    with record(observe="calls", last=last) as calls:
        _checkpointed()

    def tasks(trace: Trace) -> list[tuple[Any, ...]]:
        infos = list(trace.graph_tasks.values())
        order = [i.id for i in infos]
        return [
            (i.call, None if i.parent is None else order.index(i.parent), i.reentrant_depth)
            for i in infos
        ]

    assert tasks(calls) == tasks(nodes) == [(0, None, 0), (None, 0, 1), (1, None, 0), (None, 2, 1)]
    # The inner graph task runs inside the checkpoint's node, as the node level saw it.
    kinds = [
        (e.kind, e.node_name)
        for e in calls.events
        if e.kind in ("graph_task_start", "reentrant_enter", "reentrant_exit")
        or (e.kind in ("node_start", "node_end") and e.node_name == "CheckpointFunctionBackward")
    ]
    assert kinds[:6] == [
        ("graph_task_start", "SumBackward0"),
        ("node_start", "CheckpointFunctionBackward"),
        ("graph_task_start", "TanhBackward0"),
        ("reentrant_enter", None),
        ("reentrant_exit", None),
        ("node_end", "CheckpointFunctionBackward"),
    ]


def test_a_call_keeps_its_own_times_and_its_nodes_none() -> None:
    with record(observe="calls") as trace:
        _gru()
    start = next(e for e in trace.events if e.kind == "graph_task_start")
    end = next(e for e in trace.events if e.kind == "graph_task_end")
    assert end.t_ns > start.t_ns, "the call's start is taken before it runs"
    nodes = [e for e in trace.events if e.kind == "node_start"]
    assert all(e.t_ns == end.t_ns for e in nodes), "a node's time was not observed"
    info = next(iter(trace.graph_tasks.values()))
    assert all(n.saved == () for n in info.nodes.values())


def test_a_call_takes_its_own_time_when_a_listener_wants_events_one_by_one() -> None:
    # A listener beside the recorder that takes no batches (as run --print's NaN checks):
    # the derived events are emitted one by one, and still carry the call's end, so the
    # call's duration is its own, not its derivation's too.
    from engine.events import listen

    seen: list[Any] = []
    with record(observe="calls") as trace, listen(seen.append):
        _gru()
    start = next(e for e in trace.events if e.kind == "graph_task_start")
    end = next(e for e in trace.events if e.kind == "graph_task_end")
    derived = [e for e in trace.events if e.kind != "graph_task_start"]
    assert len(derived) > 100 and {e.t_ns for e in derived} == {end.t_ns}
    assert end.t_ns > start.t_ns
    assert [e.seq for e in seen] == [e.seq for e in trace.events], "both saw every event"


def test_a_flight_recorder_at_the_call_level_keeps_the_last_calls(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x = torch.randn(4, 3)

    def train() -> list[Any]:
        for _ in range(5):
            model.zero_grad()
            model(x).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    out = tmp_path / "last.jsonl"
    with record(observe="calls", last=2, output=out) as trace:
        train()
    assert [i.call for i in trace.graph_tasks.values()] == [3, 4]
    loaded = Trace.load(out)
    assert observed(loaded.header) == "calls"
    assert [i.call for i in loaded.graph_tasks.values()] == [3, 4]
    dot = to_dot(loaded).source
    assert "AddmmBackward0" in dot and "order derived, not observed" in dot
    timeline = to_chrome_trace(loaded)
    assert any(ev.get("cat") == "call" for ev in timeline["traceEvents"])


def test_a_call_that_fails_is_recorded_with_its_error() -> None:
    w = torch.randn(3, requires_grad=True)
    y = (w * 2).sum()
    y.backward()
    with record(observe="calls") as trace, pytest.raises(RuntimeError, match="second time"):
        y.backward()  # the graph was freed by the first call
    end = next(e for e in trace.events if e.kind == "graph_task_end")
    assert end.data["status"] == "error" and end.data["exc_type"] == "RuntimeError"
    assert not any(e.kind == "node_start" for e in trace.events)


def test_values_with_the_call_level_are_refused() -> None:
    with pytest.raises(ValueError, match="observe='calls' keeps no values"):
        Recorder(values="all", observe="calls")
    with pytest.raises(ValueError, match="observe must be one of 'nodes', 'calls'"):
        Recorder(observe="everything")
    with pytest.raises(ValueError, match="got 'leaves'"), record(observe="calls", values="leaves"):
        pass


def test_the_command_line_records_at_the_call_level_and_refuses_what_needs_nodes(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            torch.manual_seed(0)
            model = torch.nn.Linear(3, 1)
            for step in range(4):
                model.zero_grad()
                model(torch.ones(2, 3)).sum().backward()
            """
        ),
        encoding="utf-8",
    )
    out = tmp_path / "t.jsonl"
    avz = [sys.executable, "-m", "autograd_viz"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*avz, *args], capture_output=True, text=True, check=False)

    done = run("record", "-o", str(out), "--observe", "calls", "--last", "2", str(script))
    assert done.returncode == 0, done.stderr
    assert "observe      calls: each call's nodes derived from its graph" in done.stdout
    trace = Trace.load(out)
    assert observed(trace.header) == "calls" and values_recorded(trace.header) == "none"
    assert [i.call for i in trace.graph_tasks.values()] == [2, 3]
    bad = run("record", "--observe", "calls", "--values", "all", str(script))
    assert bad.returncode == 2 and "--values all needs --observe nodes" in bad.stderr
    nan = run("nan", "--observe", "calls", str(script))
    assert nan.returncode == 2 and "nan needs the nodes watched" in nan.stderr
    assert "Traceback" not in bad.stderr + nan.stderr


def test_the_tui_replays_a_call_level_trace_and_says_the_order_is_derived() -> None:
    from textual.pilot import Pilot

    from tests.viz.tui.tuiting import inspector, replay_app, run_app, status

    with record(observe="calls") as trace:
        _mlp()
    app = replay_app(trace)
    seen: list[str] = []
    bars: list[str] = []

    async def actions(pilot: Pilot[Any]) -> None:
        for _ in range(6):
            await pilot.press("n")
            await pilot.pause()
            seen.append(inspector(app))
            bars.append(status(app))

    run_app(app, actions)
    assert all("order derived, not observed" in bar for bar in bars), bars
    assert any("Backward0" in text for text in seen), seen


def test_a_child_process_records_at_the_call_level_too(tmp_path: Path) -> None:
    child = tmp_path / "child.py"
    child.write_text(
        "import torch\nw = torch.ones(3, requires_grad=True)\n(w * 2).sum().backward()\n",
        encoding="utf-8",
    )
    parent = tmp_path / "parent.py"
    parent.write_text(
        f"import subprocess, sys\nsubprocess.run([sys.executable, {str(child)!r}], check=True)\n",
        encoding="utf-8",
    )
    out = tmp_path / "t.jsonl"
    command = ["record", "-o", str(out), "--observe", "calls", str(parent)]
    done = subprocess.run(
        [sys.executable, "-m", "autograd_viz", *command],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    traces = [Trace.load(p) for p in tmp_path.glob("t*.jsonl")]
    recorded = [t for t in traces if t.graph_tasks]
    assert recorded, (done.stdout, [p.name for p in tmp_path.iterdir()])
    assert all(observed(t.header) == "calls" for t in recorded)
    assert all(e.data.get("derived") for t in recorded for e in t.events if e.kind == "node_start")
