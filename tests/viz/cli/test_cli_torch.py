"""Every command that takes a script works on an unmodified PyTorch script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograd_viz import cli
from autograd_viz.trace import Trace

torch = pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "torch_checkpoint.py"


def test_record_dot_animate_and_timeline_on_a_pytorch_script(tmp_path: Path) -> None:
    trace_path = tmp_path / "t.jsonl"
    assert cli.main(["record", "-o", str(trace_path), str(EXAMPLE)]) == 0
    trace = Trace.load(trace_path)
    assert trace.header["sources"] == [f"torch {torch.__version__}"]
    # The reentrant checkpoint is a nested graph task of its own.
    assert sorted(t.reentrant_depth for t in trace.graph_tasks.values()) == [0, 1]

    svg = tmp_path / "g.svg"
    assert cli.main(["dot", str(EXAMPLE), "-o", str(svg)]) == 0
    assert svg.read_text(encoding="utf-8").count('class="node') >= 10

    page = tmp_path / "run.html"
    assert cli.main(["animate", str(trace_path), "-o", str(page), "--max-frames", "5"]) == 0
    assert "CheckpointFunctionBackward" in page.read_text(encoding="utf-8")

    timeline = tmp_path / "t.json"
    assert cli.main(["timeline", str(trace_path), "-o", str(timeline)]) == 0
    events = json.loads(timeline.read_text(encoding="utf-8"))["traceEvents"]
    names = {e["name"] for e in events if e.get("ph") == "X"}
    assert "CheckpointFunctionBackward" in names
