"""``autograd-viz dot``: from a trace or a script, options anywhere, clear errors."""

from __future__ import annotations

import json
import os
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import autograd_viz
import engine
from autograd_viz import cli
from tests.viz.dotting import SVG, needs_dot

SCRIPT = """
    import json, os, sys
    import engine

    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    ((x.to("sim:0") * 2.0).to("cpu") + x).sum().backward()
    (x * 3.0).sum().backward()
    with open(os.environ["SEEN"], "w") as f:
        json.dump(sys.argv, f)
"""


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    with autograd_viz.record() as trace:
        (x.exp() * x).sum().backward()
    path = tmp_path / "run.jsonl"
    trace.save(path)
    return path


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("autograd-viz: error:")]


@needs_dot
def test_dot_draws_a_trace_at_a_step_as_svg(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "g.svg"
    assert cli.main(["dot", str(trace_file), "-o", str(out), "--step", "5", "--values"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"Wrote {out} (svg): 4 nodes, 4 edges at step 5 of ")
    root = ET.parse(out).getroot()
    titles = {g.get("id") for g in root.iter(f"{SVG}g") if g.get("class", "").startswith("node")}
    assert {"n0", "n1", "n2", "n3", "n3_leaf", "legend"} <= titles


def test_dot_writes_dot_source_with_options_before_or_after_source(
    trace_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["dot", "--no-legend", str(trace_file), "-o", "a.dot", "--step", "0"]) == 0
    assert cli.main(["dot", "-o", "b.dot", "--step=0", "--no-legend", str(trace_file)]) == 0
    first = (tmp_path / "a.dot").read_text(encoding="utf-8")
    assert first == (tmp_path / "b.dot").read_text(encoding="utf-8")
    assert "step 0 of" in first and "legend" not in first


@needs_dot
def test_dot_names_its_output_after_the_source_by_default(
    trace_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["dot", str(trace_file)]) == 0
    assert (tmp_path / "run.svg").read_bytes().startswith(b"<?xml")


def test_dot_runs_a_script_with_its_arguments_and_draws_a_chosen_graph_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    seen = tmp_path / "seen.json"
    monkeypatch.setenv("SEEN", str(seen))
    out = tmp_path / "g.dot"
    status = cli.main(["dot", str(script), "--lr", "3", "-o", str(out), "--", "-o", "mine"])
    assert status == 0
    assert json.loads(seen.read_text())[1:] == ["--lr", "3", "-o", "mine"]
    last = out.read_text(encoding="utf-8")
    assert "MulBackward0" in last and "sim:0" not in last  # the second backward call
    recorded = tmp_path / "run.jsonl"
    assert cli.main(["record", "-o", str(recorded), str(script)]) == 0
    first_task = min(autograd_viz.Trace.load(recorded).graph_tasks)
    assert cli.main(["dot", str(recorded), "--graph-task", str(first_task), "-o", str(out)]) == 0
    assert "sim:0" in out.read_text(encoding="utf-8")


def test_dot_reports_user_mistakes_in_one_line(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "g.dot")
    cases = [
        (["dot"], 2, "dot: missing SOURCE, a trace file or a Python script"),
        (["dot", str(trace_file), "-o", str(tmp_path / "g.jpeg")], 2, "cannot tell the format"),
        (["dot", str(trace_file), "-o", out, "--step", "999"], 3, "--step 999 is past the end"),
        (["dot", str(trace_file), "-o", out, "--step", "-1"], 2, "expected a non-negative"),
        (["dot", str(trace_file), "-o", out, "--graph-task", "777"], 3, "graph task 777 is not"),
        (["dot", str(trace_file), "-o", out, "--around", "Nope"], 3, "nothing named 'Nope'"),
        (["dot", str(trace_file), "-o", out, "extra"], 2, "is a trace file, which takes no"),
        (["dot", str(tmp_path / "missing.jsonl"), "-o", out], 3, "cannot read trace"),
        (["dot", str(tmp_path / "missing.py"), "-o", out], 3, "no such file"),
        (["dot", str(trace_file), "-o", str(tmp_path / "no" / "g.dot")], 3, "does not exist"),
    ]
    for argv, status, message in cases:
        assert cli.main(argv) == status, argv
        errors = _errors(capsys.readouterr().err)
        assert len(errors) == 1 and message in errors[0], (argv, errors)


def test_dot_on_a_script_without_backward_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "quiet.py"
    script.write_text("print('no backward here')\n", encoding="utf-8")
    assert cli.main(["dot", str(script), "-o", str(tmp_path / "g.dot")]) == 3
    assert "ran no backward pass, so there is nothing to draw" in capsys.readouterr().err


def test_dot_draws_what_a_failing_script_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "fails.py"
    script.write_text(
        textwrap.dedent(
            """
            import engine
            x = engine.tensor([1.0], requires_grad=True)
            (x * 2.0).sum().backward()
            raise RuntimeError("after backward")
            """
        ),
        encoding="utf-8",
    )
    out = tmp_path / "g.dot"
    assert cli.main(["dot", str(script), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "raised RuntimeError: after backward; drawing the" in err
    assert "MulBackward0" in out.read_text(encoding="utf-8")


def test_python_dash_m_works_like_the_command(trace_file: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "g.dot"
    done = subprocess.run(
        [sys.executable, "-m", "autograd_viz", "dot", str(trace_file), "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8").startswith("// autograd-viz backward graph")


@needs_dot
def test_animate_writes_a_page_with_a_frame_per_step(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.html"
    assert cli.main(["animate", str(trace_file), "-o", str(out), "--values"]) == 0
    steps = len(autograd_viz.Trace.load(trace_file))
    assert capsys.readouterr().out == f"Wrote {out}: {steps + 1} frames of {trace_file}.\n"
    page = out.read_text(encoding="utf-8")
    data = json.loads(page.split('id="animation-data">', 1)[1].split("</script>", 1)[0])
    assert len(data["frames"]) == len(data["captions"]) == steps + 1
    assert "<title>autograd-viz · run.jsonl</title>" in page


@needs_dot
def test_animate_samples_a_gif_down_to_max_frames(trace_file: Path, tmp_path: Path) -> None:
    from PIL import Image

    out = tmp_path / "run.gif"
    assert cli.main(["animate", str(trace_file), "-o", str(out), "--max-frames", "5"]) == 0
    with Image.open(out) as gif:
        assert gif.n_frames == 5


def test_animate_checks_the_output_before_running_the_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    seen = tmp_path / "seen.json"
    monkeypatch.setenv("SEEN", str(seen))
    assert cli.main(["animate", str(script), "-o", str(tmp_path / "run.mp4")]) == 2
    errors = _errors(capsys.readouterr().err)
    assert (
        len(errors) == 1
        and "unsupported suffix ('.mp4'); use one of .html, .htm, .gif" in errors[0]
    )
    assert not seen.exists()
