"""What a watched child imports before its first line (Note [Children armed by the environment]).

A child that makes no array starts without NumPy and without the engine's
tensors and ops (Note [The engine package loads on first use]); a PyTorch
child loads what the bridge needs, not our engine's ops.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from autograd_viz.launch import processes
from autograd_viz.launch.processes import ChildSettings

REPO = Path(__file__).resolve().parents[3]

HEAVY = ("engine.ops", "engine.factories", "engine.functional", "engine.engine", "engine.gradcheck")
"""Our engine's modules that only a program running our engine needs."""


def watched_child(tmp_path: Path, code: str) -> list[str]:
    """The lines a child of ``record`` prints running ``code``; it saves its trace first."""
    settings = ChildSettings(command="record", job=str(tmp_path), output=str(tmp_path / "t.jsonl"))
    env = {
        **os.environ,
        processes.ENV: settings.to_env(),
        "PYTHONPATH": os.pathsep.join([processes.STARTUP_DIR, str(REPO)]),
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


PROBE = f"""
    import sys
    assert "autograd_viz.cli.children" in sys.modules  # the child is watched
    heavy = {HEAVY!r}
    print("numpy" in sys.modules, sorted(m for m in sys.modules if m.startswith(heavy)))
"""


def test_a_watched_child_that_makes_no_array_starts_without_numpy(tmp_path: Path) -> None:
    assert watched_child(tmp_path, PROBE) == ["False []"]


def test_a_watched_child_running_our_engine_loads_it_and_is_recorded(tmp_path: Path) -> None:
    lines = watched_child(
        tmp_path,
        PROBE
        + """
    import engine
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    (x * 3.0).sum().backward()
    print([float(g) for g in x.grad.numpy()])
    """,
    )
    assert lines == ["False []", "[3.0, 3.0]"]
    from autograd_viz.trace import Trace

    (saved,) = tmp_path.glob("t.pid*.jsonl")
    assert len(Trace.load(saved).graph_tasks) == 1


def test_a_watched_pytorch_child_loads_none_of_our_engines_ops(tmp_path: Path, torch: Any) -> None:
    lines = watched_child(
        tmp_path,
        f"""
        import sys
        import torch
        x = torch.ones(3, requires_grad=True)
        (x * 2).sum().backward()
        heavy = {HEAVY!r}
        print(sorted(m for m in sys.modules if m.startswith(heavy)), x.grad.tolist())
        """,
    )
    assert lines == ["[] [2.0, 2.0, 2.0]"]
    from autograd_viz.trace import Trace

    (saved,) = tmp_path.glob("t.pid*.jsonl")
    (task,) = Trace.load(saved).graph_tasks.values()
    assert "MulBackward0" in {node.name for node in task.nodes.values()}
