"""A program's ``sys.stdin`` read through the TUI's prompt (Note [The program reads through
the prompt]): the line typed is the program's, Escape hides the question, Ctrl+D ends the
input, and quitting interrupts the read, leaving no thread."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

import engine
from autograd_viz.trace import Trace
from autograd_viz.trace.recording import record
from autograd_viz.tui import VizApp
from autograd_viz.tui.program_input import ProgramInput
from autograd_viz.tui.shown import status_parts
from tests.viz.tui.tuiting import prompt_bar, replay_app, run_app


@pytest.fixture(scope="module")
def trace() -> Trace:
    with record() as trace:
        x = engine.tensor([1.0, 2.0], requires_grad=True)
        (x * x).sum().backward()
    return trace


class Program:
    """A thread that reads ``sys.stdin`` as ``read`` does, and what came of it."""

    def __init__(self, app: VizApp, read: Callable[[ProgramInput], Any]) -> None:
        self.stdin = ProgramInput(app.program_reads, io.StringIO("from the terminal\n"))
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, args=(read,), daemon=True)

    def _main(self, read: Callable[[ProgramInput], Any]) -> None:
        try:
            self.result = read(self.stdin)
        except BaseException as exc:  # noqa: BLE001 - what the program saw
            self.error = exc


async def asked(pilot: Pilot[Any], title: str = "the program reads a line") -> None:
    """Wait until the bar asks the program's question."""
    app = pilot.app
    assert isinstance(app, VizApp)
    bar = prompt_bar(app)
    for _ in range(200):
        if bar.asking and bar.title_text.startswith(title):
            return
        await pilot.pause(0.02)
    raise AssertionError(f"never asked; the bar says {bar.title_text!r}")


async def ended(pilot: Pilot[Any], program: Program) -> None:
    for _ in range(200):
        if not program.thread.is_alive():
            return
        await pilot.pause(0.02)
    raise AssertionError("the program still waits")


def test_the_line_typed_is_the_programs_after_its_prompt(trace: Trace) -> None:
    app = replay_app(trace)

    def read(stdin: ProgramInput) -> str:
        app.program_wrote("your name? ", False)  # input() writes its prompt, then reads
        return stdin.readline()

    program = Program(app, read)

    async def actions(pilot: Pilot[Any]) -> None:
        program.thread.start()
        await asked(pilot, "the program reads a line: your name?")
        assert app.shown is not None
        assert "i: the program reads a line" in status_parts(app.shown)
        await pilot.press("A", "n", "n", "enter")
        await ended(pilot, program)
        assert not prompt_bar(app).asking

    run_app(app, actions)
    assert program.result == "Ann\n"
    assert app.capture.text() == "your name? Ann\n"  # echoed, as a terminal does


def test_escape_hides_the_question_and_i_asks_it_again(trace: Trace) -> None:
    app = replay_app(trace)
    program = Program(app, lambda stdin: stdin.readline())

    async def actions(pilot: Pilot[Any]) -> None:
        program.thread.start()
        await asked(pilot)
        await pilot.press("escape")
        assert not prompt_bar(app).asking and program.thread.is_alive()
        await pilot.press("s")  # the app's keys work meanwhile
        assert app.driver.position == 1
        await pilot.press("i")
        await asked(pilot)
        await pilot.press("enter")  # an empty line is an answer
        await ended(pilot, program)

    run_app(app, actions)
    assert program.result == "\n"


def test_ctrl_d_ends_the_input(trace: Trace) -> None:
    app = replay_app(trace)
    program = Program(app, lambda stdin: [line for line in stdin])

    async def actions(pilot: Pilot[Any]) -> None:
        program.thread.start()
        await asked(pilot)
        await pilot.press("o", "n", "e", "enter")
        await asked(pilot)
        await pilot.press("ctrl+d")
        await ended(pilot, program)

    run_app(app, actions)
    assert program.result == ["one\n"]


def test_getpass_is_asked_with_its_prompt_and_typed_unseen(trace: Trace) -> None:
    app = replay_app(trace)
    program = Program(app, lambda stdin: stdin.getpass("token: "))

    async def actions(pilot: Pilot[Any]) -> None:
        program.thread.start()
        await asked(pilot, "the program reads a password: token:")
        assert app.query_one("#prompt-input", Input).password
        await pilot.press("x", "y", "enter")
        await ended(pilot, program)

    run_app(app, actions)
    assert program.result == "xy"
    assert app.capture.text() == ""  # not echoed into the program's output


def test_getpass_at_ctrl_d_raises_eoferror(trace: Trace) -> None:
    app = replay_app(trace)
    program = Program(app, lambda stdin: stdin.getpass())

    async def actions(pilot: Pilot[Any]) -> None:
        program.thread.start()
        await asked(pilot, "the program reads a password: Password:")
        await pilot.press("ctrl+d")
        await ended(pilot, program)

    run_app(app, actions)
    assert isinstance(program.error, EOFError)


@pytest.mark.parametrize("keys", [("ctrl+c",), ("ctrl+q",), ("escape", "q")])
def test_quitting_interrupts_the_read_and_leaves_no_thread(
    trace: Trace, keys: tuple[str, ...]
) -> None:
    app = replay_app(trace)
    program = Program(app, lambda stdin: stdin.readline())

    async def actions(pilot: Pilot[Any]) -> None:
        program.thread.start()
        await asked(pilot)
        await pilot.press(*keys)

    run_app(app, actions)
    program.thread.join(10)
    assert not program.thread.is_alive()
    assert isinstance(program.error, KeyboardInterrupt)
    assert not app.is_running


def test_once_the_tui_has_ended_reads_go_to_the_terminal(trace: Trace) -> None:
    app = replay_app(trace)
    stdin = ProgramInput(app.program_reads, io.StringIO("from the terminal\n"))
    stdin.tui_ended()
    assert stdin.readline() == "from the terminal\n"
    assert stdin.readline() == ""
    assert stdin.fileno() == 0 and stdin.isatty()
