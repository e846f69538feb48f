"""``dot`` and ``animate`` keep their trace out of the collector's sight, as ``replay`` does:
loaded from a file, or recorded from a script in the process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.viz.draw.test_modules import transformer_trace

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import gc, sys
from autograd_viz.cli.graph import _load
before = gc.get_freeze_count()
trace = _load(sys.argv[1])
print(before, gc.get_freeze_count(), gc.isenabled(), len(trace.graph_tasks))
"""


RECORDED = """
import gc, sys
from autograd_viz.cli.graph import _record
before = gc.get_freeze_count()
trace = _record(sys.argv[1], [])
tracked = {id(o) for o in gc.get_objects()}
events = [e for e in trace.events if gc.is_tracked(e)]
frozen = sum(id(e) not in tracked for e in events)
print(before, gc.get_freeze_count(), gc.isenabled(), len(trace.graph_tasks), frozen, len(events))
"""

SCRIPT = """
import engine
w = engine.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
((w @ w).tanh() * w).sum().backward()
"""


def _probe(code: str, argument: Path) -> list[str]:
    # A fresh interpreter: freezing in the test process would keep the tests' garbage.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(argument)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return done.stdout.split()


def test_a_loaded_trace_is_frozen_and_the_collector_left_on(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    transformer_trace(3).save(path)
    before, after, enabled, tasks = _probe(PROBE, path)
    assert int(before) == 0 and int(after) > 0
    assert enabled == "True" and int(tasks) == 1


def test_a_trace_recorded_from_a_script_is_frozen_as_a_loaded_one(tmp_path: Path) -> None:
    script = tmp_path / "small.py"
    script.write_text(SCRIPT)
    before, after, enabled, tasks, frozen, events = _probe(RECORDED, script)
    assert int(before) == 0 and int(after) > 0
    assert enabled == "True" and int(tasks) == 1
    # Every event the collector could scan is out of its sight.
    assert int(events) > 0 and frozen == events
