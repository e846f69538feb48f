"""``autograd-viz run`` with a program that starts processes of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.viz.tui.terminal import Terminal

FORKS = """\
import os
import engine

x = engine.tensor([1.0, 2.0], requires_grad=True)
pid = os.fork()
if pid == 0:
    (x * x).sum().backward()
    print("child backward done", flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(f"parent saw its child end with {status}", flush=True)
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_runs_its_backward_unwatched_and_says_so(tmp_path: Path) -> None:
    script = tmp_path / "forks.py"
    script.write_text(FORKS)
    terminal = Terminal(["run", str(script)])
    try:
        # Before, the child waited at a gate no TUI opens, and its parent waited for it.
        terminal.wait_for("program finished", timeout=60)
        terminal.press("q")
        status = terminal.wait(30)
    finally:
        terminal.close()
    assert status == 0
    tail = terminal.output.rsplit("\x1b[?1049l", 1)[-1]
    assert "child backward done" in tail
    assert "parent saw its child end with 0" in tail
    assert "forked from the program, runs its backward calls unwatched" in tail
