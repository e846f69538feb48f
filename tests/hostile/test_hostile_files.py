"""Files that are not traces, or traces too big to read: refused in one line, never a hang.

See Note [Bounded reading] in ``autograd_viz.trace.reading``.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from autograd_viz.trace import Trace, TraceFormatError, file, reading
from tests.hostile.program import hostile_trace

ROOT = Path(__file__).resolve().parents[2]
GIGABYTE = 1 << 30


def _capped(
    args: list[str], memory: int = GIGABYTE
) -> tuple[subprocess.CompletedProcess[str], float]:
    """``autograd-viz ARGS`` under a memory cap (``ulimit -v``), and the CPU seconds it took.

    CPU time, not wall time: the machine may be busy with other work.
    """

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "autograd_viz", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=cap,
        timeout=60,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return done, cpu


def _startup() -> float:
    """The CPU seconds the command takes to start and fail on a missing file, capped the same."""
    _, took = _capped(["timeline", "/nonexistent/trace.jsonl"])
    return took


@pytest.mark.parametrize("kind", ["dev_zero", "fifo"])
def test_dev_zero_and_a_fifo_fail_at_once_in_one_line_under_a_memory_cap(
    kind: str, tmp_path: Path
) -> None:
    if kind == "fifo":
        path = tmp_path / "trace.jsonl"
        os.mkfifo(path)  # nobody ever writes to it: opening it to read used to wait forever
        what = "a FIFO (named pipe), not a trace file"
    else:
        path = Path("/dev/zero")  # endless, and without a newline: it used to eat all memory
        what = "a character device, not a trace file"
    startup = _startup()
    done, took = _capped(["timeline", str(path), "-o", str(tmp_path / "t.json")])
    assert done.returncode == 3
    assert (
        done.stderr
        == f"autograd-viz: error: invalid trace file {path}: {what}; give a regular file\n"
    )
    assert "MemoryError" not in done.stderr and done.stdout == ""
    assert took < 1.0 and took - startup < 0.25, (took, startup)  # starting up is most of it


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        with pytest.raises(TraceFormatError, match="a socket, not a trace file"):
            Trace.load(path)
    finally:
        server.close()


def test_a_line_past_the_limit_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = hostile_trace("x")
    path = tmp_path / "t.jsonl"
    trace.save(path)
    with path.open("ab") as f:
        f.write(b"0" * 5000)  # no newline: a file of zeros, or a broken write
    monkeypatch.setattr(reading, "MAX_LINE_BYTES", 4096)
    lines = len(path.read_bytes().splitlines())
    with pytest.raises(TraceFormatError, match=rf"t.jsonl, line {lines}: longer than 0 MiB"):
        Trace.load(path)


def test_a_file_of_more_records_than_the_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.jsonl"
    hostile_trace("x").save(path)
    count = len(path.read_bytes().splitlines())
    monkeypatch.setattr(reading, "MAX_RECORDS", count - 1)
    with pytest.raises(TraceFormatError, match=rf"line {count}: more than {count - 1:,} records"):
        Trace.load(path)
    monkeypatch.setattr(reading, "MAX_RECORDS", count)
    assert Trace.load(path) == Trace.load(path)  # exactly at the limit, it loads


def test_a_file_bigger_than_the_memory_allowed_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with path.open("wb") as f:
        f.truncate(2 * GIGABYTE)  # sparse: two gigabytes of nothing, on no disk
    done, _ = _capped(["timeline", str(path), "-o", str(tmp_path / "t.json")])
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1
    assert "does not fit in the 1.1 GB of memory this process may use" in done.stderr


def test_running_out_of_memory_while_reading_is_a_trace_format_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.jsonl"
    hostile_trace("x").save(path)
    calls = 0

    def decode(line: str) -> object:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise MemoryError
        return file._DECODER.decode(line)

    monkeypatch.setattr(file, "_decode", decode)
    with pytest.raises(TraceFormatError, match="t.jsonl, line 3: out of memory while reading"):
        Trace.load(path)
