"""A command stopped by a signal keeps every backward call that finished, whatever the command.

``record`` and ``nan`` save what they recorded when SIGINT, SIGTERM or SIGHUP
stops them (``tests/viz/test_cli_training.py``, ``test_saving_defects.py``);
here the others: ``grads`` reports on the calls that finished, and ``run
--print`` with ``-o`` writes them, then each ends as the script would have.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """\
import os, time, torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
x = torch.randn(3, 4)
for _ in range(3):
    model(x).sum().backward()
open(os.environ["READY"], "w").close()
time.sleep(120)
"""


def _stopped(tmp_path: Path, signum: int, *command: str) -> subprocess.CompletedProcess[str]:
    """Run ``autograd-viz COMMAND script.py``; once its three calls are done, send ``signum``."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    ready = tmp_path / "ready"
    env = {**os.environ, "READY": str(ready), "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "autograd_viz", *command, str(script)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not ready.exists():
            assert process.poll() is None, process.communicate()
            time.sleep(0.1)
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _ended_by(signum: int) -> int:
    return 130 if signum == signal.SIGINT else -signum  # SIGINT: Python's own 130


SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


@pytest.mark.parametrize("signum", SIGNALS)
def test_grads_stopped_by_a_signal_reports_the_calls_that_finished(
    tmp_path: Path, signum: int
) -> None:
    done = _stopped(tmp_path, signum, "grads")
    assert done.returncode == _ended_by(signum), done.stderr
    assert "every trainable parameter got a gradient in 3 backward calls" in done.stdout
    assert "gradient flow, backward call 2" in done.stdout


def test_a_child_that_outlives_its_watching_command_ends_without_a_word(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A spawned rank is stopped only once its parent, stopped by a signal, has died (PyTorch
    sets the parent's death signal): its trace is saved where the parent said the calls it
    wrote are, and its report, which nobody is left to read, is not an error."""
    from autograd_viz.launch.processes import ChildSettings, process_info, report_child

    gone = tmp_path / "job"  # the parent removed its job's directory as it ended
    settings = ChildSettings(command="record", job=str(gone), output=None, max_values=16)
    report_child(settings, process_info(None), str(tmp_path / "t.jsonl"), 3, 40)
    assert not gone.exists()
    assert capsys.readouterr() == ("", "")
    gone.mkdir()  # while the parent runs, the report is left for it
    report_child(settings, process_info(None), str(tmp_path / "t.jsonl"), 3, 40)
    assert [p.name for p in gone.iterdir()] == [f"{os.getpid()}.json"]


@pytest.mark.parametrize("signum", SIGNALS)
@pytest.mark.parametrize("last", [None, 2])
def test_run_print_stopped_by_a_signal_writes_the_calls_that_finished(
    tmp_path: Path, signum: int, last: int | None
) -> None:
    from autograd_viz.trace import Trace

    options = ["--last", str(last)] if last is not None else []
    done = _stopped(tmp_path, signum, "run", "--print", *options, "-o", "t.jsonl")
    assert done.returncode == _ended_by(signum), done.stderr
    assert done.stdout.count("── backward call") == 3
    calls = [info.call for info in Trace.load(tmp_path / "t.jsonl").graph_tasks.values()]
    assert calls == ([0, 1, 2] if last is None else [1, 2])
    assert "saved to t.jsonl" in done.stderr
