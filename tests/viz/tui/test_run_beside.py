"""``autograd-viz run`` is ``python SCRIPT`` with the TUI beside it, on a real terminal.

The script runs on the main thread: its signal handlers run, its exit status
and traceback are its own, and ``q`` ends the tool at once even while the
script goes on forever (Note [The program keeps the main thread]).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.viz.tui.terminal import Terminal

FINISHED = "program finished"
PAUSED = "engine paused"
PRINTED = "o: program output"

SCRIPT = """\
import os, signal, sys, time
import engine

def on_term(signum, frame):
    with open(os.environ["FLAG"], "w") as f:
        f.write("handled SIGTERM")
    sys.exit(7)

signal.signal(signal.SIGTERM, on_term)  # raises off the main thread
x = engine.tensor([1.0, 2.0], requires_grad=True)
h = x * x
if sys.argv[1] == "exit-in-hook":
    h.register_hook(lambda grad: sys.exit(3))
h.sum().backward()
print("backward done", flush=True)
if sys.argv[1] == "exit":
    sys.exit(5)
if sys.argv[1] == "raise":
    raise ValueError("boom after backward")
while True:  # an eval loop, a server: it never ends
    time.sleep(0.05)
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    return path


@pytest.fixture
def run(script: Path, tmp_path: Path) -> Iterator[Callable[..., Terminal]]:
    opened: list[Terminal] = []

    def start(*args: str) -> Terminal:
        terminal = Terminal(["run", str(script), *args], env={"FLAG": str(tmp_path / "flag")})
        opened.append(terminal)
        return terminal

    yield start
    for terminal in opened:
        terminal.close()


@pytest.mark.parametrize("key", ["c", "e"])
def test_q_ends_a_script_that_never_ends_within_a_second(
    run: Callable[..., Terminal], key: str
) -> None:
    terminal = run("forever")
    terminal.wait_for(PAUSED)
    terminal.press(key)  # the backward ends; the script runs on, forever
    terminal.wait_for(PRINTED)  # "backward done", which the TUI keeps for `o`
    pressed = time.monotonic()
    terminal.press("q")
    status = terminal.wait()
    took = time.monotonic() - pressed
    assert status == 130
    assert "quit while" in terminal.output and "it was interrupted" in terminal.output
    assert took < 1.0, took


def test_q_while_paused_mid_backward_ends_the_tool(run: Callable[..., Terminal]) -> None:
    terminal = run("forever")
    terminal.wait_for(PAUSED)
    pressed = time.monotonic()
    terminal.press("q")  # the backward is cancelled, and the script interrupted
    assert terminal.wait() == 130
    took = time.monotonic() - pressed
    assert "quit while" in terminal.output and "it was interrupted" in terminal.output
    assert took < 1.0, took


@pytest.mark.parametrize(("mode", "expected"), [("exit", 5), ("exit-in-hook", 3)])
def test_the_exit_status_is_the_scripts(
    run: Callable[..., Terminal], mode: str, expected: int
) -> None:
    terminal = run(mode)
    terminal.wait_for(PAUSED)
    terminal.press("e")
    terminal.wait_for(FINISHED)
    terminal.press("q")
    assert terminal.wait() == expected


def test_a_script_that_raises_shows_its_traceback_and_exits_1(run: Callable[..., Terminal]) -> None:
    terminal = run("raise")
    terminal.wait_for(PAUSED)
    terminal.press("e")
    terminal.wait_for(FINISHED)
    terminal.press("q")
    assert terminal.wait() == 1
    tail = terminal.output.rsplit("\x1b[?1049l", 1)[-1]  # after the TUI left the screen
    assert "Traceback (most recent call last):" in tail
    assert 'script.py", line 19, in <module>' in tail
    assert "ValueError: boom after backward" in tail
    assert "autograd_viz" not in tail  # the script's frames only


