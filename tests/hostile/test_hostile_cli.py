"""Hostile names through the command line: error lines and reports are text, one line each.

See Note [Names are text] in ``autograd_viz.trace.text``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograd_viz.cli.main import main
from autograd_viz.trace.text import printable
from tests.hostile.names import ACTING, HOSTILE
from tests.hostile.program import class_name, hostile_trace, script_text

NAMES = pytest.mark.parametrize("name", HOSTILE.values(), ids=HOSTILE.keys())

FILE_NAMES = {
    key: name
    for key, name in HOSTILE.items()
    if "/" not in name
    and "\x00" not in name
    and len(name.encode("utf-8", "replace")) < 200
    and not any("\ud800" <= c <= "\udfff" for c in name)
}
"""The hostile names a file can have: no ``/``, NUL or lone surrogate, and short enough."""


def acting(text: str) -> list[str]:
    return [hex(ord(c)) for c in ACTING if c in text]


@pytest.fixture
def trace_file(name: str, tmp_path: Path) -> Path:
    path = tmp_path / "hostile.jsonl"
    hostile_trace(name).save(path)
    return path


@NAMES
def test_dot_around_an_unknown_node_names_the_others_on_one_clean_line(
    name: str, trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["dot", str(trace_file), "--around", "X", "-o", str(tmp_path / "g.dot")])
    err = capsys.readouterr().err
    assert status == 3
    assert err.startswith("autograd-viz: error: nothing named 'X'")
    assert acting(err) == []
    assert err.count("\n") == 1 and len(err) < 2100
    assert printable(class_name(name))[:50] in err


@NAMES
def test_a_trace_error_quoting_a_name_is_one_clean_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    header = {"type": "header", "format": name, "version": 2, "engine": "x", "max_values": 0}
    path.write_text(json.dumps(header) + "\n", encoding="utf-8", errors="surrogatepass")
    assert main(["timeline", str(path)]) == 3
    err = capsys.readouterr().err
    assert "not an autograd-viz trace" in err
    assert acting(err) == [] and err.count("\n") == 1


@NAMES
def test_dot_and_timeline_write_clean_summaries(
    name: str, trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dot", str(trace_file), "-o", str(tmp_path / "g.dot")]) == 0
    assert main(["timeline", str(trace_file), "-o", str(tmp_path / "t.json")]) == 0
    out, err = capsys.readouterr()
    assert acting(out + err) == []
    lanes = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))["traceEvents"]
    names = [e["args"]["name"] for e in lanes if e["name"] == "thread_name"]
    assert printable(name) in names


@pytest.mark.parametrize("name", FILE_NAMES.values(), ids=FILE_NAMES.keys())
def test_record_shows_a_hostile_script_name_as_text(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / f"{name}.py"
    script.write_text(script_text("hostile_program", name), encoding="utf-8")
    output = tmp_path / "out.jsonl"
    assert main(["record", "-o", str(output), str(script)]) == 0
    out, err = capsys.readouterr()
    assert acting(out + err) == []
    assert f"Recorded {printable(script)}" in out.replace("\n", "")


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
@pytest.mark.parametrize("name", FILE_NAMES.values(), ids=FILE_NAMES.keys())
def test_the_nan_command_reports_hostile_names_as_text(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / f"{name}.py"
    script.write_text(script_text("nan_program", name), encoding="utf-8")
    assert main(["nan", str(script)]) == 1
    out, err = capsys.readouterr()
    assert acting(out + err) == []
    assert f"at {printable(class_name(name))}Backward" in out.replace("\n", "")
