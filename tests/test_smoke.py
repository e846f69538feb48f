"""End to end in a second: the command line builds a graph, runs backward, shows the events."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _command() -> list[str]:
    """``autograd-viz`` from this interpreter's environment, else ``python -m autograd_viz``."""
    script = Path(sys.executable).parent / "autograd-viz"
    if script.exists():
        return [str(script)]
    found = shutil.which("autograd-viz")
    return [found] if found else [sys.executable, "-m", "autograd_viz"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONIOENCODING": "utf-8"}
    env.pop("FORCE_COLOR", None)
    return subprocess.run(
        list(args),
        check=False,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=60,
    )


@pytest.fixture(scope="module")
def demo() -> subprocess.CompletedProcess[str]:
    return _run(sys.executable, "-m", "autograd_viz", "demo", "--print")


def test_demo_exits_cleanly(demo: subprocess.CompletedProcess[str]) -> None:
    assert demo.returncode == 0, demo.stderr
    assert "Traceback" not in demo.stdout + demo.stderr


def test_demo_shows_the_graph(demo: subprocess.CompletedProcess[str]) -> None:
    for name in (
        "SumBackward0",
        "TanhBackward0",
        "AddBackward0",
        "MmBackward0",
        "PermuteBackward0",
        "AccumulateGrad(W_h)",
        "AccumulateGrad(prev_h)",
    ):
        assert name in demo.stdout, name


def test_demo_shows_every_kind_of_step(demo: subprocess.CompletedProcess[str]) -> None:
    for kind in (
        "graph_task_start",
        "enqueue",
        "node_start",
        "node_end",
        "dependency_decrement",
        "accumulate",
        "release_variables",
        "graph_task_end",
    ):
        assert kind in demo.stdout, kind
    assert "W_h.grad created" in demo.stdout


def test_demo_shows_leaf_gradients(demo: subprocess.CompletedProcess[str]) -> None:
    assert "(20, 20)" in demo.stdout
    assert "(1, 10)" in demo.stdout


def test_unknown_command_is_one_line_and_fails() -> None:
    result = _run(*_command(), "no-such-command")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "no-such-command" in lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_python_m_matches_the_command() -> None:
    result = _run(sys.executable, "-m", "autograd_viz", "--help")
    assert result.returncode == 0
    assert "demo" in result.stdout


def test_a_script_records_and_draws_end_to_end(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "two_devices.py"
    trace = tmp_path / "run.jsonl"
    drawing = tmp_path / "graph.dot"
    recorded = _run(*_command(), "record", str(example), "-o", str(trace))
    assert recorded.returncode == 0, recorded.stderr
    drawn = _run(*_command(), "dot", str(trace), "-o", str(drawing), "--step", "20")
    assert drawn.returncode == 0, drawn.stderr
    source = drawing.read_text(encoding="utf-8")
    assert "step 20 of" in source and "sim:0" in source and "sim:1" in source


def test_the_recorded_trace_opens_in_the_tui_headless(tmp_path: Path) -> None:
    import asyncio

    from autograd_viz.trace import Trace
    from autograd_viz.tui import ReplayDriver, VizApp

    example = Path(__file__).resolve().parents[1] / "examples" / "two_devices.py"
    trace_path = tmp_path / "run.jsonl"
    assert _run(*_command(), "record", str(example), "-o", str(trace_path)).returncode == 0
    trace = Trace.load(trace_path)
    app = VizApp(ReplayDriver(trace), source=str(trace_path))

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("e", "q")

    asyncio.run(main())
    assert app.driver.position == len(trace.events)
    assert app.return_value == 0
