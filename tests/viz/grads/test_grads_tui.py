"""The TUI on a trace recorded with ``grads -o``: the inspector on a leaf says why it got no
gradient, the root's lists the parameters off the graph, and the call picker shows each
call's gradient norm per module (Note [Gradient findings in a trace])."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from grads_programs import marked_line, write
from textual.pilot import Pilot

from autograd_viz.cli.main import main
from autograd_viz.trace import Trace
from tests.viz.tui.tuiting import find_in_tree, inspector, replay_app, run_app

pytestmark = pytest.mark.oracle

SIZE = (120, 40)


@pytest.fixture
def recorded(torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Trace]:
    script = write(tmp_path, "all")
    path = tmp_path / "all.jsonl"
    assert main(["grads", "-o", str(path), str(script), "-"]) == 1
    capsys.readouterr()
    return script, Trace.load(path)


def test_the_inspector_says_why_a_leaf_got_no_gradient(recorded: tuple[Path, Trace]) -> None:
    script, trace = recorded
    app = replay_app(trace)
    seen: dict[str, str] = {}

    async def actions(pilot: Pilot[Any]) -> None:
        for query in ("dead.weight", "head.weight", "MeanBackward0"):
            assert await find_in_tree(pilot, query) is not None
            seen[query] = inspector(app)

    run_app(app, actions, size=SIZE)
    dead = seen["dead.weight"]
    assert "leaf dead.weight" in dead
    assert "✗ gradient all zeros" in dead and "ReluBackward0" in dead
    assert f"{script.name}:{marked_line(script, 'zeros')}" in dead
    assert "no gradient" not in seen["head.weight"] and "all zeros" not in seen["head.weight"]
    root = seen["MeanBackward0"]
    assert "no gradient, off this graph" in root
    assert "cutter.weight: ✗ no gradient: cut" in root
    assert f"{script.name}:{marked_line(script, 'cut')}" in root
    assert "teacher.weight: ✗ no gradient: used without grad" in root


def test_a_trace_without_findings_says_nothing_of_them(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plain.jsonl"
    assert main(["record", "-o", str(path), str(write(tmp_path, "all")), "-"]) == 0
    capsys.readouterr()
    app = replay_app(Trace.load(path))
    seen: list[str] = []

    async def actions(pilot: Pilot[Any]) -> None:
        for query in ("dead.weight", "MeanBackward0"):
            assert await find_in_tree(pilot, query) is not None
            seen.append(inspector(app))

    run_app(app, actions, size=SIZE)
    assert not any("no gradient" in text or "all zeros" in text for text in seen)
