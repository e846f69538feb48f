"""``autograd-viz record`` and ``autograd-viz timeline``: outputs, exit statuses, errors."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograd_viz import cli
from autograd_viz.cli import record as cli_record
from autograd_viz.cli.record import DEFAULT_TRACE
from autograd_viz.trace import Trace

REPO = Path(__file__).resolve().parents[3]

TWO_DEVICES = """
    import json
    import os
    import sys

    import engine

    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    left = (x.to("sim:0") * 2.0).to("cpu")
    right = (x.to("sim:1") * 3.0).to("cpu")
    (left + right).sum().backward()
    with open(os.environ["SEEN"], "w") as f:
        json.dump({"argv": sys.argv, "path0": sys.path[0], "name": __name__}, f)
"""

RAISES = """
    import engine

    def check(value):
        raise ValueError(f"bad value {value}\\nsecond line")

    x = engine.tensor([1.0], requires_grad=True)
    (x * 2.0).sum().backward()
    check(3)
"""


def _script(tmp_path: Path, body: str, name: str = "script.py") -> Path:
    path = tmp_path / "scripts" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("autograd-viz: error:")]


def test_record_runs_the_script_as_main_and_saves_its_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script(tmp_path, TWO_DEVICES)
    out = tmp_path / "run.jsonl"
    monkeypatch.setenv("SEEN", str(tmp_path / "seen.json"))
    argv, path = list(sys.argv), list(sys.path)
    status = cli.main(["record", "-o", str(out), str(script), "--lr", "0.1", "--", "-o", "x"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert sys.argv == argv and sys.path == path, "argv and sys.path are restored"
    seen = json.loads((tmp_path / "seen.json").read_text(encoding="utf-8"))
    assert seen == {
        "argv": [str(script), "--lr", "0.1", "-o", "x"],
        "path0": str(script.parent),
        "name": "__main__",
    }
    stats = Trace.load(out).stats()
    assert stats.graph_tasks == 1 and stats.nodes == 9
    lines = captured.out.splitlines()
    assert lines[0] == f"Recorded {script}"
    assert f"  nodes run    {stats.nodes}" in lines
    assert f"  events       {stats.events}" in lines
    assert "  errors       0" in lines
    assert any(line.startswith(f"  saved to     {out} (") for line in lines)
    assert captured.err == ""


def test_a_final_output_option_after_the_script_names_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SEEN", str(tmp_path / "seen.json"))
    script = _script(tmp_path, TWO_DEVICES)
    assert cli.main(["record", str(script), "--lr", "0.1", "-o", "mine.jsonl"]) == 0
    seen = json.loads((tmp_path / "seen.json").read_text(encoding="utf-8"))
    assert seen["argv"][1:] == ["--lr", "0.1"]
    assert (tmp_path / "mine.jsonl").exists() and not (tmp_path / DEFAULT_TRACE).exists()
    assert capsys.readouterr().err == ""


def test_after_a_double_dash_an_output_option_goes_to_the_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SEEN", str(tmp_path / "seen.json"))
    script = _script(tmp_path, TWO_DEVICES)
    assert cli.main(["record", str(script), "--", "-o", "mine.jsonl"]) == 0
    seen = json.loads((tmp_path / "seen.json").read_text(encoding="utf-8"))
    assert seen["argv"][1:] == ["-o", "mine.jsonl"]
    assert (tmp_path / DEFAULT_TRACE).exists() and not (tmp_path / "mine.jsonl").exists()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("command", ["record", "nan", "run", "dot", "animate"])
def test_an_option_given_before_and_after_the_script_is_refused(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script(tmp_path, TWO_DEVICES)
    suffix = {"dot": ".svg", "animate": ".html"}.get(command, ".jsonl")
    first, second = str(tmp_path / f"a{suffix}"), str(tmp_path / f"b{suffix}")
    option = "--anomaly" if command == "run" else "-o"
    words = [option] if command == "run" else [option, first]
    again = [option] if command == "run" else [option, second]
    status = cli.main([command, *words, str(script), *again])
    err = capsys.readouterr().err
    if command == "run":  # a flag twice says the same thing twice: no clash; no terminal: printed
        assert "not a terminal: printing each backward call" in err
        assert status == 1 and "KeyError: 'SEEN'" in err  # it ran: SEEN is not set here
        return
    assert status == 2
    assert err == (
        f"autograd-viz: error: {option} is given before SCRIPT and again after it; give it once "
        "(after a '--', it is the script's) (see 'autograd-viz --help')\n"
    )
    assert not os.path.exists(first) and not os.path.exists(second)


def test_record_max_values_is_written_in_the_header(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEEN", str(tmp_path / "seen.json"))
    out = tmp_path / "t.jsonl"
    script = _script(tmp_path, TWO_DEVICES)
    assert cli.main(["record", "--max-values", "0", "-o", str(out), "--", str(script), "a"]) == 0
    assert Trace.load(out).header["max_values"] == 0
    seen = json.loads((tmp_path / "seen.json").read_text(encoding="utf-8"))
    assert seen["argv"] == [str(script), "a"], "a -- before SCRIPT is not passed on"
    assert cli.main(["record", "--max-values", "-1", "x.py"]) == 2
    assert "--max-values: expected a non-negative integer" in capsys.readouterr().err


def test_an_interrupted_script_keeps_its_partial_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = RAISES.replace("check(3)", "raise KeyboardInterrupt")
    out = tmp_path / "t.jsonl"
    assert cli.main(["record", "-o", str(out), str(_script(tmp_path, body))]) == 130
    assert capsys.readouterr().err.splitlines() == [
        f"autograd-viz: partial trace saved to {out}",
        "autograd-viz: interrupted",
    ]
    assert Trace.load(out).stats().nodes == 3


def test_a_script_that_raises_shows_its_traceback_and_keeps_the_partial_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script(tmp_path, RAISES, "fails.py")
    out = tmp_path / "partial.jsonl"
    status = cli.main(["record", "-o", str(out), str(script)])
    captured = capsys.readouterr()
    assert status == 1
    err = captured.err.splitlines()
    assert err[-1] == f"autograd-viz: error: {script} raised ValueError: bad value 3"
    assert err[0] == f"Traceback of {script}, which raised:"
    assert err[1] == "Traceback (most recent call last):"
    assert err[2] == f'  File "{script}", line 9, in <module>', "the script's frame comes first"
    assert "ValueError: bad value 3" in err and "second line" in err
    assert "runpy" not in captured.err and "autograd_viz" not in captured.err
    assert captured.out.startswith(f"Partial trace of {script}")
    assert Trace.load(out).stats().nodes == 3, "the backward before the error was recorded"


def test_a_script_that_does_not_compile_is_reported_without_our_frames(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script(tmp_path, "def broken(:\n", "syntax.py")
    assert cli.main(["record", "-o", str(tmp_path / "t.jsonl"), str(script)]) == 1
    err = capsys.readouterr().err
    assert f'File "{script}", line 1' in err and "Traceback (most recent call last)" not in err
    assert len(_error_lines(err)) == 1
    assert err.splitlines()[-1].startswith(f"autograd-viz: error: {script} raised SyntaxError: ")


@pytest.mark.parametrize(("code", "status"), [("0", 0), ("None", 0), ("3", 3), ("'bye'", 1)])
def test_system_exit_from_the_script_is_its_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], code: str, status: int
) -> None:
    script = _script(tmp_path, f"import sys\nsys.exit({code})\n", "exits.py")
    out = tmp_path / "t.jsonl"
    assert cli.main(["record", "-o", str(out), str(script)]) == status
    captured = capsys.readouterr()
    assert out.exists() and captured.out.startswith(f"Recorded {script}")
    assert not _error_lines(captured.err)
    if status:
        assert (
            captured.err.splitlines()[-1] == f"autograd-viz: {script} exited with status {status}"
        )
    if code == "'bye'":
        assert captured.err.splitlines()[0] == "bye"


@pytest.mark.parametrize(
    ("target", "problem"),
    [("missing.py", "no such file"), (".", "it is a directory; expected a Python script")],
)
def test_record_of_no_script_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, problem: str
) -> None:
    path = tmp_path / target
    out = tmp_path / "t.jsonl"
    assert cli.main(["record", "-o", str(out), str(path)]) == 3
    captured = capsys.readouterr()
    assert captured.err == f"autograd-viz: error: cannot run {path}: {problem}\n"
    assert captured.out == "" and not out.exists()


def test_record_into_a_missing_directory_fails_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    script = _script(tmp_path, "open('ran', 'w').close()\n")
    out = tmp_path / "nowhere" / "t.jsonl"
    assert cli.main(["record", "-o", str(out), str(script)]) == 3
    assert capsys.readouterr().err == (
        f"autograd-viz: error: cannot write {out}: directory {out.parent} does not exist\n"
    )
    assert not (tmp_path / "ran").exists()


def test_record_without_a_script_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["record"]) == 2
    assert capsys.readouterr().err.startswith("autograd-viz: error: record: missing SCRIPT")


def test_the_spinner_counts_events_when_stderr_is_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=400)
    monkeypatch.setattr(
        cli_record,
        "rich_console",
        lambda stderr=False: terminal if stderr else Console(file=io.StringIO()),
    )
    monkeypatch.setenv("SEEN", str(tmp_path / "seen.json"))
    script = _script(tmp_path, TWO_DEVICES)
    assert cli.main(["record", "-o", str(tmp_path / "t.jsonl"), str(script)]) == 0
    counts = re.findall(
        rf"Running {re.escape(str(script))}: (\d+) events recorded", screen.getvalue()
    )
    assert counts and int(counts[-1]) > 0


def test_timeline_says_1_thread_not_1_threads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script(
        tmp_path, "import engine\nengine.tensor([1.0], requires_grad=True).sum().backward()\n"
    )
    trace_path = tmp_path / "run.jsonl"
    assert cli.main(["record", "-o", str(trace_path), str(script)]) == 0
    capsys.readouterr()
    assert cli.main(["timeline", str(trace_path)]) == 0
    out = capsys.readouterr().out
    assert ": 2 node slices, 2 flows, 1 thread. Open it in" in out, out


def test_timeline_writes_chrome_trace_json_next_to_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEEN", str(tmp_path / "seen.json"))
    trace_path = tmp_path / "run.jsonl"
    assert cli.main(["record", "-o", str(trace_path), str(_script(tmp_path, TWO_DEVICES))]) == 0
    capsys.readouterr()
    assert cli.main(["timeline", str(trace_path)]) == 0
    written = tmp_path / "run.timeline.json"
    assert capsys.readouterr().out.startswith(
        f"Wrote {written}: 9 node slices, 9 flows, 3 threads."
    )
    doc = json.loads(written.read_text(encoding="utf-8"))
    assert sum(1 for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "node") == 9
    other = tmp_path / "other.json"
    assert cli.main(["timeline", str(trace_path), "-o", str(other)]) == 0
    assert json.loads(other.read_text(encoding="utf-8")) == doc


def test_timeline_of_a_bad_trace_names_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header"}\n', encoding="utf-8")
    assert cli.main(["timeline", str(bad)]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"autograd-viz: error: invalid trace file {bad}, line 1: ")
    assert err.count("\n") == 1 and not (tmp_path / "bad.timeline.json").exists()


@pytest.mark.parametrize(
    ("name", "problem"), [("missing.jsonl", "No such file or directory"), (".", "Is a directory")]
)
def test_timeline_of_an_unreadable_trace_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, problem: str
) -> None:
    path = tmp_path / name
    assert cli.main(["timeline", str(path), "-o", str(tmp_path / "t.json")]) == 3
    assert capsys.readouterr().err == f"autograd-viz: error: cannot read trace {path}: {problem}\n"


def test_timeline_into_a_missing_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "no" / "t.json"
    assert cli.main(["timeline", "whatever.jsonl", "-o", str(out)]) == 3
    assert capsys.readouterr().err == (
        f"autograd-viz: error: cannot write {out}: directory {out.parent} does not exist\n"
    )


def test_python_m_autograd_viz_record_in_a_subprocess(tmp_path: Path) -> None:
    script = _script(tmp_path, TWO_DEVICES)
    env = {**os.environ, "SEEN": str(tmp_path / "seen.json"), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "autograd_viz", "record", "-o", "t.jsonl", str(script), "a"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Recorded {script}")
    assert Trace.load(tmp_path / "t.jsonl").stats().nodes == 9
    assert json.loads((tmp_path / "seen.json").read_text(encoding="utf-8"))["argv"][1:] == ["a"]
