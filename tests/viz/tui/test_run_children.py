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


SPAWNS = """\
import multiprocessing as mp
import engine


def child(steps):
    w = engine.tensor([1.0, 2.0], requires_grad=True)
    for step in range(steps):
        (w * float(step + 1)).sum().backward()


if __name__ == "__main__":
    process = mp.get_context("spawn").Process(target=child, args=(3,))
    process.start()
    process.join()
    print(f"child ended with {process.exitcode}", flush=True)
"""


@pytest.mark.parametrize("output", [True, False])
def test_a_spawned_child_is_recorded_as_record_records_it(tmp_path: Path, output: bool) -> None:
    from autograd_viz.trace import Trace

    script = tmp_path / "spawns.py"
    script.write_text(SPAWNS)
    trace = tmp_path / "t.jsonl"
    terminal = Terminal(["run", *(["-o", str(trace)] if output else []), str(script)])
    try:
        terminal.wait_for("program finished", timeout=120)
        terminal.press("q")
        status = terminal.wait(30)
    finally:
        terminal.close()
    assert status == 0
    tail = " ".join(terminal.output.rsplit("\x1b[?1049l", 1)[-1].split())
    assert "child ended with 0" in tail
    if not output:
        assert "1 child process made 3 graph tasks of backward work, not shown" in tail
        assert "add -o TRACE to keep each one's trace" in tail
        return
    kept = [p for p in tmp_path.glob("t.pid*.jsonl")]
    assert len(kept) == 1, sorted(p.name for p in tmp_path.iterdir())
    calls = [info.call for info in Trace.load(kept[0]).graph_tasks.values()]
    assert calls == [0, 1, 2]
    assert f"recorded 3 graph tasks to {kept[0]}" in tail


TORCHRUN_SCRIPT = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.Linear(4, 2)
for _ in range(3):
    model(torch.ones(2, 4)).sum().backward()
print(f"rank {dist.get_rank()} done", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_torchruns_workers_each_write_their_own_trace(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import shutil
    import sys

    from autograd_viz.trace import Trace

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun is not installed beside this Python")
    script = tmp_path / "ranks.py"
    script.write_text(TORCHRUN_SCRIPT)
    trace = tmp_path / "t.jsonl"
    command = ["run", "-o", str(trace), torchrun, "--nproc_per_node", "2", str(script)]
    terminal = Terminal(command)
    try:
        terminal.wait_for("program finished", timeout=240)
        terminal.press("q")
        status = terminal.wait(60)
    finally:
        terminal.close()
    assert status == 0
    tail = " ".join(terminal.output.rsplit("\x1b[?1049l", 1)[-1].split())
    assert not trace.exists(), "the launcher made no call: no empty file of its own"
    for rank in (0, 1):
        ranked = tmp_path / f"t.rank{rank}.jsonl"
        calls = [info.call for info in Trace.load(ranked).graph_tasks.values()]
        assert calls == [0, 1, 2]
        assert f"rank {rank} of 2 recorded 3 graph tasks to {ranked}" in tail
    assert "step them side by side with 'autograd-viz replay" in tail
