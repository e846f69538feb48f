"""Where ``record`` and ``nan`` put a trace, and what they keep when stopped.

``-o`` writes through a link or a device node and never replaces it; two runs
with the same ``-o`` never both say "saved" over one file that does not load;
a flight recorder (``--last``) keeps the calls up to the first NaN or Inf, and
what it holds when stopped by a signal or when a thread is still inside a
backward call at exit (Note [Writing an output file] in
``autograd_viz/trace/writing.py``).
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import engine
from autograd_viz import cli
from autograd_viz.trace import Trace
from autograd_viz.trace.calls import CallSelection
from autograd_viz.trace.recording import Recording
from autograd_viz.trace.writing import OutputBusyError, open_output
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

NAN_AT_5 = """
    import engine

    w = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for step in range(10):
        x = engine.tensor([1.0, 2.0, 4.5 - step])  # call 5 takes the root of -0.5
        (w * x).sqrt().sum().backward()
"""


def _script(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def _calls(trace: Trace) -> list[int | None]:
    return [info.call for info in trace.graph_tasks.values() if info.parent is None]


# -- -o through a link or a device node ------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "options"),
    [("record", []), ("record", ["--last", "3"]), ("nan", []), ("nan", ["--last", "3"])],
)
def test_output_through_a_symlink_writes_its_target_and_keeps_the_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, options: list[str]
) -> None:
    target = tmp_path / "kept" / "real.jsonl"
    target.parent.mkdir()
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    script = _script(tmp_path, NAN_AT_5)
    status = cli.main([command, *options, "-o", str(link), str(script)])
    captured = capsys.readouterr()
    assert status == (0 if command == "record" else 1), captured.err
    assert link.is_symlink() and os.readlink(link) == str(target)
    trace = Trace.load(target)
    assert _calls(trace) == ([3, 4, 5] if options else list(range(10)))


def _character_device(tmp_path: Path) -> Path:
    """A node of the kernel's null device, made in ``tmp_path`` (root only)."""
    node = tmp_path / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, AttributeError, OSError):
        pytest.skip("making a device node needs root")
    return node


@pytest.mark.parametrize(
    ("command", "options"),
    [("record", []), ("record", ["--last", "3"]), ("nan", []), ("nan", ["--last", "3"])],
)
def test_output_into_a_device_node_leaves_the_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, options: list[str]
) -> None:
    node = _character_device(tmp_path)
    status = cli.main([command, *options, "-o", str(node), str(_script(tmp_path, NAN_AT_5))])
    captured = capsys.readouterr()
    assert status == (0 if command == "record" else 1), captured.err
    assert stat.S_ISCHR(os.stat(node).st_mode), "the device node is still a device node"


def test_output_into_a_fifo_is_written_through_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as f:
            received.append(f.read())

    reader = threading.Thread(target=read)
    reader.start()
    script = _script(tmp_path, NAN_AT_5)
    status = cli.main(["record", "--last", "3", "-o", str(fifo), str(script)])
    reader.join(timeout=60)
    assert status == 0, capsys.readouterr().err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(received[0])
    assert _calls(Trace.load(copy)) == [3, 4, 5]


def test_trace_save_writes_through_a_symlink(tmp_path: Path) -> None:
    w = engine.tensor([1.0, 2.0], requires_grad=True)
    import autograd_viz

    with autograd_viz.record() as trace:
        (w * 2.0).sum().backward()
    target = tmp_path / "real.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    trace.save(link)
    assert link.is_symlink() and len(Trace.load(target).graph_tasks) == 1


# -- two runs, one -o -----------------------------------------------------------------------


