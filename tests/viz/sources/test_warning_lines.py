"""A watcher's one-line warnings point at the program's line (Note [Warnings point at the
program] in ``autograd_viz/sources/once.py``), not at PyTorch's file or ours."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

import engine
from autograd_viz.sources import once
from autograd_viz.sources.once import program_stacklevel, warn_once

REPO = Path(__file__).resolve().parents[3]


def library_function(directory: str, body: str) -> Any:
    """A function ``call(f)`` whose code says it lives in ``directory`` (a library's), and
    which calls ``f`` through a ``with`` block of ``contextlib``'s."""
    source = textwrap.dedent(
        f"""
        import contextlib

        def call(f):
            with contextlib.nullcontext():
                {body}
        """
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, os.path.join(directory, "library.py"), "exec"), namespace)
    return namespace["call"]


def test_a_warning_from_inside_the_libraries_points_at_the_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(once, "said", set())
    engine_dir = os.path.dirname(engine.__file__)
    inner = library_function(engine_dir, "f()")  # the engine calls the watcher
    outer = library_function(engine_dir, "inner(f)")
    outer.__globals__["inner"] = inner
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outer(lambda: warn_once("autograd-viz: cannot watch this"))  # the program's line
        line = sys._getframe().f_lineno - 1
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]


def test_the_level_counts_the_frames_out_to_the_program() -> None:
    engine_dir = os.path.dirname(engine.__file__)
    warns = library_function(engine_dir, "return program_stacklevel()")  # the watcher's
    warns.__globals__["program_stacklevel"] = program_stacklevel
    assert warns(None) == 2  # this line
    assert library_function(engine_dir, "return f(None)")(warns) == 3  # past the library
    assert program_stacklevel() == 1  # the program's own function warns: its own line


def test_with_no_program_frame_the_default_level_is_used() -> None:
    result: list[int] = []
    engine_dir = os.path.dirname(engine.__file__)
    warns = library_function(engine_dir, "return program_stacklevel(default=7)")
    warns.__globals__["program_stacklevel"] = program_stacklevel
    call = library_function(engine_dir, "result.append(f(None))")
    call.__globals__["result"] = result
    # a thread whose every frame is a library's, as one a backend started
    thread = threading.Thread(target=call, args=(warns,))
    thread.start()
    thread.join()
    assert result == [7]


SCRIPT = """
    import torch


    class Scorer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 3)

        def forward(self, x):
            return torch.tanh(self.fc(x))


    compiled = torch.compile(Scorer(), backend="eager")
    compiled(torch.ones(2, 3)).sum().backward()  # COMPILED
    w = torch.ones(3, requires_grad=True)
    torch.func.grad(lambda v: (v * 2).sum())(w)  # FUNC
"""


@pytest.mark.oracle
def test_the_lines_autograd_viz_nan_says_name_the_scripts_lines(tmp_path: Path, torch: Any) -> None:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    source = script.read_text().splitlines()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("AUTOGRAD_VIZ_CHILDREN", None)
    done = subprocess.run(
        [sys.executable, "-m", "autograd_viz", "nan", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    said = re.findall(r"^(.*):(\d+): RuntimeWarning: autograd-viz: (.*)$", done.stderr, re.M)
    where = {("torch.func" in message): (file, source[int(n) - 1]) for file, n, message in said}
    assert len(said) == 2, done.stderr
    # the compiled region's line used to point at torch/nn/modules/module.py, and
    # torch.func's at autograd_viz/sources/pytorch/chokepoint.py
    assert where[False][0] == str(script) and where[False][1].endswith("# COMPILED")
    assert where[True][0] == str(script) and where[True][1].endswith("# FUNC")
