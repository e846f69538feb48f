"""A program's signal handler raising inside the recorder leaves a trace that loads
(Note [A call goes in whole] in ``autograd_viz/trace/recorder.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import autograd_viz
import engine
from autograd_viz.trace import Trace


class _RaisesOnce(dict):  # type: ignore[type-arg]
    """The trace's calls, where the first call put in meets ``sys.exit`` from a handler: the
    exception lands between the call's start event and the call itself."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.raised = False

    def __setitem__(self, key: Any, value: Any) -> None:
        if not self.raised:
            self.raised = True
            raise SystemExit(7)
        super().__setitem__(key, value)


def test_a_handler_raising_between_a_calls_start_and_its_record(tmp_path: Path) -> None:
    w = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (w * 2.0).sum().backward()
    with pytest.raises(SystemExit), autograd_viz.record() as trace:
        (w * 3.0).sum().backward()  # recorded whole
        trace.graph_tasks = calls = _RaisesOnce(trace.graph_tasks)
        (w * 4.0).sum().backward()
    assert calls.raised
    starts = [e.graph_task for e in trace.events if e.kind == "graph_task_start"]
    assert len(starts) == 2
    assert set(starts) == set(trace.graph_tasks)  # every start has its call
    path = tmp_path / "t.jsonl"
    trace.save(path)
    assert len(Trace.load(path).graph_tasks) == 2
    (w * 5.0).sum().backward()  # the engine goes on
    assert w.grad is not None
