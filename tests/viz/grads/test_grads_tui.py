"""The TUI on a trace recorded with ``grads -o``: the inspector on a leaf says why it got no
gradient, the root's lists the parameters off the graph, and the call picker shows each
call's gradient norm per module (Note [Gradient findings in a trace])."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from grads_programs import marked_line, write
from textual.pilot import Pilot
from textual.widgets import OptionList

from autograd_viz.cli.main import main
from autograd_viz.grads.recorded import call_grads, norm_text
from autograd_viz.trace import Trace
from autograd_viz.tui.call_picker import call_figures, task_choices
from autograd_viz.tui.screens import TaskPicker
from tests.viz.tui.tuiting import find_in_tree, inspector, node_list, replay_app, run_app

pytestmark = pytest.mark.oracle

SIZE = (120, 40)


@pytest.fixture
def recorded(torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Trace]:
    script = write(tmp_path, "all")
    path = tmp_path / "all.jsonl"
    assert main(["grads", "-o", str(path), str(script), "-"]) == 1
    capsys.readouterr()
    return script, Trace.load(path)


def test_the_inspector_says_why_a_leaf_got_no_gradient(recorded: tuple[Path, Trace]) -> None:
    script, trace = recorded
    app = replay_app(trace)
    seen: dict[str, str] = {}

    async def actions(pilot: Pilot[Any]) -> None:
        for query in ("dead.weight", "head.weight", "MeanBackward0"):
            assert await find_in_tree(pilot, query) is not None
            seen[query] = inspector(app)

    run_app(app, actions, size=SIZE)
    dead = seen["dead.weight"]
    assert "leaf dead.weight" in dead
    assert "✗ gradient all zeros" in dead and "ReluBackward0" in dead
    assert f"{script.name}:{marked_line(script, 'zeros')}" in dead
    assert "no gradient" not in seen["head.weight"] and "all zeros" not in seen["head.weight"]
    root = seen["MeanBackward0"]
    assert "no gradient, off this graph" in root
    assert "cutter.weight: ✗ no gradient: cut" in root
    assert f"{script.name}:{marked_line(script, 'cut')}" in root
    assert "teacher.weight: ✗ no gradient: used without grad" in root


def test_a_trace_without_findings_says_nothing_of_them(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plain.jsonl"
    assert main(["record", "-o", str(path), str(write(tmp_path, "all")), "-"]) == 0
    capsys.readouterr()
    app = replay_app(Trace.load(path))
    seen: list[str] = []

    async def actions(pilot: Pilot[Any]) -> None:
        for query in ("dead.weight", "MeanBackward0"):
            assert await find_in_tree(pilot, query) is not None
            seen.append(inspector(app))

    run_app(app, actions, size=SIZE)
    assert not any("no gradient" in text or "all zeros" in text for text in seen)


def _picker_rows(app: Any) -> list[str]:
    options = app.screen.query_one(OptionList)
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


def test_the_call_picker_shows_each_calls_gradient_per_module(
    recorded: tuple[Path, Trace],
) -> None:
    _, trace = recorded
    app = replay_app(trace)
    rows: list[str] = []

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("t")
        assert isinstance(app.screen, TaskPicker)
        rows.extend(_picker_rows(app))

    run_app(app, actions, size=SIZE)
    calls = rows[1:]
    assert [row.split(":")[0][2:] for row in calls] == ["call 0", "call 1", "call 2"]
    last = figures_of(trace)[-1]
    for row in calls:
        # 9 trainable parameters got none; dead's gradient is zeros: flagged vanishing.
        assert "9 without gradient" in row and "1 vanishing" in row
        assert "‖g‖ by module: head " in row and "dead 0" in row
    head = dict(last.modules)["head"]
    assert f"head {head:.2g}" in calls[-1]
    assert last.modules[0][0] == "head"  # largest first
    assert ("dead", "vanishing") in last.flagged


def test_without_findings_the_picker_takes_module_norms_from_the_leaves(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plain.jsonl"
    assert main(["record", "-o", str(path), str(write(tmp_path, "all")), "-"]) == 0
    capsys.readouterr()
    trace = Trace.load(path)
    _, rows = task_choices(trace)
    last = figures_of(trace)[-1]
    assert last.missing == 0 and last.flagged == ()
    norms = dict(last.modules)
    assert set(norms) >= {"head", "backbone", "dead"} and norms["dead"] == 0
    assert "without gradient" not in rows[-1][1] and "‖g‖ by module: head" in rows[-1][1]


def figures_of(trace: Trace) -> list[Any]:
    return list(call_figures(trace).values())


def test_the_tree_view_shows_each_modules_gradient_norm(recorded: tuple[Path, Trace]) -> None:
    _, trace = recorded
    app = replay_app(trace)
    lines: list[str] = []
    shown: list[int] = []

    async def actions(pilot: Pilot[Any]) -> None:
        assert await find_in_tree(pilot, "head.weight") is not None
        nodes = node_list(app)
        assert nodes.shown_task is not None
        shown.append(nodes.shown_task.id)
        lines.extend(nodes.row_text(i).plain for i in range(len(nodes.rows)))

    run_app(app, actions, size=SIZE)
    found = call_grads(trace, shown[0])
    assert found is not None
    flow = {row.module: row for row in found.flow}
    (head,) = [line for line in lines if "▾ head" in line or "▸ head" in line]
    assert f"‖g‖ {norm_text(flow['head'].grad_norm)}" in head
    (dead,) = [line for line in lines if "▾ dead" in line or "▸ dead" in line]
    assert "‖g‖ 0.0e+00 vanishing" in dead
    (frozen,) = [line for line in lines if "▾ frozen" in line or "▸ frozen" in line]
    assert "‖g‖" not in frozen  # frozen: no gradient, so no norm


def test_run_why_shows_the_findings_live(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``autograd-viz run --why SCRIPT``: the live session records each call's findings, so
    the inspector on the loss's node says which parameters got no gradient and why."""
    from autograd_viz.cli import tui as tui_commands
    from autograd_viz.tui import VizApp
    from autograd_viz.tui.driver import LiveDriver
    from tests.viz.tui.tuiting import settle

    script = write(tmp_path, "all")
    seen: dict[str, Any] = {}

    def headless(attached: LiveDriver, source: str, output: str | None = None, **_: object) -> int:
        driver = LiveDriver(attached.session)
        app = VizApp(driver, source=source)

        async def actions(pilot: Pilot[Any]) -> None:
            await settle(pilot)
            await pilot.press("e")  # to the end of the program: every call and its findings
            await settle(pilot)
            seen["kinds"] = {e.kind for e in driver.trace.events}
            assert await find_in_tree(pilot, "MeanBackward0") is not None
            seen["root"] = inspector(app)
            await pilot.press("q")

        run_app(app, actions, size=SIZE)
        return 0

    monkeypatch.setattr(tui_commands, "has_terminal", lambda: True)
    monkeypatch.setattr(tui_commands, "run_beside", headless)
    assert main(["run", "--why", str(script), "-"]) == 0
    assert "grads" in seen["kinds"]
    root = seen["root"]
    assert "cutter.weight: ✗ no gradient: cut" in root
    assert f"{script.name}:{marked_line(script, 'cut')}" in root
