"""What the screen says around the panels: the key bar, help, the find prompt, the event line."""

from __future__ import annotations

import re
from typing import Any

import pytest
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Static

from autograd_viz.draw.render.words import KIND_MEANINGS
from autograd_viz.trace import Trace
from autograd_viz.tui import VizApp
from autograd_viz.tui.dag import DagView
from autograd_viz.tui.keybar import ALWAYS, KEYS
from autograd_viz.tui.panels import EventLog
from autograd_viz.tui.screens import HelpScreen
from autograd_viz.tui.styled import STATUS_GLYPHS
from engine.events import EVENT_KINDS
from tests.viz.tui.tuiting import demo_trace, prompt_bar, replay_app, run_app

SIZES = [(80, 24), (120, 40), (160, 48)]
ids = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")


@pytest.fixture(scope="module")
def trace() -> Trace:
    return demo_trace()


def screen_lines(app: VizApp) -> list[str]:
    """The screen as text, one string per row."""
    strips = app.screen._compositor.render_strips()
    return ["".join(segment.text for segment in strip) for strip in strips]


def plain(widget: Static) -> str:
    """What a Static shows, as plain text."""
    console = Console(width=200, record=True, color_system=None)
    console.print(widget.content)
    return " ".join(console.export_text().split())


def inside(app: VizApp, selector: str) -> str:
    """The words on screen inside the widget ``selector``, joined: box edges dropped."""
    region = app.screen.query_one(selector).region
    lines = screen_lines(app)[region.y : region.bottom]
    words = []
    for line in lines:
        words += re.sub(r"[│╭╮╰╯─▊▎▔▁▆▇▂▃▄▅]", " ", line[region.x : region.right]).split()
    return " ".join(words)


@ids
def test_the_key_bar_shows_keys_by_priority_and_always_help(
    trace: Trace, size: tuple[int, int]
) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        bar = screen_lines(app)[-1].rstrip()
        assert len(bar) <= size[0]
        assert bar.endswith("? all keys  q quit")
        assert bar.lstrip().startswith("↑↓ select │ s step")  # the node list has the focus
        shown = [key for key, what in KEYS if f"{key} {what}" in bar]
        assert shown == [key for key, _ in KEYS[: len(shown)]], "a key is left out before another"
        assert len(shown) >= {80: 4, 120: 8, 160: 12}[size[0]]

    run_app(app, actions, size=size)


@ids
def test_help_lists_every_key_and_explains_the_marks_above_the_fold(
    trace: Trace, size: tuple[int, int]
) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        visible = inside(app, "#help-body")
        assert "deps (remaining/total) reaches 0" in visible
        for status, (glyph, _) in STATUS_GLYPHS.items():
            assert f"{glyph} {status}" in visible, f"{glyph} {status} is below the fold"
        everything = app.screen.query_one("#help-body")
        text = " ".join(plain(static) for static in everything.query(Static))
        for key, _ in [*KEYS, *ALWAYS]:
            assert key in text
        for binding in VizApp.BINDINGS:
            assert binding.description in text  # type: ignore[union-attr]
        for binding in DagView.BINDINGS:  # Enter and the arrows in the drawn DAG
            assert f"{binding.description} (drawn DAG)" in text  # type: ignore[union-attr]
        for kind in EVENT_KINDS:
            assert kind in text and KIND_MEANINGS[kind] in text
        assert "tab" in text and "enter" in text  # moving the selection with the keyboard

    run_app(app, actions, size=size)


def test_every_status_has_its_own_glyph() -> None:
    glyphs = [glyph for glyph, _ in STATUS_GLYPHS.values()]
    assert len(set(glyphs)) == len(glyphs)


@ids
def test_the_find_prompt_shows_its_whole_title(trace: Trace, size: tuple[int, int]) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("slash")
        await pilot.pause()
        bar = prompt_bar(app)
        assert bar.asking
        assert bar.title_text in inside(app, "#prompt")

    run_app(app, actions, size=size)


@ids
def test_the_event_line_says_what_the_current_step_means(
    trace: Trace, size: tuple[int, int]
) -> None:
    app = replay_app(trace)
    event = next(e for e in trace.events if e.kind == "dependency_decrement")
    data = event.data

    async def actions(pilot: Pilot[Any]) -> None:
        app.driver.goto(event.index + 1)
        app.refresh_view(follow=True)
        await pilot.pause()
        line = screen_lines(app)[-3]
        state = "ready to run" if data["remaining"] == 0 else "still waits"
        expected = (
            f"{data['from_name']} #{data['from_node']} → input {data['input_nr']} of "
            f"{event.node_name} #{event.node_id}; {data['remaining']} left: {state}"
        )
        assert f"{event.index + 1}: {expected}"[: size[0] - 4] in line
        app.driver.goto(0)
        app.refresh_view()
        await pilot.pause()
        assert "nothing has run yet" in screen_lines(app)[-3]

    run_app(app, actions, size=size)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_line_too_long_for_the_screen_ends_in_an_ellipsis(
    trace: Trace, size: tuple[int, int]
) -> None:
    from autograd_viz.tui.app import explain_line

    app = replay_app(trace)
    event = max(trace.events, key=lambda e: len(explain_line(trace, e)))

    async def actions(pilot: Pilot[Any]) -> None:
        app.driver.goto(event.index + 1)
        app.message = "stopped: " + "w" * size[0]  # pushes the rest of the status off the line
        app.output.append((False, "printed\n"))
        app.refresh_view(follow=True)
        await pilot.pause()
        explain, status = (line.rstrip() for line in screen_lines(app)[-3:-1])
        assert status.startswith(f" step {event.index + 1} of {len(trace)}")
        assert status.endswith("…") and len(status) <= size[0]
        sentence = explain_line(trace, event).plain
        if len(sentence) > size[0] - 2:  # the padding
            assert explain.endswith("…") and sentence.startswith(explain[1:-1])
        else:
            assert explain == f" {sentence}"

    run_app(app, actions, size=size)


def test_the_wake_up_enqueue_says_what_it_is(trace: Trace) -> None:
    from autograd_viz.tui.app import explain_line

    wake = [e for e in trace.events if e.kind == "enqueue" and e.node_id is None]
    assert wake, "the demo has a reentrant task, finished by a wake-up"
    text = explain_line(trace, wake[0]).plain
    assert "wake-up" in text and f"graph task {wake[0].graph_task}" in text
    log = EventLog()
    log.show(trace, 0)
    row = log.row_text(wake[0].index).plain
    assert "enqueue" in row
    assert f"wake-up → queue cpu: graph task {wake[0].graph_task} is done" in row


class _Repeated:
    """A sequence of ``count`` copies of one event: a long trace without the recording."""

    def __init__(self, item: Any, count: int) -> None:
        self.item, self.count = item, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> Any:
        return self.item


def test_six_digit_step_numbers_keep_a_space_after_the_cursor(trace: Trace) -> None:
    log = EventLog()
    log.trace = type("T", (), {"events": _Repeated(trace.events[0], 1_234_567)})()  # type: ignore[assignment]
    log.position = 654_321
    current = log.row_text(654_320).plain
    assert current.startswith("▸  654321 ")  # seven digits: 1,234,567 events
    assert log.row_text(0).plain.startswith("        1 ")
    assert log.row_text(1_234_566).plain.startswith("  1234567 ")