def _start(
    tmp_path: Path, command: str, options: list[str], body: str = LOOP, progress: str = "progress"
) -> subprocess.Popen[str]:
    script = _script(tmp_path, body, f"{progress}.py")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PROGRESS": str(tmp_path / progress)}
    return subprocess.Popen(
        [sys.executable, "-m", "autograd_viz", command, *options, str(script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_as_at_a_terminal,  # noqa: PLW1509
    )


def _wait_for_steps(
    tmp_path: Path, process: subprocess.Popen[str], steps: int, progress: str = "progress"
) -> None:
    path = tmp_path / progress
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            if int(path.read_text() or -1) >= steps:
                return
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.05)
    process.kill()
    raise AssertionError("the script made no progress")


@pytest.mark.parametrize("second", [[], ["--last", "3"]])
@pytest.mark.parametrize("first", [[], ["--last", "3"]])
def test_a_second_run_writing_the_same_file_says_it_cannot(
    tmp_path: Path, first: list[str], second: list[str]
) -> None:
    out = tmp_path / "t.jsonl"
    running = _start(tmp_path, "record", ["-o", str(out), *first])
    try:
        _wait_for_steps(tmp_path, running, 5)
        later = _start(tmp_path, "record", ["-o", str(out), *second], progress="later")
        stdout, stderr = later.communicate(timeout=60)
        assert later.returncode == 3, (stdout, stderr)
        lines = stderr.splitlines()
        assert lines == [
            f"autograd-viz: error: cannot write trace {out}: another process is writing it "
            "(a run with the same -o)"
        ]
        assert not (tmp_path / "later").exists(), "refused before its script ran"
    finally:
        running.send_signal(signal.SIGTERM)
        running.communicate(timeout=60)
    calls = _calls(Trace.load(out))
    assert len(calls) == (3 if first else len(calls)) and len(calls) >= 3
    assert calls == list(range(calls[0], calls[0] + len(calls)))


def test_a_file_is_free_again_once_its_run_has_ended(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    fd = open_output(out)
    with pytest.raises(OutputBusyError):
        Recording(calls=CallSelection(last=2), output=out)
    os.close(fd)
    recording = Recording(calls=CallSelection(last=2), output=out)
    recording.finish()
    assert Trace.load(out).graph_tasks == {}


# -- record --last stops at the first NaN or Inf, as nan --last does ---------------------------


@pytest.mark.parametrize("command", ["record", "nan"])
def test_last_keeps_the_call_that_made_the_nan_and_the_ones_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    out = tmp_path / "t.jsonl"
    status = cli.main([command, "--last", "3", "-o", str(out), str(_script(tmp_path, NAN_AT_5))])
    captured = capsys.readouterr()
    assert status == (0 if command == "record" else 1), captured.err
    assert _calls(Trace.load(out)) == [3, 4, 5]
    if command == "record":
        assert "stopped at the first NaN or Inf" in captured.out


def test_record_last_with_leaves_values_stops_at_a_leafs_nan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.jsonl"
    script = _script(tmp_path, NAN_AT_5)
    status = cli.main(["record", "--last", "2", "--values", "leaves", "-o", str(out), str(script)])
    assert status == 0, capsys.readouterr().err
    assert _calls(Trace.load(out)) == [4, 5]


# -- nan --last stopped by a signal ----------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_nan_last_stopped_by_a_signal_keeps_the_last_calls(tmp_path: Path, signum: int) -> None:
    out = tmp_path / "n.jsonl"
    process = _start(tmp_path, "nan", ["--last", "3", "-o", str(out)])
    _wait_for_steps(tmp_path, process, 10)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    expected = 130 if signum == signal.SIGINT else -signum
    assert process.returncode == expected, stderr
    assert f"autograd-viz: partial trace saved to {out}" in stderr
    calls = _calls(Trace.load(out))
    assert len(calls) == 3 and calls[0] >= 8
    assert calls == list(range(calls[0], calls[0] + 3))


# -- a thread still inside backward() when the recording ends ----------------------------------


def test_a_call_ending_after_the_flight_recorder_was_written_leaves_its_calls(
    tmp_path: Path,
) -> None:
    out = tmp_path / "t.jsonl"
    recording = Recording(calls=CallSelection(last=2), output=out)
    w = engine.tensor([1.0, 2.0], requires_grad=True)
    inside, leave = threading.Event(), threading.Event()

    def stuck(grad: object) -> None:
        inside.set()
        leave.wait(60)

    def daemon() -> None:
        x = w * 3.0
        x.register_hook(stuck)
        x.sum().backward()

    with recording.running():
        for i in range(4):
            (w * float(i)).sum().backward()
        thread = threading.Thread(target=daemon, daemon=True)
        thread.start()
        assert inside.wait(60)
    kept = _calls(recording.trace)
    assert kept == [3, 4], "the last two calls: the daemon's, cut short, is the last"
    leave.set()  # the daemon's call ends after the recording ended
    thread.join(60)
    assert _calls(recording.trace) == kept, "the calls kept stay"
    assert _calls(Trace.load(out)) == [3, 4]


DAEMON_STUCK = """
    import threading
    import time

    import engine

    w = engine.tensor([1.0, 2.0], requires_grad=True)
    for i in range(5):
        (w * float(i)).sum().backward()
    inside = threading.Event()

    def stuck(grad):
        inside.set()
        time.sleep(1000)

    def work():
        x = w * 3.0
        x.register_hook(stuck)
        x.sum().backward()

    threading.Thread(target=work, daemon=True).start()
    inside.wait()
"""


@pytest.mark.parametrize("command", ["record", "nan"])
def test_a_daemon_thread_inside_backward_at_exit_leaves_the_last_calls(
    tmp_path: Path, command: str
) -> None:
    out = tmp_path / "d.jsonl"
    process = _start(tmp_path, command, ["--last", "2", "-o", str(out)], DAEMON_STUCK)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert _calls(Trace.load(out)) == [4, 5]  # the daemon's call, cut short, the last


# -- ranks and counts a trace cannot hold ------------------------------------------------------

SETS_LOCAL_RANK = """
    import os

    import engine

    os.environ["LOCAL_RANK"] = "-1"  # the usual "not distributed"
    w = engine.tensor([1.0, 2.0], requires_grad=True)
    (w * 2.0).sum().backward()
"""


def _read_by_every_reader(path: Path) -> Trace:
    from autograd_viz.trace.index import calls_in, iter_calls, load_call

    assert [len(part.graph_tasks) for part in iter_calls(path)] == [1]
    assert [span.call for span in calls_in(path)] == [0]
    assert len(load_call(path, 0).graph_tasks) == 1
    return Trace.load(path)


@pytest.mark.parametrize(
    ("environment", "name", "process"),
    [
        ({"RANK": "0", "WORLD_SIZE": "2"}, "t.rank0.jsonl", (0, 2, None)),
        ({"RANK": "-1"}, "t.jsonl", (None, None, None)),
        ({"RANK": "1" * 23, "WORLD_SIZE": "2"}, "t.jsonl", (None, 2, None)),
        ({"RANK": "1", "WORLD_SIZE": "-2"}, "t.rank1.jsonl", (1, None, None)),
    ],
)
def test_ranks_a_trace_cannot_hold_are_kept_as_unknown(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    environment: dict[str, str],
    name: str,
    process: tuple[int | None, ...],
) -> None:
    for variable in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(variable, raising=False)
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    out = tmp_path / "t.jsonl"
    status = cli.main(["record", "-o", str(out), str(_script(tmp_path, SETS_LOCAL_RANK))])
    assert status == 0, capsys.readouterr().err
    header = _read_by_every_reader(tmp_path / name).header["process"]
    assert (header["rank"], header["world_size"], header["local_rank"]) == process
    assert cli.main(["nan", str(tmp_path / name)]) == 0, capsys.readouterr().err


def test_a_max_values_no_trace_can_hold_is_refused_at_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script(tmp_path, SETS_LOCAL_RANK)
    out = tmp_path / "t.jsonl"
    assert cli.main(["record", "--max-values", "1" * 23, "-o", str(out), str(script)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--max-values: expected a non-negative integer up to" in err[0]
    assert not out.exists()
    assert cli.main(["record", "--max-values", str(2**64), "-o", str(out), str(script)]) == 0
    assert _read_by_every_reader(out).header["max_values"] == 2**64


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX")
@pytest.mark.parametrize("last", [None, 2])
def test_a_forked_child_that_outlives_the_run_leaves_the_file_free(
    tmp_path: Path, last: int | None
) -> None:
    out = tmp_path / "t.jsonl"
    recording = Recording(calls=CallSelection(last=last), output=out)
    read, write = os.pipe()
    started, running = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child holds on until the parent has finished its run
        os.close(write)
        os.write(running, b"x")  # its after-fork hooks have run
        os.read(read, 1)
        os._exit(0)
    try:
        os.close(read)
        os.close(running)
        assert os.read(started, 1) == b"x"
        os.close(started)
        recording.finish()
        again = Recording(calls=CallSelection(last=last), output=out)  # not "another process"
        again.finish()
    finally:
        os.close(write)
        os.waitpid(pid, 0)
    assert Trace.load(out).graph_tasks == {}
