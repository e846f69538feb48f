"""``autograd-viz run`` gives the script its streams as ``python`` would, on a real terminal.

Children started with ``spawn`` run, a ``fork`` child's prints show, ``input()``
asks in the TUI and can be answered or quit, and SIGTERM leaves the terminal
as it found it (Notes [The program writes to a terminal of its own], [The
program reads through the prompt] and [A signal ends the TUI first]).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.viz.tui.terminal import Terminal

FINISHED = "program finished"
PAUSED = "engine paused"
ASKED = "the program reads a line: your name?"
ALTERNATE_ON, ALTERNATE_OFF = "\x1b[?1049h", "\x1b[?1049l"

BACKWARD = """\
import engine
x = engine.tensor([1.0, 2.0], requires_grad=True)
(x * x).sum().backward()
"""

SPAWN = (
    BACKWARD
    + """\
import multiprocessing as mp

def child(queue):
    print("spawn child prints", flush=True)
    queue.put(42)

if __name__ == "__main__":
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    print("parent got", queue.get(timeout=60))
    process.join()
    print("child exit", process.exitcode)
"""
)

FORK = (
    BACKWARD
    + """\
import os, sys
pid = os.fork()
if pid == 0:
    print("fork child prints", flush=True)
    print("fork child warns", file=sys.stderr, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent after the child")
"""
)

INPUT = (
    BACKWARD
    + """\
import sys
try:
    name = input("your name? ")
except EOFError:
    print("end of input")
    sys.exit(4)
print(f"hello {name}!")
"""
)

GETPASS = (
    BACKWARD
    + """\
import getpass, subprocess
subprocess.run(["echo", "a subprocess prints"])
cat = subprocess.run(["cat"], capture_output=True, text=True, timeout=30)
print("cat read", repr(cat.stdout))
token = getpass.getpass("token: ")
print("token of", len(token), "characters")
"""
)

SWAPS_STDOUT = (
    BACKWARD
    + """\
import io, sys
print("printed before the swap", flush=True)
sys.stdout = io.StringIO()  # a script that captures its own prints from here on
print("into the script's own string")
"""
)

FOREVER = (
    BACKWARD
    + """\
import time
print("looping", flush=True)
try:
    while True:
        time.sleep(0.05)
finally:
    print("finally ran")
"""
)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Callable[..., Terminal]]:
    opened: list[Terminal] = []

    def start(source: str, *args: str) -> Terminal:
        script = tmp_path / "script.py"
        script.write_text(source)
        terminal = Terminal(["run", *args, str(script)])
        opened.append(terminal)
        return terminal

    yield start
    for terminal in opened:
        terminal.close()


def after_tui(terminal: Terminal) -> str:
    """What was written once the TUI left the alternate screen."""
    output = terminal.output
    assert ALTERNATE_OFF in output, output[-800:]
    return output.rsplit(ALTERNATE_OFF, 1)[-1]


def to_end(terminal: Terminal) -> None:
    terminal.wait_for(PAUSED, timeout=60)
    terminal.press("e")


def test_a_spawn_child_runs_and_its_prints_show(run: Callable[..., Terminal]) -> None:
    terminal = run(SPAWN)
    to_end(terminal)
    terminal.wait_for(FINISHED, timeout=120)
    terminal.press("o")
    terminal.wait_for("spawn child prints")  # in the output panel, while the TUI is up
    terminal.press("o")  # closes the panel
    terminal.press("q")
    assert terminal.wait(60) == 0
    tail = after_tui(terminal)
    assert "fds_to_keep" not in terminal.output
    assert "spawn child prints" in tail
    assert "parent got 42" in tail and "child exit 0" in tail


def test_a_fork_childs_prints_show(run: Callable[..., Terminal]) -> None:
    terminal = run(FORK)
    to_end(terminal)
    terminal.wait_for(FINISHED)
    terminal.press("o")
    terminal.wait_for("fork child prints")
    terminal.wait_for("fork child warns")  # stderr too
    terminal.press("o")  # closes the panel
    terminal.press("q")
    assert terminal.wait() == 0
    tail = after_tui(terminal)
    assert "fork child prints" in tail and "fork child warns" in tail
    assert tail.index("fork child prints") < tail.index("parent after the child")


def test_with_stderr_in_a_file_the_tui_draws_on_the_terminal_and_stderr_goes_to_the_file(
    tmp_path: Path,
) -> None:
    script = tmp_path / "script.py"
    script.write_text(FORK)
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        terminal = Terminal(["run", str(script)], stderr=stderr.fileno())
    try:
        to_end(terminal)
        terminal.wait_for(FINISHED)
        terminal.press("q")
        assert terminal.wait() == 0
    finally:
        terminal.close()
    assert "fork child prints" in after_tui(terminal)
    assert "fork child warns" not in terminal.output
    written = log.read_text()
    assert "fork child warns" in written
    assert "\x1b[" not in written  # nothing of the TUI's drawing


def test_input_asks_in_the_tui_and_gets_the_line(run: Callable[..., Terminal]) -> None:
    terminal = run(INPUT)
    to_end(terminal)
    terminal.wait_for(ASKED)
    terminal.press("Bob\r")
    terminal.wait_for(FINISHED)
    terminal.press("q")
    assert terminal.wait() == 0
    tail = after_tui(terminal)
    assert "your name? Bob\n" in tail.replace("\r\n", "\n")  # echoed, as a terminal does
    assert "hello Bob!" in tail


def test_getpass_asks_in_the_tui_unseen_and_subprocesses_keep_off_the_keys(
    run: Callable[..., Terminal],
) -> None:
    terminal = run(GETPASS)
    to_end(terminal)
    terminal.wait_for("the program reads a password: token:")
    terminal.press("s3cr3t\r")
    terminal.wait_for(FINISHED)
    terminal.press("q")
    assert terminal.wait() == 0
    assert "s3cr3t" not in terminal.output  # neither drawn nor echoed
    tail = after_tui(terminal)
    assert "a subprocess prints" in tail
    assert "cat read ''" in tail  # its stdin is empty, not the TUI's keys
    assert "token of 6 characters" in tail


def test_what_was_printed_reaches_the_terminal_whatever_sys_stdout_became(
    run: Callable[..., Terminal],
) -> None:
    terminal = run(SWAPS_STDOUT)
    to_end(terminal)
    terminal.wait_for(FINISHED)
    terminal.press("q")
    assert terminal.wait() == 0
    tail = after_tui(terminal)
    assert "printed before the swap" in tail
    assert "into the script's own string" not in terminal.output


def test_input_before_any_backward_call_is_asked_as_the_tui_opens(
    run: Callable[..., Terminal],
) -> None:
    terminal = run(
        'steps = int(input("how many steps? "))\n'
        + BACKWARD.replace("(x * x)", "for _ in range(steps):\n    (x * x)")
        + 'print("ran", steps, "steps")\n'
    )
    terminal.wait_for("the program reads a line: how many steps?", timeout=60)
    terminal.press("2\r")
    to_end(terminal)
    terminal.wait_for(FINISHED)
    terminal.press("q")
    assert terminal.wait() == 0
    tail = after_tui(terminal)
    assert "how many steps? 2" in tail and "ran 2 steps" in tail


def test_an_empty_line_is_an_answer_and_ctrl_d_ends_the_input(
    run: Callable[..., Terminal],
) -> None:
    terminal = run(INPUT)
    to_end(terminal)
    terminal.wait_for(ASKED)
    terminal.press("\x04")  # Ctrl+D: input() raises EOFError in the script
    terminal.wait_for(FINISHED)
    terminal.press("q")
    assert terminal.wait() == 4
    assert "end of input" in after_tui(terminal)

    again = run(INPUT)
    to_end(again)
    again.wait_for(ASKED)
    again.press("\r")
    again.wait_for(FINISHED)
    again.press("q")
    assert again.wait() == 0
    assert "hello !" in after_tui(again)


@pytest.mark.parametrize("keys", ["\x03", "\x11", "escape q"], ids=["ctrl-c", "ctrl-q", "q"])
def test_quitting_while_the_script_reads_interrupts_it(
    run: Callable[..., Terminal], keys: str
) -> None:
    terminal = run(INPUT)
    to_end(terminal)
    terminal.wait_for(ASKED)
    if keys == "escape q":
        terminal.press("\x1b")  # hides the bar; the script still waits for its line
        time.sleep(0.5)  # a lone Escape, not the start of Alt+q
        terminal.press("q")
    else:
        terminal.press(keys)
    assert terminal.wait(30) == 130
    tail = after_tui(terminal)
    assert "quit while" in tail and "it was interrupted" in tail
    assert "hello" not in tail


@pytest.mark.parametrize(
    ("when", "signum"),
    [
        ("paused", signal.SIGTERM),
        ("running", signal.SIGTERM),
        ("finished", signal.SIGTERM),
        ("paused", signal.SIGHUP),
    ],
)
def test_a_signal_gives_the_terminal_back_and_ends_the_tool_by_it(
    run: Callable[..., Terminal], tmp_path: Path, when: str, signum: int
) -> None:
    output = tmp_path / "kept.jsonl"
    terminal = run(BACKWARD if when == "finished" else FOREVER, "-o", str(output))
    terminal.wait_for(PAUSED, timeout=60)
    if when != "paused":
        terminal.press("e")
        terminal.wait_for(FINISHED if when == "finished" else "o: program output")
    terminal.process.send_signal(signum)
    assert terminal.wait(30) == -signum
    screen = terminal.output
    assert screen.count(ALTERNATE_ON) == 1
    assert screen.rindex(ALTERNATE_OFF) > screen.rindex(ALTERNATE_ON)  # screen left
    tail = after_tui(terminal)
    assert "\x1b[?25h" in screen.rsplit(ALTERNATE_ON, 1)[-1]  # the cursor shown again
    assert "backward call saved to" in tail
    if when == "running":
        assert "looping" in tail and "finally ran" in tail  # the script unwound

    from autograd_viz.trace import Trace

    assert Trace.load(output).graph_tasks


@pytest.mark.slow
def test_the_ddp_example_runs_its_spawned_ranks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from tests.viz.tui.terminal import ROOT

    terminal = Terminal(["run", str(ROOT / "examples" / "torch_ddp.py")])
    try:
        terminal.wait_for(FINISHED, timeout=300)  # the parent makes no backward call itself
        terminal.press("q")
        assert terminal.wait(60) == 0
        tail = after_tui(terminal)
    finally:
        terminal.close()
    assert "fds_to_keep" not in terminal.output
    for rank in (0, 1):
        assert f"rank {rank} step 2: loss" in tail
