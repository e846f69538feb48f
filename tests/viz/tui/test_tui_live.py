"""The TUI live: on a script, on the demo, quitting mid-backward, and from the command line."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

import autograd_viz
import engine
from autograd_viz.cli.demo_program import demo_program
from autograd_viz.cli.main import main
from autograd_viz.live import LiveSession, SessionCancelled
from autograd_viz.tui import LiveDriver, ReplayDriver, VizApp
from autograd_viz.tui.screens import TextScreen
from tests.viz.tui.tuiting import (
    engine_panel,
    event_log,
    inspector,
    node_list,
    run_app,
    settle,
    status,
)

RUN_KINDS = {"node_start", "node_end", "accumulate", "graph_task_end"}
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def engine_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("autograd")}


def test_live_on_a_script_steps_and_runs_to_its_end() -> None:
    script = EXAMPLES / "two_devices.py"
    driver = LiveDriver(LiveSession(script))
    app = VizApp(driver, source=str(script))

    async def actions(pilot: Pilot[Any]) -> None:
        await settle(pilot)  # the app lets the first event through on its own
        assert driver.position == 1
        assert "live · engine paused" in status(app)
        for _ in range(3):
            await pilot.press("n")
            await settle(pilot)
        event = driver.trace.events[driver.position - 1]
        assert event.kind == "node_start"
        assert node_list(app).selected == event.node_id
        assert f"{event.node_name} #{event.node_id}" in inspector(app)
        await pilot.press("p")  # back over what was recorded, without the engine
        assert driver.position == driver.recorded - 1
        await pilot.press("e")
        await settle(pilot)
        assert driver.finished
        assert "program finished" in status(app)
        await pilot.press("r")  # back to step 0 of a program that has ended
        assert driver.position == 0 and "engine paused" not in status(app)
        assert "program finished · replaying" in status(app)
        await pilot.press("z")  # zoomed in, the status bar still says where we are
        assert app.screen.maximized is not None
        assert app.query_one("#status").region.height == 1
        assert status(app).startswith(f"step 0 of {driver.recorded}")
        await pilot.press("z")
        devices = {e.device for e in driver.trace.events}
        assert {"cpu", "sim:0", "sim:1"} <= devices
        printed = "".join(text for _, text in app.output)
        assert "x.grad =" in printed  # the script's prints are kept, not drawn over the screen
        assert "o: program output" in status(app)
        await pilot.press("o")
        assert isinstance(app.screen, TextScreen)
        assert "x.grad =" in app.screen.text
        await pilot.press("escape")

    run_app(app, actions)
    assert driver.session.error is None
    assert driver.session.result == 0


def test_live_matches_a_recording_of_the_same_program() -> None:
    driver = LiveDriver(LiveSession(demo_program))
    app = VizApp(driver, source="demo")

    async def actions(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)

    run_app(app, actions)
    with autograd_viz.record() as recorded:
        demo_program()
    live = driver.trace
    assert [len(t.nodes) for t in live.graph_tasks.values()] == [
        len(t.nodes) for t in recorded.graph_tasks.values()
    ]

    def runs(trace: Any) -> list[tuple[str, str | None]]:
        return sorted((e.kind, e.node_name) for e in trace.events if e.kind in RUN_KINDS)

    # Wake-up enqueues depend on timing; which nodes ran and what they wrote do not.
    assert runs(live) == runs(recorded)


def test_quitting_mid_backward_cancels_it_and_leaves_no_thread() -> None:
    before = engine_threads()
    driver = LiveDriver(LiveSession(demo_program))
    app = VizApp(driver, source="demo")

    async def actions(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        for _ in range(12):  # into the two-device part: worker threads are paused at the gate
            await pilot.press("n")
            await settle(pilot)
        assert not driver.finished
        await pilot.press("q")

    run_app(app, actions)
    session = driver.session
    assert isinstance(session.error, SessionCancelled)
    deadline = time.monotonic() + 10
    while engine_threads() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine_threads() - before == set()
    assert not any(t.name == "autograd-viz-live" for t in threading.enumerate())
    # The engine is usable afterwards.
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    (x.to("sim:0") * 3.0).sum().backward()
    assert x.grad is not None and x.grad.tolist() == [3.0, 3.0]


def repeated_backward(length: int, calls: int) -> Callable[[], None]:
    """A program that runs backward ``calls`` times through a chain of ``length`` nodes."""

    def program() -> None:
        x = engine.tensor([1.0], requires_grad=True)
        y = x
        for _ in range(length):
            y = y * 1.0
        for _ in range(calls):
            y.sum().backward(retain_graph=True)

    return program


def test_quitting_while_continue_runs_returns() -> None:
    driver = LiveDriver(LiveSession(repeated_backward(3000, 50)))
    app = VizApp(driver, source="slow")

    async def actions(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("c")  # no breakpoint: runs freely in the worker
        await pilot.pause(0.05)
        await pilot.press("q")

    started = time.monotonic()
    run_app(app, actions)
    assert time.monotonic() - started < 30  # generous: the point is that it returns at all
    assert driver.session.finished


def gated_backward(entered: threading.Event, gate: threading.Event) -> Callable[[], None]:
    """A program whose first backward waits in a hook, halfway, until ``gate`` is set."""

    def program() -> None:
        x = engine.tensor([1.0], requires_grad=True)
        y = x
        for i in range(200):
            y = y * 1.0
            if i == 100:

                def wait(grad: engine.Tensor) -> None:
                    entered.set()
                    gate.wait(30)

                y.register_hook(wait)
        for _ in range(3):
            y.sum().backward(retain_graph=True)

    return program


def test_pause_stops_a_free_run_and_stepping_goes_on() -> None:
    # The engine waits in a hook until the pause is asked for, so the run cannot
    # finish first however fast the machine is.
    entered, gate = threading.Event(), threading.Event()
    driver = LiveDriver(LiveSession(gated_backward(entered, gate)))
    app = VizApp(driver, source="long run")

    async def actions(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("c")
        for _ in range(200):
            if entered.is_set():
                break
            await pilot.pause(0.05)
        assert entered.is_set() and app.busy and "x pauses" in status(app)
        await pilot.press("x")
        gate.set()
        await settle(pilot)
        assert not driver.finished
        assert "live · engine paused" in status(app)
        paused_at = driver.position
        assert paused_at == driver.recorded > 1
        await pilot.press("s")
        await settle(pilot)
        assert driver.position == paused_at + 1
        await pilot.press("x")  # nothing running: says so
        assert "nothing is running" in status(app)
        await pilot.press("e")
        await settle(pilot)
        assert driver.finished

    try:
        run_app(app, actions)
    finally:
        gate.set()  # never leave the engine waiting
    assert driver.session.error is None


def test_a_live_breakpoint_stops_the_engine_there() -> None:
    driver = LiveDriver(LiveSession(demo_program))
    app = VizApp(driver, source="demo")

    async def actions(pilot: Pilot[Any]) -> None:
        await settle(pilot)  # graph_task_start: every node is known
        task = driver.trace.graph_tasks[min(driver.trace.graph_tasks)]
        target = next(n for n in task.nodes.values() if n.name == "CheckpointedLayerBackward")
        assert node_list(app).select(target.id)
        await pilot.press("b", "c")
        await settle(pilot)
        event = driver.trace.events[driver.position - 1]
        assert (event.kind, event.node_id) == ("node_start", target.id)
        assert driver.position == driver.recorded  # the engine stopped right there
        for _ in range(40):  # on until the checkpoint's backward starts its own graph task
            if len(driver.trace.graph_tasks) == 2:
                break
            await pilot.press("n")
            await settle(pilot)
        depths = [t.reentrant_depth for t in driver.trace.graph_tasks.values()]
        assert depths == [0, 1]

    run_app(app, actions)


def test_without_a_terminal_run_prints_and_replay_says_what_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = EXAMPLES / "two_devices.py"
    assert main(["run", str(script)]) == 0
    out, err = capsys.readouterr()
    assert "not a terminal: printing each backward call" in err
    assert "── backward call 0 · graph task" in out
    trace = tmp_path / "t.jsonl"
    with autograd_viz.record() as recorded:
        demo_program()
    recorded.save(trace)
    assert main(["replay", str(trace)]) == 3
    assert "the TUI needs a terminal" in capsys.readouterr().err


def test_run_and_replay_reject_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run"]) == 2
    assert "missing SCRIPT" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "nope.py")]) == 3
    assert "nope.py" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not a trace\n")
    assert main(["replay", str(bad)]) == 3
    assert "invalid trace file" in capsys.readouterr().err


def test_demo_without_a_terminal_prints_the_walkthrough(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    captured = capsys.readouterr()
    assert "not a terminal" in captured.err
    assert "W_h.grad created" in captured.out


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
def test_demo_in_a_terminal_opens_the_tui_and_quits(tmp_path: Path) -> None:
    import pty
    import select

    pid, fd = pty.fork()
    if pid == 0:  # the child: the real command, in a real (pseudo) terminal
        os.environ.update(TERM="xterm-256color", COLUMNS="100", LINES="30")
        os.execv(sys.executable, [sys.executable, "-m", "autograd_viz", "demo"])
    output = bytearray()

    def read_for(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    output.extend(os.read(fd, 65536))
                except OSError:
                    return

    read_for(8)
    os.write(fd, b"n")
    read_for(1)
    os.write(fd, b"q")
    deadline = time.monotonic() + 15
    status_code = None
    while time.monotonic() < deadline:
        read_for(0.2)
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status_code = code
            break
    if status_code is None:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    os.close(fd)
    text = output.decode("utf-8", "replace")
    assert status_code == 0, text[-2000:]
    assert "graph task 1" in text
    assert "Traceback" not in text


def test_the_programs_thread_has_one_name_live_and_replayed() -> None:
    """``main``: not ``program`` live, ``MainThread`` recorded, nor the live session's own."""
    from autograd_viz.tui.panels import short_thread

    def shown_names(app: VizApp) -> str:
        return " ".join(
            [
                engine_panel(app),
                inspector(app),
                *(event_log(app).row_text(i).plain for i in range(app.driver.position)),
            ]
        )

    seen: list[str] = []

    async def look(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, VizApp)
        await settle(pilot)
        for _ in range(3):
            await pilot.press("n")
            await settle(pilot)
        seen.append(shown_names(app))

    live = LiveDriver(LiveSession(demo_program))
    run_app(VizApp(live, source="demo"), look)
    with autograd_viz.record() as recorded:
        demo_program()
    run_app(VizApp(ReplayDriver(recorded), source="trace"), look)
    assert {e.thread for e in recorded.events} & {"MainThread"}
    for text in seen:
        assert " main " in f" {text} " and "on main" in text
        for other in ("MainThread", "autograd-viz-live", "program "):
            assert other not in text
    assert short_thread("MainThread") == short_thread("autograd-viz-live") == "main"


def test_two_threads_printing_at_once_keep_their_lines_whole() -> None:
    def program() -> None:
        def chatter(name: str) -> None:
            for k in range(300):
                print("thread", name, "line", k)

        threads = [threading.Thread(target=chatter, args=(str(i),)) for i in range(2)]
        for thread in threads:
            thread.start()
        x = engine.tensor([1.0, 2.0], requires_grad=True)
        (x * x).sum().backward()
        for thread in threads:
            thread.join()
        sys.stdout.write("and a last word, with no newline")

    driver = LiveDriver(LiveSession(program))
    app = VizApp(driver, source="printing")

    async def actions(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("e")
        await settle(pilot)

    run_app(app, actions)
    printed = "".join(text for _, text in app.output)
    lines = printed.split("\n")
    assert lines[-1] == "and a last word, with no newline"
    body = lines[:-1]
    assert len(body) == 600
    assert all(re.fullmatch(r"thread [01] line \d+", line) for line in body), [
        line for line in body if not re.fullmatch(r"thread [01] line \d+", line)
    ][:3]
