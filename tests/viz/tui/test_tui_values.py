"""The TUI on a trace recorded without values (``--values none``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from textual.pilot import Pilot

import engine
from autograd_viz.trace.recording import record
from autograd_viz.tui.call_picker import call_figures, task_choices
from tests.viz.tui.tuiting import inspector, replay_app, run_app, status


def _steps(count: int) -> None:
    w = engine.tensor(np.ones((3, 2)), requires_grad=True)
    for _ in range(count):
        (engine.tensor(np.ones((2, 3))) @ w).tanh().sum().backward()


def test_the_inspector_says_values_not_recorded_and_the_picker_lists_the_calls() -> None:
    with record(values="none") as trace:
        _steps(3)
    figures = call_figures(trace)
    assert len(figures) == 3 and all(math.isnan(f.grad_norm) for f in figures.values())
    title, choices = task_choices(trace)
    assert "recorded with --values none" in title
    assert len(choices) == 3 and all("values not recorded" in label for _, label in choices)
    assert not any("nan" in label.lower() or "!" in label for _, label in choices)
    app = replay_app(trace)
    seen: list[str] = []

    async def actions(pilot: Pilot[Any]) -> None:
        for _ in range(4):
            await pilot.press("n")
            await pilot.pause()
            seen.append(inspector(app))
        assert "step" in status(app)

    run_app(app, actions)
    assert any("TanhBackward0" in text for text in seen), seen
    shown = next(text for text in seen if "TanhBackward0" in text)
    assert "values not recorded (--values none)" in shown
    assert "empty" not in shown and "undefined" not in shown
