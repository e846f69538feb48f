"""A script given by a relative path runs as ``python`` runs it: ``__file__``, ``sys.argv``
and the file its frames and warnings name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

SCRIPT = """\
import sys
import warnings

print("file", __file__)
print("argv", sys.argv)
warnings.warn("from the script")
"""


def _run(tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": ""}
    return subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def test_a_relative_path_runs_as_python_runs_it(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "prog.py").write_text(SCRIPT)
    plain = _run(tmp_path, os.path.join("sub", "prog.py"), "a")
    recorded = _run(
        tmp_path,
        "-m",
        "autograd_viz",
        "record",
        "-o",
        "t.jsonl",
        os.path.join("sub", "prog.py"),
        "a",
    )
    assert plain.returncode == 0, plain.stderr
    assert recorded.returncode == 0, recorded.stderr
    printed = [line for line in recorded.stdout.splitlines() if line.startswith(("file", "argv"))]
    assert printed == plain.stdout.splitlines()
    assert str(tmp_path / "sub" / "prog.py") in plain.stdout  # python gives an absolute __file__
    warned = [line for line in plain.stderr.splitlines() if "UserWarning" in line]
    assert warned
    assert warned[0] in recorded.stderr.splitlines()
