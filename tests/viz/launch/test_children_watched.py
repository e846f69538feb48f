"""Children a watched script starts in ways the environment alone does not follow: ``os.fork``
then ``os._exit`` (Note [Every fork]), and a ``PYTHONPATH`` the script replaced (Note [A child's
PYTHONPATH replaced], both in ``autograd_viz/launch/processes.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograd_viz.trace import Trace

REPO = Path(__file__).resolve().parents[3]

FORK_THEN_EXIT = """
    import os

    import engine

    w = engine.tensor([1.0, 2.0], requires_grad=True)
    (w * 2.0).sum().backward()
    pid = os.fork()
    if pid == 0:
        for i in range(3):
            (w * float(i)).sum().backward()
        os._exit(3)
    _, status = os.waitpid(pid, 0)
    print("child exited with", os.waitstatus_to_exitcode(status))
"""

CHILD = """
    import engine

    w = engine.tensor([1.0, 2.0], requires_grad=True)
    for i in range(2):
        (w * float(i)).sum().backward()
"""

REPLACES_PYTHONPATH = """
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    child = os.path.join(here, "child.py")
    own = os.path.join(here, "lib") + os.pathsep + os.environ["REPO"]
    os.environ["PYTHONPATH"] = own  # replaced, not added to
    subprocess.run([sys.executable, child], check=True)
    subprocess.run([sys.executable, child], check=True, env={**os.environ, "PYTHONPATH": own})
"""

CLEAN_ENVIRONMENT = """
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ["REPO"]}
    subprocess.run([sys.executable, os.path.join(here, "child.py")], check=True, env=env)
"""


def _run(
    tmp_path: Path, command: str, body: str, *options: str
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "main.py"
    script.write_text(textwrap.dedent(body), encoding="utf-8")
    (tmp_path / "child.py").write_text(textwrap.dedent(CHILD), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "REPO": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "autograd_viz", command, *options, str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _child_traces(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("t.pid*.jsonl"))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX")
@pytest.mark.parametrize("command", ["record", "nan"])
def test_a_fork_child_that_leaves_by_os_exit_keeps_its_calls(tmp_path: Path, command: str) -> None:
    done = _run(tmp_path, command, FORK_THEN_EXIT, "-o", "t.jsonl")
    assert done.returncode == 0, done.stderr
    assert "child exited with 3" in done.stdout
    (child,) = _child_traces(tmp_path)
    trace = Trace.load(child)
    assert len(trace.graph_tasks) == 3
    if command == "record":
        assert "1 child process recorded" in done.stdout
        assert child.name in done.stdout
    else:
        assert "no NaN or Inf found in 4 backward calls of 2 processes" in done.stdout
    assert len(Trace.load(tmp_path / "t.jsonl").graph_tasks) == 1, "the parent keeps its own"


def test_children_of_a_script_that_replaced_pythonpath_are_recorded(tmp_path: Path) -> None:
    done = _run(tmp_path, "record", REPLACES_PYTHONPATH, "-o", "t.jsonl")
    assert done.returncode == 0, done.stderr
    children = _child_traces(tmp_path)
    assert len(children) == 2, done.stdout + done.stderr
    for child in children:
        assert len(Trace.load(child).graph_tasks) == 2
    assert "2 child processes recorded" in done.stdout
    assert "not watched" not in done.stderr


def test_a_child_started_with_a_clean_environment_is_named_in_one_line(tmp_path: Path) -> None:
    done = _run(tmp_path, "record", CLEAN_ENVIRONMENT, "-o", "t.jsonl")
    assert done.returncode == 0, done.stderr
    assert _child_traces(tmp_path) == []
    said = [line for line in done.stderr.splitlines() if "not watched" in line]
    assert said == [
        f"autograd-viz: a child process ({sys.executable} {tmp_path / 'child.py'}) was started "
        "without AUTOGRAD_VIZ_CHILDREN in its environment: it is not watched"
    ]


FORK_ONLY = """
    import os

    import engine

    pid = os.fork()
    if pid == 0:
        w = engine.tensor([1.0, 2.0], requires_grad=True)
        (w * 2.0).sum().backward()
        os._exit(0)
    os.waitpid(pid, 0)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX")
@pytest.mark.parametrize("command", ["record", "nan"])
def test_an_output_link_stays_when_only_children_recorded(tmp_path: Path, command: str) -> None:
    target = tmp_path / "real.jsonl"
    target.write_text("", encoding="utf-8")
    (tmp_path / "t.jsonl").symlink_to(target)
    done = _run(tmp_path, command, FORK_ONLY, "-o", "t.jsonl")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "t.jsonl").is_symlink() and target.exists()
    (child,) = _child_traces(tmp_path)
    assert len(Trace.load(child).graph_tasks) == 1
