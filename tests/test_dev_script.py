"""``scripts/dev``: what setup says goes to stderr, so ``./scripts/dev demo`` prints only the demo."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DEV = Path(__file__).resolve().parent.parent / "scripts" / "dev"


def test_the_torch_check_writes_nothing_to_stdout() -> None:
    pytest.importorskip("torch")
    import torch

    script = re.search(r"<<'PY'.*?\n(.*?)\nPY\n", DEV.read_text(), re.DOTALL)
    assert script is not None, "check_torch's Python is no longer a PY heredoc"
    pin = f"torch=={torch.__version__.split('+')[0]}"
    done = subprocess.run(
        [sys.executable, "-", pin],
        input=script.group(1),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "works" in done.stderr