def test_the_scripts_sigterm_handler_runs(run: Callable[..., Terminal], tmp_path: Path) -> None:
    terminal = run("forever")
    terminal.wait_for(PAUSED)
    terminal.press("e")
    terminal.wait_for(PRINTED)  # "backward done", which the TUI keeps for `o`
    terminal.process.terminate()  # SIGTERM, as a scheduler preempting a job sends it
    terminal.wait_for(FINISHED)
    assert (tmp_path / "flag").read_text() == "handled SIGTERM"
    terminal.press("q")
    assert terminal.wait() == 7


def test_the_tui_follows_a_resized_terminal_without_sigwinch(run: Callable[..., Terminal]) -> None:
    # SIGWINCH stays the script's (Note [The program keeps the main thread]): the TUI
    # asks the terminal's size instead, and draws on rows it did not have before.
    terminal = run("exit")
    terminal.wait_for(PAUSED)
    assert "\x1b[44;1H" not in terminal.output
    terminal.resize((120, 44))
    terminal.wait_for("\x1b[44;1H", timeout=10)
    terminal.press("q")
    assert terminal.wait() == 130


LOOP = """\
import engine
w = engine.tensor([1.0, 2.0], requires_grad=True)
for step in range(6):
    (w * float(step + 1)).sum().backward()
"""


@pytest.mark.parametrize("quit_early", [False, True])
def test_run_last_keeps_the_last_calls_and_writes_them_at_the_end(
    tmp_path: Path, quit_early: bool
) -> None:
    from autograd_viz.trace import Trace

    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    output = tmp_path / "last.jsonl"
    terminal = Terminal(["run", "--last", "2", "-o", str(output), str(script)])
    try:
        terminal.wait_for(PAUSED)
        if quit_early:  # a few steps into call 0, then quit: what was kept is written
            terminal.press("nn")
            terminal.wait_for("graph task")
        else:
            terminal.press("e")
            terminal.wait_for("keeps the last 2 calls")
            terminal.wait_for(FINISHED)
        terminal.press("q")
        status = terminal.wait()
    finally:
        terminal.close()
    assert status == (130 if quit_early else 0)
    trace = Trace.load(output)
    calls = [info.call for info in trace.graph_tasks.values() if info.parent is None]
    assert calls == ([0] if quit_early else [4, 5])
    tail = terminal.output.rsplit("\x1b[?1049l", 1)[-1]
    saved = "1 backward call saved" if quit_early else "the last 2 backward calls saved"
    assert saved in tail


NAN_LOOP = """\
import numpy as np
import engine
w = engine.tensor([1.0, 2.0], requires_grad=True)
for step in range(10):
    with np.errstate(all="ignore"):
        ((w * (0.0 if step == 5 else 1.0)).log() * w).sum().backward()
print("the loop ran to its end")
"""


def test_run_last_stops_at_the_first_nan_and_writes_its_call_as_record_last_does(
    tmp_path: Path,
) -> None:
    from autograd_viz.trace import Trace

    script = tmp_path / "nan_loop.py"
    script.write_text(NAN_LOOP)
    recorded = tmp_path / "recorded.jsonl"
    Terminal(["record", "--last", "2", "-o", str(recorded), str(script)]).wait()
    output = tmp_path / "last.jsonl"
    terminal = Terminal(["run", "--last", "2", "-o", str(output), str(script)])
    try:
        terminal.wait_for(PAUSED)
        terminal.press("e")  # stops at the NaN, born in call 5's forward
        terminal.wait_for("first NaN/Inf: anomaly LogBackward0")
        terminal.press("e")  # call 5 to its end; then the program runs on, unrecorded
        terminal.wait_for("up to the first NaN/Inf")
        terminal.wait_for(FINISHED)
        terminal.press("q")
        status = terminal.wait()
    finally:
        terminal.close()
    assert status == 0
    calls = [
        [info.call for info in Trace.load(path).graph_tasks.values() if info.parent is None]
        for path in (output, recorded)
    ]
    assert calls == [[4, 5], [4, 5]]
    tail = terminal.output.rsplit("\x1b[?1049l", 1)[-1]
    assert "the loop ran to its end" in tail
    assert "the last 2 backward calls, up to the first NaN or Inf, saved" in tail
