"""The graph-task picker on a training run: calls by number, a sparkline of their gradient norms."""

from __future__ import annotations

from typing import Any

import numpy as np
from textual.pilot import Pilot
from textual.widgets import OptionList

import engine
from autograd_viz.trace import Trace
from autograd_viz.trace.recording import record
from autograd_viz.tui.call_picker import BARS, bar, call_figures, task_choices
from autograd_viz.tui.screens import TaskPicker
from tests.viz.tui.tuiting import replay_app, run_app


def _run(nan_at: int | None = None) -> Trace:
    """Six calls of w * scale, every other one recorded; the scale grows each call."""
    w = engine.tensor([1.0, 2.0], requires_grad=True)
    with record(every=2) as trace, np.errstate(all="ignore"):
        for step in range(6):
            scale = engine.tensor([float(step + 1)] * 2)
            if step == nan_at:
                scale = engine.tensor([float("nan"), 1.0])
            (w * scale).sum().backward()
            w.grad = None  # zero_grad: a leaf's .grad after a call is that call's gradient
    return trace


def test_each_call_has_its_gradient_norm_and_its_non_finite_count() -> None:
    trace = _run(nan_at=4)
    figures = list(call_figures(trace).values())
    assert [round(f.grad_norm, 6) for f in figures[:2]] == [round(2**0.5, 6), round(18**0.5, 6)]
    assert [f.nonfinite for f in figures] == [0, 0, 1]


def test_the_picker_lists_calls_by_number_with_a_sparkline() -> None:
    title, rows = task_choices(_run())
    labels = [label for _, label in rows]
    assert [label.split(":")[0][2:] for label in labels] == ["call 0", "call 2", "call 4"]
    heights = [BARS.index(label[0]) for label in labels]
    assert heights[0] == 0 and heights[-1] == len(BARS) - 1 and 0 < heights[1] < len(BARS) - 1
    assert "grad norm 1.41" in labels[0] and "3 nodes" in labels[0]
    line = "".join(label[0] for label in labels)
    assert title == f"Show which backward call? Gradient norm per call: {line}"


def test_a_call_with_a_nan_says_so_and_its_bar_is_marked() -> None:
    title, rows = task_choices(_run(nan_at=4))
    assert rows[-1][1].startswith("! call 4: grad norm nan, 1 NaN/Inf")
    assert title.endswith("!")
    assert bar(float("inf"), 0, 1) == "!"


def test_the_tui_picker_shows_the_calls() -> None:
    trace = _run()
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("t")
        assert isinstance(app.screen, TaskPicker)
        options = app.screen.query_one(OptionList)
        prompts = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert prompts[0] == "follow the current step"
        assert [p.split(":")[0][2:] for p in prompts[1:]] == ["call 0", "call 2", "call 4"]
        await pilot.press("down", "down", "down", "enter")
        await pilot.pause()
        last = [info.id for info in trace.graph_tasks.values()][-1]
        assert app.pinned_task == last

    run_app(app, actions)
