"""Values tiers (``record(values=...)``, ``--values``): what each keeps, and the views on them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

import engine
from autograd_viz import to_dot
from autograd_viz.nan.scan import find_nans
from autograd_viz.nan.text import print_report
from autograd_viz.nan.watch import watch_nan
from autograd_viz.timeline import to_chrome_trace
from autograd_viz.trace import Trace
from autograd_viz.trace.recorder import Recorder
from autograd_viz.trace.recording import record
from autograd_viz.trace.records import values_recorded
from autograd_viz.trace.summary import TensorSummary
from autograd_viz.tui.panels import inspect_node

TIERS = ("all", "leaves", "none")
LEAF = ("AccumulateGrad", "torch::autograd::AccumulateGrad")


def _summaries(trace: Trace) -> list[tuple[str, str | None, str, Any]]:
    """Every tensor field of every event: (kind, node name, field, summary or None)."""
    found = []
    for event in trace.events:
        if event.kind == "anomaly":
            continue
        for key in ("inputs", "outputs", "grad", "total", "root_grads", "captured"):
            if key not in event.data:
                continue
            value = event.data[key]
            for one in value if isinstance(value, tuple) else (value,):
                found.append((event.kind, event.node_name, key, one))
    return found


def _shape(trace: Trace) -> list[tuple[Any, ...]]:
    """What a tier never changes: each event's kind, node, thread and plain fields."""
    return [
        (
            e.kind,
            e.node_name,
            e.topological_nr,
            e.thread,
            tuple(
                sorted(
                    (k, v)
                    for k, v in e.data.items()
                    if (isinstance(v, str | bool) and k != "queue_owner")
                    or (k in _COUNTS and isinstance(v, int))
                )
            ),
        )
        for e in trace.events
    ]


_COUNTS = frozenset({"remaining", "input_nr", "slot", "output_index", "reentrant_depth"})
"""Plain numbers of events that are the same in every run (ids and sequence numbers grow)."""


def _loaded(trace: Trace, tmp_path: Path) -> Trace:
    path = tmp_path / "t.jsonl"
    trace.save(path)
    loaded = Trace.load(path)
    assert loaded == trace
    return loaded


# -- our engine ----------------------------------------------------------------------------


def _engine_step() -> np.ndarray:
    rng = np.random.default_rng(0)
    w = engine.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    x = engine.tensor(rng.standard_normal((5, 3)))
    h = (x @ w).tanh()
    ((h * h).sum() + h.sum()).backward()  # h's buffer sums two gradients
    return w.grad.data.copy()


@pytest.mark.parametrize("values", TIERS)
def test_each_tier_keeps_its_summaries_and_everything_else_on_our_engine(
    values: str, tmp_path: Path
) -> None:
    plain = _engine_step()
    with record() as whole:
        _engine_step()
    with record(values=values) as trace:
        got = _engine_step()
    assert np.array_equal(plain, got), "results are bit-identical at every tier"
    assert _shape(trace) == _shape(whole), "the order, threads, graph and bookkeeping stay"
    assert values_recorded(trace.header) == values
    assert ("values" in trace.header) == (values != "all")
    found = _summaries(trace)
    kept = [(kind, name, key) for kind, name, key, s in found if s is not None]
    leaf_kept = [k for k in kept if k[1] in LEAF]
    assert found
    if values == "all":
        assert any(name not in LEAF for _, name, _ in kept)
    elif values == "leaves":
        assert leaf_kept, "a leaf's gradient keeps its summary"
        assert all(
            name in LEAF or kind in ("graph_task_start", "graph_task_end") for kind, name, _ in kept
        ), kept
    else:
        assert kept == []
    info = next(iter(trace.graph_tasks.values()))
    leaf = next(n for n in info.nodes.values() if n.leaf is not None)
    assert (leaf.leaf.grad is None) or values != "none"
    assert all(n.saved == () for n in info.nodes.values()) or values == "all"
    if values == "all":
        assert any(n.saved for n in info.nodes.values())
    loaded = _loaded(trace, tmp_path)
    assert values_recorded(loaded.header) == values


def test_a_tier_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="values must be one of 'none', 'leaves', 'all'"):
        Recorder(values="some")
    with pytest.raises(ValueError, match="got 'everything'"), record(values="everything"):
        pass


