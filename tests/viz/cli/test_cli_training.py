"""``record`` and ``nan`` on training runs: ``--steps``, ``--every``, ``--last``, and stopping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autograd_viz import cli
from autograd_viz.trace import Trace
from tests.processes import sigint_as_at_a_terminal

REPO = Path(__file__).resolve().parents[3]

LOOP = """
    import os
    import sys

    import engine

    w = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10**9
    for step in range(steps):
        (w * float(step)).sum().backward()
        with open(os.environ["PROGRESS"], "w") as f:
            f.write(str(step))
"""

NAN_AT_6 = """
    import engine

    w = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for step in range(20):
        x = engine.tensor([1.0, 2.0, 6.0 - step])
        (w * x).sqrt().sum().backward()
"""


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def _calls(trace: Trace) -> list[int | None]:
    return [info.call for info in trace.graph_tasks.values() if info.parent is None]


@pytest.mark.parametrize(
    ("options", "calls", "row"),
    [
        (["--steps", "2-3,7"], [2, 3, 7], "3 of 9 backward calls (calls 2-3,7)"),
        (["--every", "4"], [0, 4, 8], "3 of 9 backward calls (every 4th call)"),
        (["--last", "2"], [7, 8], "2 of 9 backward calls (every call, the last 2 kept)"),
        ([], list(range(9)), "9 of 9 backward calls"),
    ],
)
def test_record_chooses_calls(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    options: list[str],
    calls: list[int],
    row: str,
) -> None:
    monkeypatch.setenv("PROGRESS", str(tmp_path / "progress"))
    out = tmp_path / "t.jsonl"
    status = cli.main(["record", "-o", str(out), *options, str(_script(tmp_path, LOOP)), "9"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert _calls(Trace.load(out)) == calls
    assert f"  calls        {row}" in captured.out.splitlines()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--steps", "5-2"], "--steps: the range '5-2' ends before it starts"),
        (["--steps", "x"], "--steps: 'x' is not a call index"),
        (["--every", "0"], "--every: expected a positive integer, got '0'"),
        (["--last", "many"], "--last: expected a positive integer, got 'many'"),
    ],
)
@pytest.mark.parametrize("command", ["record", "nan"])
def test_a_bad_choice_of_calls_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    options: list[str],
    message: str,
) -> None:
    script = _script(tmp_path, LOOP)
    assert cli.main([command, *options, str(script)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and message in err[0], err


def test_nan_last_3_holds_the_birth_call_and_the_two_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "nan.jsonl"
    status = cli.main(["nan", "--last", "3", "-o", str(out), str(_script(tmp_path, NAN_AT_6))])
    captured = capsys.readouterr()
    assert status == 1, captured.err
    assert "born in the backward pass at SqrtBackward0" in captured.out
    trace = Trace.load(out)
    assert _calls(trace) == [4, 5, 6]
    births = [e for e in trace.events if e.kind == "anomaly"]
    assert births and all(trace.graph_tasks[e.graph_task].call == 6 for e in births)


def test_nan_every_reports_from_the_calls_it_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "nan.jsonl"
    script = _script(tmp_path, NAN_AT_6)
    assert cli.main(["nan", "--steps", "6", "-o", str(out), str(script)]) == 1
    assert "SqrtBackward0" in capsys.readouterr().out
    assert _calls(Trace.load(out)) == [6]


# -- stopping: in a process of its own -------------------------------------------------------


def _start(tmp_path: Path, options: list[str], body: str = LOOP) -> subprocess.Popen[str]:
    script = _script(tmp_path, body)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PROGRESS": str(tmp_path / "progress")}
    return subprocess.Popen(
        [sys.executable, "-m", "autograd_viz", "record", *options, str(script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_as_at_a_terminal,  # noqa: PLW1509
    )


def _wait_for_steps(tmp_path: Path, process: subprocess.Popen[str], steps: int) -> None:
    progress = tmp_path / "progress"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            if int(progress.read_text() or -1) >= steps:
                return
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.05)
    process.kill()
    raise AssertionError("the script made no progress")


def _consecutive_from_zero(calls: list[int | None]) -> bool:
    return calls == list(range(len(calls)))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
@pytest.mark.parametrize("last", [None, 3])
def test_a_signal_saves_the_trace_and_ends_as_the_script_would(
    tmp_path: Path, signum: int, last: int | None
) -> None:
    out = tmp_path / "t.jsonl"
    options = ["-o", str(out)] + ([] if last is None else ["--last", str(last)])
    process = _start(tmp_path, options)
    _wait_for_steps(tmp_path, process, 20)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    expected = 130 if signum == signal.SIGINT else -signum  # SIGINT: Python's own 130
    assert process.returncode == expected, stderr
    assert stdout.startswith("Partial trace of"), stdout
    assert f"autograd-viz: partial trace saved to {out}" in stderr.splitlines()
    calls = _calls(Trace.load(out))
    if last is None:
        assert len(calls) >= 20 and _consecutive_from_zero(calls)
    else:
        assert len(calls) == 3 and calls[0] >= 18 and calls == list(range(calls[0], calls[0] + 3))


def test_a_handler_of_the_scripts_own_is_left_to_run(tmp_path: Path) -> None:
    body = textwrap.dedent(LOOP).replace(
        "import engine\n",
        "import engine\nimport signal\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))  # checkpoint and leave\n",
    )
    out = tmp_path / "t.jsonl"
    process = _start(tmp_path, ["-o", str(out)], body)
    _wait_for_steps(tmp_path, process, 5)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 7, stderr
    assert stdout.startswith("Recorded"), stdout
    assert len(_calls(Trace.load(out))) >= 5


def test_after_kill_9_the_streamed_file_loads_with_every_finished_call(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    process = _start(tmp_path, ["-o", str(out)])
    _wait_for_steps(tmp_path, process, 30)
    process.kill()
    process.communicate(timeout=60)
    trace = Trace.load(out)
    calls = _calls(trace)
    assert len(calls) >= 30 and _consecutive_from_zero(calls)
    ended = {e.graph_task for e in trace.events if e.kind == "graph_task_end"}
    assert ended == set(trace.graph_tasks), "every call in the file is whole"


@pytest.mark.parametrize("last", [None, 4])
def test_os_exit_loses_at_most_the_call_in_flight(tmp_path: Path, last: int | None) -> None:
    body = textwrap.dedent(LOOP) + "\nos._exit(3)\n"
    out = tmp_path / "t.jsonl"
    options = ["-o", str(out)] + ([] if last is None else ["--last", str(last)])
    process = _start(tmp_path, [*options], body.replace("10**9", "12"))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 3, stderr
    assert _calls(Trace.load(out)) == (list(range(12)) if last is None else [8, 9, 10, 11])
    assert "os._exit(3)" in stderr
