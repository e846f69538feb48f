"""The TUI on a PyTorch trace: what the bridge derived says so, a contradiction stands out."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from textual.pilot import Pilot

from autograd_viz.trace.recording import record
from autograd_viz.tui.app import explain_line
from autograd_viz.tui.panels import EventLog
from tests.viz.tui.test_tui_screens import screen_lines
from tests.viz.tui.tuiting import replay_app, run_app

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def trace() -> Any:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    with record() as trace:
        model(torch.randn(2, 3)).sum().backward()
    return trace


def test_a_derived_event_says_it_was_derived_and_an_observed_one_does_not(trace: Any) -> None:
    derived = next(e for e in trace.events if e.kind == "enqueue" and e.data.get("derived"))
    observed = next(e for e in trace.events if e.kind == "node_start")
    assert "derived" in explain_line(trace, derived).plain
    assert "derived" not in explain_line(trace, observed).plain
    log = EventLog()
    log.show(trace, 0)
    assert log.row_text(derived.index).plain.rstrip().endswith("derived")
    assert "derived" not in log.row_text(observed.index).plain


def test_a_mismatch_is_explained_in_words(trace: Any) -> None:
    some = trace.events[5]
    mismatch = some._replace(
        kind="derived_mismatch",
        data=MappingProxyType(
            {
                "check": "order",
                "expected": (1, "AddmmBackward0"),
                "observed": (2, "TanhBackward0"),
                "message": "expected AddmmBackward0 #1 to run next, TanhBackward0 #2 ran",
                "derived": True,
            }
        ),
    )
    text = explain_line(trace, mismatch).plain
    assert "contradicts what was derived" in text and "TanhBackward0 #2 ran" in text


def test_stepping_a_pytorch_trace_in_the_app_shows_the_derived_line(trace: Any) -> None:
    app = replay_app(trace)
    derived = next(e for e in trace.events if e.kind == "dependency_decrement")

    async def actions(pilot: Pilot[Any]) -> None:
        app.driver.goto(derived.index + 1)
        app.refresh_view(follow=True)
        await pilot.pause()
        assert "derived" in " ".join(screen_lines(app)[-4:])

    run_app(app, actions, size=(200, 40))
