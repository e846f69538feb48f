"""``dot`` and ``animate`` load their trace out of the collector's sight, as ``replay`` does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.viz.test_modules import transformer_trace

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, sys
from autograd_viz.cli.graph import _load
before = gc.get_freeze_count()
trace = _load(sys.argv[1])
print(before, gc.get_freeze_count(), gc.isenabled(), len(trace.graph_tasks))
"""


def test_a_loaded_trace_is_frozen_and_the_collector_left_on(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    transformer_trace(3).save(path)
    # A fresh interpreter: freezing in the test process would keep the tests' garbage.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    before, after, enabled, tasks = done.stdout.split()
    assert int(before) == 0 and int(after) > 0
    assert enabled == "True" and int(tasks) == 1
