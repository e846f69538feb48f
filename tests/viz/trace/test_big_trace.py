"""A big trace opens fast: progress while the file is read, then only what the screen needs.

Measured on a 400,011-event trace (an 80,000-node chain, 169 MB): reading
takes about 7 s and now shows its progress; the TUI's first screen then
comes in about 0.6 s (it took 5.4 s), because the replay index grows only as
far as the steps asked for, and the loaded objects are frozen out of the
cyclic collector's scans.
"""

from __future__ import annotations

import gc
import io
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

import engine
from autograd_viz.cli import base
from autograd_viz.cli.base import CommandError
from autograd_viz.cli.tui import load_for_replay
from autograd_viz.trace import Trace, file
from autograd_viz.trace.recording import record
from autograd_viz.trace.replay import CHECKPOINT_EVERY
from tests.viz.tui.tuiting import replay_app, run_app


def chain(length: int) -> Trace:
    x = engine.tensor([1.0], requires_grad=True, name="x")
    with record() as trace:
        y = x
        for _ in range(length):
            y = y * 1.0001
        y.sum().backward()
    return trace


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "chain.jsonl"
    chain(400).save(path)
    return path


def test_load_reports_its_progress_in_bytes(saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file, "PROGRESS_EVERY", 100)
    calls: list[tuple[int, int]] = []
    trace = Trace.load(saved, progress=lambda done, size: calls.append((done, size)))
    size = saved.stat().st_size
    assert len(trace.events) > 1000 and len(calls) >= 10
    assert all(total == size for _, total in calls)
    done = [d for d, _ in calls]
    assert done == sorted(done) and done[-1] == size


def test_the_command_line_shows_a_big_files_progress_on_stderr(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file, "PROGRESS_EVERY", 100)
    monkeypatch.setattr(base._LoadProgress, "SHOWN_FROM", 0)
    err = io.StringIO()
    err.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr("sys.stderr", err)
    base.load_trace(str(saved))
    text = err.getvalue()
    assert f"autograd-viz: reading {saved}: " in text and "% of 0 MB" in text
    assert text.endswith("\r\x1b[K")  # the line is cleared before the TUI opens


def test_nothing_is_shown_without_a_terminal(saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    base.load_trace(str(saved))
    assert err.getvalue() == ""


def test_the_first_screen_indexes_only_the_first_steps(saved: Path) -> None:
    trace = Trace.load(saved)
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        replayer = trace._replayer
        assert replayer is not None
        assert replayer.applied <= CHECKPOINT_EVERY < len(trace.events)
        await pilot.press("s", "s")
        assert replayer.applied <= CHECKPOINT_EVERY
        await pilot.press("e")  # the end: now everything is indexed
        assert replayer.applied == len(trace.events)

    run_app(app, actions)


def test_a_lazy_index_gives_the_states_a_full_one_gives(saved: Path) -> None:
    from autograd_viz.trace.replay import Replayer

    trace = Trace.load(saved)
    full = Replayer(Trace(trace.header, trace.graph_tasks, trace.events))
    task = min(trace.graph_tasks)
    for step in (0, 1, 300, 257, len(trace.events), 12):
        lazy = trace.state_at(step)
        expected = full.state_at(step)
        assert lazy.nodes(task) == expected.nodes(task), step
        assert lazy.queues == expected.queues and lazy.leaves == expected.leaves
    assert trace.state_at(5).started_by(task) == full.state_at(5).started_by(task)


@pytest.mark.parametrize("enabled", [True, False])
def test_replay_loads_with_the_collector_off_and_freezes_what_it_loaded(
    saved: Path, monkeypatch: pytest.MonkeyPatch, enabled: bool
) -> None:
    # Note [A replayed trace skips the collector]
    during: list[bool] = []
    load = Trace.load

    def watched(*args: Any, **kwargs: Any) -> Trace:
        during.append(gc.isenabled())
        return load(*args, **kwargs)

    monkeypatch.setattr(Trace, "load", watched)
    (gc.enable if enabled else gc.disable)()
    try:
        trace = load_for_replay(str(saved))
        assert gc.get_freeze_count() > len(trace.events)
        assert during == [False] and gc.isenabled() == enabled
    finally:
        gc.unfreeze()  # the rest of the test session collects as usual
        gc.enable()
    assert Trace.load(saved) == trace


def test_replay_of_a_bad_file_leaves_the_collector_as_it_was(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not a trace\n")
    frozen = gc.get_freeze_count()
    with pytest.raises(CommandError, match="invalid trace file"):
        load_for_replay(str(bad))
    assert gc.isenabled() and gc.get_freeze_count() == frozen
