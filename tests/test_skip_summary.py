"""The test summary folds every GPU skip into one line (the hook in tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_gpu_skips_are_one_line_of_the_summary() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) <= 1, skipped  # none on a machine with a GPU
    if skipped:
        assert skipped[0].startswith("SKIPPED [")
        assert "tests/gpu: needs CuPy and an NVIDIA GPU" in skipped[0]