def test_a_header_with_an_unknown_tier_does_not_load(tmp_path: Path) -> None:
    with record(values="none") as trace:
        _engine_step()
    path = tmp_path / "t.jsonl"
    trace.save(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header["values"] = "most"
    (tmp_path / "bad.jsonl").write_text(
        "\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8"
    )
    from autograd_viz.trace import TraceFormatError

    with pytest.raises(TraceFormatError, match="values"):
        Trace.load(tmp_path / "bad.jsonl")


def test_a_flight_recorder_with_no_values_keeps_the_last_calls(tmp_path: Path) -> None:
    out = tmp_path / "ring.jsonl"
    with record(last=2, values="none", output=out) as trace:
        grads = [_engine_step() for _ in range(5)]
    assert all(np.array_equal(grads[0], g) for g in grads)
    calls = [i.call for i in trace.graph_tasks.values() if i.parent is None]
    assert calls == [3, 4]
    loaded = Trace.load(out)
    assert values_recorded(loaded.header) == "none"
    assert [i.call for i in loaded.graph_tasks.values()] == [3, 4]
    assert all(s is None for *_, s in _summaries(loaded))


@pytest.mark.parametrize(
    ("kwargs", "calls"), [({"every": 2}, [0, 2, 4]), ({"steps": "1,3"}, [1, 3])]
)
def test_steps_and_every_choose_the_calls_at_a_tier(
    kwargs: dict[str, Any], calls: list[int], tmp_path: Path
) -> None:
    out = tmp_path / "run.jsonl"
    with record(values="none", output=out, **kwargs):
        grads = [_engine_step() for _ in range(5)]
    assert all(np.array_equal(grads[0], g) for g in grads)
    loaded = Trace.load(out)
    assert [i.call for i in loaded.graph_tasks.values()] == calls
    assert values_recorded(loaded.header) == "none"
    assert all(s is None for *_, s in _summaries(loaded))


def test_the_views_on_a_trace_without_values(tmp_path: Path) -> None:
    with record(values="none") as trace:
        _engine_step()
    trace = _loaded(trace, tmp_path)
    state = trace.state_at(len(trace))
    assert state.leaves, "replay reaches the end and knows the leaves"
    dot = to_dot(trace, values=True).source
    assert "AccumulateGrad" in dot and "TanhBackward" in dot
    chrome = to_chrome_trace(trace)
    nodes = [e for e in chrome["traceEvents"] if e.get("cat") == "node"]
    assert len(nodes) == sum(1 for e in trace.events if e.kind == "node_start")
    assert chrome["otherData"]["values"] == "none"
    shown = [v for e in nodes for key in ("inputs", "outputs") for v in e["args"].get(key, ())]
    assert shown and set(shown) == {"not recorded"}
    task = next(iter(trace.graph_tasks.values()))
    node = next(n for n in task.nodes.values() if n.name == "TanhBackward0")
    console = Console(width=100, record=True)
    console.print(inspect_node(node, state.node(node.id, task.id), task, False, (), "none"))
    text = console.export_text()
    assert "values not recorded (--values none)" in text
    assert "empty" not in text


# -- NaN provenance ------------------------------------------------------------------------


def _nan_step() -> None:
    w = engine.tensor([1.0, 0.0, 2.0], requires_grad=True)
    (w.log() * w).sum().backward()  # log(0) * 0: a NaN born in the backward


@pytest.mark.parametrize("values", TIERS)
def test_the_nan_report_names_the_birth_at_every_tier_and_says_what_it_lacks(
    values: str,
) -> None:
    with watch_nan(values=values) as watch:
        _nan_step()
    report = watch.report
    assert report.first is not None, "the checks' findings are kept whole at every tier"
    assert report.values == values
    with watch_nan() as reference:
        _nan_step()
    assert report.first.node.name == reference.report.first.node.name
    console = Console(width=200, record=True)
    print_report(report, console)
    text = console.export_text()
    assert ("recorded without values" in text) == (values != "all")


def test_nan_on_a_trace_without_values_and_without_findings_says_it_needs_values() -> None:
    with record(values="none") as trace:
        _nan_step()  # no checks ran: only the recorded values could show the NaN
    report = find_nans(trace)
    assert report.first is None and report.values == "none"
    console = Console(width=200, record=True)
    print_report(report, console)
    text = console.export_text()
    assert "recorded without values (--values none)" in text
    assert "--values all" in text
    with record() as whole:
        _nan_step()
    assert find_nans(whole).first is not None, "with values the same run shows the NaN"


# -- PyTorch ---------------------------------------------------------------------------------


def _gru_step(torch: Any) -> list[Any]:
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(6, 6)
    h = torch.zeros(2, 6)
    for x in torch.randn(3, 2, 6):
        h = cell(x, h)
    (h.pow(2).sum() + h.sum()).backward()
    return [p.grad.clone() for p in cell.parameters()]


@pytest.mark.parametrize("values", TIERS)
def test_each_tier_on_pytorch_keeps_the_call_and_leaves_results_bit_identical(
    values: str, tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    plain = _gru_step(torch)
    with record() as whole:
        _gru_step(torch)
    with record(values=values) as trace:
        got = _gru_step(torch)
    assert all(torch.equal(a, b) for a, b in zip(plain, got, strict=True))
    assert _shape(trace) == _shape(whole)
    assert not any(e.kind == "derived_mismatch" for e in trace.events)
    found = _summaries(trace)
    kept = [(kind, name) for kind, name, _, s in found if s is not None]
    if values == "none":
        assert kept == []
    elif values == "leaves":
        assert any(name in LEAF for _, name in kept)
        assert all(
            name in LEAF or kind in ("graph_task_start", "graph_task_end") for kind, name in kept
        )
    else:
        assert any(name not in LEAF for _, name in kept)
    info = next(iter(trace.graph_tasks.values()))
    assert all(n.saved == () for n in info.nodes.values()) or values == "all"
    loaded = _loaded(trace, tmp_path)
    assert loaded.state_at(len(loaded)).leaves


def _twice(torch: Any, engine_: Any) -> list[Any]:
    """Two backward calls through a leaf and a saved tensor: the second finds ``.grad`` set."""
    if torch is not None:
        w = torch.ones(3, requires_grad=True)
        for _ in range(2):
            (w.exp() * w).sum().backward()
        return [w.grad.clone()]
    w = engine_.tensor(np.ones(3), requires_grad=True)
    for _ in range(2):
        (w.exp() * w).sum().backward()
    return [w.grad.data.copy()]


@pytest.mark.parametrize("source", ["engine", "torch"])
@pytest.mark.parametrize("values", TIERS)
def test_a_leafs_grad_before_the_call_is_kept_from_leaves_up_and_saved_tensors_at_all(
    values: str, source: str
) -> None:
    # The same promise on both engines (Note [Values tiers]): a leaf's .grad is a leaf's
    # gradient (kept at leaves and all), a saved tensor is not (kept at all only).
    torch = pytest.importorskip("torch") if source == "torch" else None
    with record(values=values) as trace:
        _twice(torch, engine)
    second = list(trace.graph_tasks.values())[1]
    (leaf,) = [n.leaf for n in second.nodes.values() if n.leaf is not None]
    assert (leaf.grad is not None) == (values != "none")
    if leaf.grad is not None:
        assert leaf.grad.max == pytest.approx(2 * np.e), "the first call's gradient"
    assert any(n.saved for n in second.nodes.values()) == (values == "all")


# -- the command line ------------------------------------------------------------------------


def test_record_and_nan_take_values_on_the_command_line(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(
        textwrap.dedent(
            """
            import numpy as np
            import engine
            w = engine.tensor(np.ones((3, 2)), requires_grad=True)
            for step in range(4):
                (engine.tensor(np.ones((2, 3))) @ w).tanh().sum().backward()
            """
        ),
        encoding="utf-8",
    )
    out = tmp_path / "t.jsonl"
    command = [sys.executable, "-m", "autograd_viz", "record", "-o", str(out)]
    done = subprocess.run(
        [*command, "--values", "none", "--last", "2", str(script)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "values       none: no gradient summaries" in done.stdout
    trace = Trace.load(out)
    assert values_recorded(trace.header) == "none"
    assert [i.call for i in trace.graph_tasks.values()] == [2, 3]
    assert all(s is None for *_, s in _summaries(trace))
    for view in (
        ["dot", str(out), "--values", "-o", str(tmp_path / "g.dot")],
        ["timeline", str(out), "--call", "3", "-o", str(tmp_path / "t.json")],
    ):
        shown = subprocess.run(
            [sys.executable, "-m", "autograd_viz", *view],
            capture_output=True,
            text=True,
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        said = "recorded with --values none: gradient values not recorded"
        assert (said in shown.stderr) == (view[0] == "dot"), shown.stderr
    bad = subprocess.run(
        [*command, "--values", "some", str(script)], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2 and "invalid choice: 'some'" in bad.stderr
    nan = subprocess.run(
        [sys.executable, "-m", "autograd_viz", "nan", "--values", "leaves", str(script)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert nan.returncode == 0, nan.stderr
    assert "recorded without values (--values leaves)" in nan.stdout
    assert "no NaN or Inf found" in nan.stdout


def test_the_tier_is_kept_whole_in_summaries_of_the_same_kind() -> None:
    """A summary the leaves tier keeps is the very summary ``all`` records."""
    with record() as whole:
        _engine_step()
    with record(values="leaves") as leaves:
        _engine_step()
    grads = [
        s
        for kind, name, _, s in _summaries(whole)
        if name in LEAF and kind == "accumulate" and isinstance(s, TensorSummary)
    ]
    same = [
        s
        for kind, name, _, s in _summaries(leaves)
        if name in LEAF and kind == "accumulate" and isinstance(s, TensorSummary)
    ]
    assert grads and grads == same


def test_a_live_session_records_at_its_tier() -> None:
    from autograd_viz.live import LiveSession

    plain = _engine_step()
    with LiveSession(_engine_step, values="none") as session:
        while not session.finished:
            session.continue_(timeout=30)
    assert session.error is None
    assert np.array_equal(session.result, plain)
    trace = session.trace
    assert values_recorded(trace.header) == "none"
    assert any(e.kind == "node_end" for e in trace.events)
    assert all(s is None for *_, s in _summaries(trace))


def test_a_child_process_records_at_the_tier_of_its_parent(tmp_path: Path) -> None:
    child = tmp_path / "child.py"
    child.write_text(
        textwrap.dedent(
            """
            import numpy as np
            import engine
            w = engine.tensor(np.ones((3, 2)), requires_grad=True)
            (engine.tensor(np.ones((2, 3))) @ w).tanh().sum().backward()
            """
        ),
        encoding="utf-8",
    )
    parent = tmp_path / "parent.py"
    parent.write_text(
        f"import subprocess, sys\nsubprocess.run([sys.executable, {str(child)!r}], check=True)\n",
        encoding="utf-8",
    )
    out = tmp_path / "t.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "autograd_viz", "record", "--values", "leaves", "-o", str(out),
         str(parent)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (path,) = tmp_path.glob("t.pid*.jsonl")
    trace = Trace.load(path)
    assert values_recorded(trace.header) == "leaves"
    kept = [(kind, name) for kind, name, _, s in _summaries(trace) if s is not None]
    assert kept and all(
        name in LEAF or kind in ("graph_task_start", "graph_task_end") for kind, name in kept
    )


@pytest.mark.parametrize("values", ["none", "leaves"])
def test_the_nan_checks_on_pytorch_name_the_birth_below_the_tier_all(values: str) -> None:
    torch = pytest.importorskip("torch")
    w = torch.tensor([1.0, 0.0, 2.0], requires_grad=True)
    with watch_nan() as reference:
        (w.log() * w).sum().backward()
    w.grad = None
    with watch_nan(values=values) as watch:
        (w.log() * w).sum().backward()
    first, expected = watch.report.first, reference.report.first
    assert first is not None and expected is not None
    assert (first.phase, first.node.name, first.op, first.value) == (
        expected.phase,
        expected.node.name,
        expected.op,
        expected.value,
    )
    assert watch.report.values == values


def test_a_selection_says_its_every_in_english() -> None:
    from autograd_viz.trace.calls import CallSelection

    said = [CallSelection(every=n).describe() for n in (2, 3, 4, 11, 12, 13, 21, 22, 101)]
    assert said == [
        f"every {n} call"
        for n in ("2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st")
    ]
