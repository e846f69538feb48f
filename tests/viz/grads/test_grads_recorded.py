"""``grads -o TRACE``: each backward call's findings go into the trace as a ``grads`` event of
its graph task, read back whole by every reader (the whole file, one call, ``grads TRACE``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from grads_programs import marked_line, write

from autograd_viz.cli.grads import report_on_trace
from autograd_viz.cli.main import main
from autograd_viz.grads.recorded import KIND, call_grads, leaf_finding, off_graph
from autograd_viz.grads.report import CUT, NO_GRAD, UNREACHED, ZEROS
from autograd_viz.grads.trace_report import flow_of
from autograd_viz.trace import Trace
from autograd_viz.trace.index import load_call

pytestmark = pytest.mark.oracle


def recorded_with_findings(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> tuple[Path, Path]:
    script = write(tmp_path, name)
    trace = tmp_path / f"{name}.jsonl"
    assert main(["grads", "-o", str(trace), str(script), "-"]) == 1
    assert f"saved to {trace}" in capsys.readouterr().err
    return script, trace


def test_every_call_of_the_trace_holds_what_grads_found(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script, path = recorded_with_findings(tmp_path, "all", capsys)
    trace = Trace.load(path)
    calls = [info for info in trace.graph_tasks.values() if info.parent is None]
    assert len(calls) == 3
    noted = [e for e in trace.events if e.kind == KIND]
    assert sorted(e.graph_task for e in noted) == sorted(info.id for info in calls)
    for event in noted:  # after its call's end, with no node
        end = max(e.index for e in trace.events if e.graph_task == event.graph_task
                  and e.kind == "graph_task_end")  # fmt: skip
        assert event.index > end and event.node_id is None
    found = call_grads(trace, calls[-1].id)
    assert found is not None
    reasons = {f.parameter: f for f in found.findings}
    assert reasons["cutter.weight"].reason == CUT
    assert reasons["cutter.weight"].where.line == marked_line(script, "cut")
    assert "self.cutter(h).detach()" in reasons["cutter.weight"].where.code
    assert reasons["teacher.weight"].reason == NO_GRAD
    assert reasons["aux.weight"].reason == UNREACHED
    assert reasons["dead.weight"].reason == ZEROS
    # A leaf on the graph is explained on its node; the others are off the graph.
    leaves = {n.leaf.name: n.leaf for n in calls[-1].nodes.values() if n.leaf is not None}
    assert leaf_finding(found, leaves["dead.weight"]).reason == ZEROS
    assert leaf_finding(found, leaves["head.weight"]) is None
    on_graph = set(leaves)
    off = {f.parameter for f in off_graph(found, on_graph)}
    assert {"cutter.weight", "teacher.weight", "aux.weight", "spare.weight"} <= off
    assert "dead.weight" not in off and "head.weight" not in off
    flow = {row.module: row for row in flow_of(trace, calls[-1].id)}
    assert flow["head"].grad_norm > 0 and flow["head"].param_norm > 0


def test_one_call_loaded_alone_keeps_its_findings_and_grads_reads_them_whole(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script, path = recorded_with_findings(tmp_path, "all", capsys)
    one = load_call(path, 1)
    (info,) = [i for i in one.graph_tasks.values() if i.parent is None]
    assert info.call == 1
    found = call_grads(one, info.id)
    assert found is not None and any(f.reason == CUT for f in found.findings)
    # grads TRACE reads every reason the watch gave, not only what summaries say.
    report = report_on_trace(str(path))
    assert not report.from_trace and report.calls == 3
    assert {r.finding.reason for r in report.missing} >= {CUT, NO_GRAD, UNREACHED}
    assert main(["grads", str(path)]) == 1
    out = capsys.readouterr().out
    assert "read from a trace" not in out and f"{script.name}:{marked_line(script, 'cut')}" in out


def test_a_trace_without_findings_still_gives_the_flow_of_its_summaries(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace_path = tmp_path / "plain.jsonl"
    assert main(["record", "-o", str(trace_path), str(write(tmp_path, "all")), "-"]) == 0
    capsys.readouterr()
    trace = Trace.load(trace_path)
    assert not any(e.kind == KIND for e in trace.events)
    last = [i for i in trace.graph_tasks.values() if i.parent is None][-1]
    assert call_grads(trace, last.id) is None
    flow = {row.module: row for row in flow_of(trace, last.id)}
    assert flow["head"].grad_norm > 0


def test_hostile_names_in_findings_stay_text(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A finding's strings are data: a name with quotes, braces and a newline loads back as is."""
    _, path = recorded_with_findings(tmp_path, "all", capsys)
    lines = path.read_text(encoding="utf-8").splitlines()
    name = 'a"b\\n{x}</g>\u202e\nz'
    for i, line in enumerate(lines):
        item = json.loads(line)
        if item.get("kind") == KIND:
            item["data"]["findings"][0]["parameter"] = name
            item["data"]["flow"][0]["module"] = name
            lines[i] = json.dumps(item)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    trace = Trace.load(path)
    event = next(e for e in trace.events if e.kind == KIND)
    assert event.data["findings"][0]["parameter"] == name
    assert event.data["flow"][0]["module"] == name
    assert call_grads(trace, event.graph_task).findings[0].parameter == name


def test_grads_o_refuses_a_trace_and_a_directory(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = recorded_with_findings(tmp_path, "all", capsys)
    assert main(["grads", "-o", str(tmp_path / "x.jsonl"), str(path)]) == 2
    assert "is a trace" in capsys.readouterr().err
    assert main(["grads", "-o", str(tmp_path), str(write(tmp_path, "healthy"))]) == 3
    assert "is a directory" in capsys.readouterr().err


def test_record_and_dot_take_why_and_leave_it_off_by_default(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = write(tmp_path, "all")
    plain, why = tmp_path / "plain.jsonl", tmp_path / "why.jsonl"
    assert main(["record", "-o", str(plain), str(script), "-"]) == 0
    assert main(["record", "--why", "-o", str(why), str(script), "-"]) == 0
    capsys.readouterr()
    without, with_why = Trace.load(plain), Trace.load(why)
    assert not any(e.kind == KIND for e in without.events)
    assert sum(e.kind == KIND for e in with_why.events) == 3
    # The watch's own hooks are not the program's: neither trace lists one on a leaf.
    for trace in (without, with_why):
        assert not any(e.kind == "hook" for e in trace.events)
        assert not any(n.hooks for i in trace.graph_tasks.values() for n in i.nodes.values())
    # Everything else recorded is the same run's.
    kinds = [e.kind for e in with_why.events if e.kind != KIND]
    assert kinds == [e.kind for e in without.events]
    dot = tmp_path / "why.dot"
    assert main(["dot", str(script), "-", "--why", "--expand", "all", "-o", str(dot)]) == 0
    assert "no-gradient" in dot.read_text(encoding="utf-8")
    assert main(["dot", str(script), "-", "--expand", "all", "-o", str(dot)]) == 0
    assert "no-gradient" not in dot.read_text(encoding="utf-8")


def test_the_views_read_the_same_missing_reasons_the_report_gives() -> None:
    """A view tells a parameter without gradient by the reason strings the trace holds."""
    from autograd_viz.grads.report import MISSING
    from autograd_viz.trace.notes import MISSING_REASONS

    assert frozenset(MISSING) == MISSING_REASONS
