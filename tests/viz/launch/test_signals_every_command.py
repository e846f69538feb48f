"""A command stopped by a signal keeps every backward call that finished, whatever the command.

``record`` and ``nan`` save what they recorded when SIGINT, SIGTERM or SIGHUP
stops them (``tests/viz/cli/test_cli_training.py``, ``test_saving_defects.py``);
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

from tests.processes import sigint_as_at_a_terminal

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]

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
        preexec_fn=sigint_as_at_a_terminal,  # noqa: PLW1509
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


SPAWN_JOB = """\
import os, sys, time
import torch
import torch.multiprocessing as mp


def work(rank, ready, sleep):
    model = torch.nn.Linear(4, 2)
    for _ in range(3):
        model(torch.randn(3, 4)).sum().backward()
    with open(os.path.join(ready, f"{os.getpid()}.ready"), "w") as f:
        f.write(str(rank))
    time.sleep(sleep)


if __name__ == "__main__":
    mp.spawn(work, args=(sys.argv[1], float(sys.argv[2])), nprocs=2)
"""


@pytest.mark.slow
@pytest.mark.parametrize("last", [None, 2])
@pytest.mark.parametrize("whom", ["group", "parent"])
def test_a_spawn_job_stopped_by_sigterm_keeps_every_call_of_every_process(
    tmp_path: Path, whom: str, last: int | None
) -> None:
    """Note [Children that outlive the script]: SIGTERM to the job's process group (a
    scheduler's) reaches the ranks, which save while the parent ends; SIGTERM to the parent
    alone leaves them running, orphaned, as unwatched, and they save as they end. Either way
    each keeps its calls, and the parent, which ran none, leaves no empty file beside theirs."""
    from autograd_viz.launch.processes import CHILDREN_WAIT_S
    from autograd_viz.trace import Trace

    script = tmp_path / "job.py"
    script.write_text(SPAWN_JOB)
    ready = tmp_path / "ready"
    ready.mkdir()
    options = ["--last", str(last)] if last is not None else []
    # A rank stopped by the signal, or one that ends on its own after the parent has waited
    # for it (CHILDREN_WAIT_S) and said it still runs.
    sleep = "120" if whom == "group" else str(CHILDREN_WAIT_S + 3)
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "autograd_viz", "record", *options, "-o", "T.jsonl"),
            *(str(script), str(ready), sleep),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_as_at_a_terminal,  # noqa: PLW1509
    )
    ranks: list[int] = []
    try:
        while len(ranks) < 2:
            assert process.poll() is None, process.communicate()
            ranks = [int(p.stem) for p in ready.glob("*.ready")]
            time.sleep(0.1)
        if whom == "group":
            os.killpg(process.pid, signal.SIGTERM)
        else:
            process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == -signal.SIGTERM, stderr
    assert not (tmp_path / "T.jsonl").exists(), "the parent ran no backward: no file of its own"
    assert "partial trace saved to T.jsonl" not in stderr
    assert "ended before finishing" not in stderr
    if whom == "group":
        assert "2 child processes recorded" in stdout
    else:
        for pid in ranks:
            assert f"process {pid} still runs: it writes its trace to" in stderr
        deadline = time.monotonic() + 60
        while any(_alive(pid) for pid in ranks):  # the orphans end after their sleep
            assert time.monotonic() < deadline
            time.sleep(0.1)
    for pid in ranks:
        trace = Trace.load(tmp_path / f"T.pid{pid}.jsonl")
        assert len(trace.graph_tasks) == (last or 3)
        assert trace.header["process"]["launcher"] == "torch.multiprocessing.spawn"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
