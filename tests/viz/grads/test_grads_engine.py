"""``watch_grads`` on our engine: the same reasons where the engine can tell them apart
(Note [Leaves on our engine] in ``autograd_viz/grads/engine_calls.py``)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from grads_programs import marked_line, write

import engine
from autograd_viz.cli.main import main
from autograd_viz.grads import GradsReport, watch_grads
from autograd_viz.grads.report import CUT, FROZEN, NOT_ON_GRAPH, PRUNED, ZEROS
from autograd_viz.launch.script import run_script

PROGRAM = """
import sys
import numpy as np
import pytest
import engine
import engine.functional as F

engine.manual_seed(0)
x = engine.randn(5, 3)
w1 = engine.randn(4, 3).requires_grad_()
w1.name = "mlp.hidden.weight"
w2 = engine.randn(1, 4).requires_grad_()
w2.name = "mlp.out.weight"
aux = engine.randn(1, 4).requires_grad_()
aux.name = "aux.weight"
cutw = engine.randn(4, 3).requires_grad_()
cutw.name = "cut.weight"
dead = engine.randn(4, 3).requires_grad_()
dead.name = "dead.weight"
frozen = engine.randn(4, 3)
frozen.name = "frozen.weight"
spare = engine.randn(2, 2, requires_grad=True)
params = [w1, w2, aux, cutw, dead, spare]
for step in range(2):
    h = F.relu(F.linear(x, w1))
    c = F.linear(x, cutw).detach()  # <- cut
    d = F.relu(F.linear(x, dead) - 1000.0)  # <- zeros
    a = F.linear(h, aux)
    loss = F.linear(h + c + d, w2).pow(2).mean()
    for p in params:
        p.grad = None
    loss.backward()
    with engine.no_grad():
        for p in params:
            if p.grad is not None:
                p.sub_(0.1 * p.grad)
if sys.argv[1:2] and sys.argv[1] != "-":
    np.savez(sys.argv[1], *[p.grad.data if p.grad is not None else np.zeros(0) for p in params])
"""


def watched(path: Path, *args: str) -> GradsReport:
    with watch_grads() as watch:
        assert run_script(str(path), list(args) or ["-"]) == 0
    return watch.report


def test_every_reason_our_engine_can_tell(tmp_path: Path) -> None:
    path = write(tmp_path, "engine_all", PROGRAM)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anomaly mode's "this will be slow"
        anomaly = engine.detect_anomaly()
    with anomaly:  # the forward stack gives the line where zeros began
        report = watched(path)
    found = {r.finding.parameter: r.finding for r in report.findings()}
    assert found["frozen.weight"].reason == FROZEN
    assert found["cut.weight"].reason == CUT
    assert found["cut.weight"].why == "cut by .detach() on the way to the loss"
    assert found["cut.weight"].where is not None
    assert found["cut.weight"].where.line == marked_line(path, "cut")
    assert found["dead.weight"].reason == ZEROS
    assert "became all zeros at ReluBackward0" in found["dead.weight"].why
    assert found["dead.weight"].where is not None
    assert found["dead.weight"].where.line == marked_line(path, "zeros")
    assert found["aux.weight"].reason == NOT_ON_GRAPH
    assert found["spare"].reason == NOT_ON_GRAPH  # named by the variable that holds it
    assert set(found) == {"frozen.weight", "cut.weight", "dead.weight", "aux.weight", "spare"}
    assert all(r.calls == 2 for r in report.findings())
    assert report.found
    modules = {row.module: row for row in report.last.flow}
    assert set(modules) == {"mlp.hidden", "mlp.out", "dead"}
    assert modules["dead"].flag == "vanishing" and modules["dead"].grad_norm == 0


def test_inputs_prunes_on_our_engine(tmp_path: Path) -> None:
    with watch_grads() as watch:
        a = engine.ones(3, requires_grad=True)
        b = engine.ones(3, requires_grad=True)
        a.name, b.name = "a", "b"
        (a * b).sum().backward(inputs=[a])
    found = {r.finding.parameter: r.finding.reason for r in watch.report.findings()}
    assert found == {"b": PRUNED}
    assert not watch.found


def test_watching_never_changes_our_engines_gradients(tmp_path: Path) -> None:
    path = write(tmp_path, "engine_all", PROGRAM)
    plain, seen = tmp_path / "plain.npz", tmp_path / "watched.npz"
    assert run_script(str(path), [str(plain)]) == 0
    watched(path, str(seen))
    with np.load(plain) as a, np.load(seen) as b:
        assert a.files == b.files
        for name in a.files:
            assert a[name].tobytes() == b[name].tobytes(), name
    assert engine.Tensor.detach.__module__ == "engine.tensor"  # put back after the watch


def test_the_command_on_our_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grads", str(write(tmp_path, "engine_all", PROGRAM)), "-"]) == 1
    out = capsys.readouterr().out
    assert "cut.weight (4, 3)" in out and "cut by .detach()" in out
    assert "gradient flow, backward call 1" in out


def test_a_trace_of_our_engine_holds_the_findings_and_dot_draws_the_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autograd_viz import to_dot
    from autograd_viz.grads.recorded import call_grads
    from autograd_viz.trace import Trace

    path = write(tmp_path, "engine_all", PROGRAM)
    trace_path = tmp_path / "engine_all.jsonl"
    assert main(["grads", "-o", str(trace_path), str(path), "-"]) == 1
    capsys.readouterr()
    trace = Trace.load(trace_path)
    last = [info for info in trace.graph_tasks.values() if info.parent is None][-1]
    found = call_grads(trace, last.id)
    assert found is not None
    reasons = {f.parameter: f.reason for f in found.findings}
    assert reasons["cut.weight"] == CUT and reasons["dead.weight"] == ZEROS
    source = to_dot(trace, expand="all").source
    assert f"cut at {path.name}:{marked_line(path, 'cut')}" in source
    assert source.count('class="leaf no-gradient"') >= 2  # dead.weight's leaf, cut.weight's box
