"""``/`` and ``d`` take what is typed as typed, spaces included; a stray space is dropped
only where the text as typed finds nothing or cannot be written.

``nn.ModuleDict`` takes a key of spaces, or one that starts with a space, and a
program names its tensors as it likes: such a name is found by typing it as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from textual.pilot import Pilot

import autograd_viz
import engine
from autograd_viz.trace import GraphTaskInfo, Trace
from autograd_viz.tui.search import matches
from tests.viz.tui.tuiting import (
    export_via_prompt,
    find_in_tree,
    node_list,
    prompt_bar,
    replay_app,
    run_app,
    status,
)


def padded() -> None:
    """Modules called ``" "``, ``" a"`` and ``"a"`` in turn, and leaves named ``" w"``, ``"w"``,
    ``"x²"`` and one holding ESC."""
    w = engine.tensor(np.ones(3), requires_grad=True, name=" w")
    v = engine.tensor(np.ones(3), requires_grad=True, name="w")
    u = engine.tensor(np.ones(3), requires_grad=True, name="x²")
    e = engine.tensor(np.ones(3), requires_grad=True, name="esc\x1b[1m")
    with engine.scope(" ", "Block"):
        y = (w * 2.0).tanh()
    with engine.scope(" a", "Block"):
        y = (y * v).exp()
    with engine.scope("a", "Block"):
        y = (y * u * e).sin()
    y.sum().backward()


@pytest.fixture(scope="module")
def trace() -> Trace:
    with autograd_viz.record() as recorded:
        padded()
    return recorded


def notices(app: Any) -> list[str]:
    return [str(n.message) for n in app._notifications]


def the_task(trace: Trace) -> GraphTaskInfo:
    return next(iter(trace.graph_tasks.values()))


def in_module(task: GraphTaskInfo, node_id: int | None, path: str) -> bool:
    assert node_id is not None
    return any(p == path for p, _ in task.nodes[node_id].scope)


@pytest.mark.parametrize("path", [" ", " a", "a"])
def test_a_module_is_found_by_its_name_as_typed(trace: Trace, path: str) -> None:
    task = the_task(trace)
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        selected = await find_in_tree(pilot, path)
        assert in_module(task, selected, path), task.nodes[selected or 0].scope
        others = {" ", " a", "a"} - {path}
        assert not any(in_module(task, selected, other) for other in others)
        shown = f"module '{path}'" if path != path.strip() else f"module {path}"
        assert f"{shown}: " in status(app), status(app)

    run_app(app, actions, size=(120, 40))


@pytest.mark.parametrize(("typed", "path"), [("a ", "a"), ("  a  ", "a")])
def test_a_stray_space_around_an_ordinary_name_is_dropped(
    trace: Trace, typed: str, path: str
) -> None:
    task = the_task(trace)
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        selected = await find_in_tree(pilot, typed)
        assert in_module(task, selected, path)
        assert not in_module(task, selected, " a")
        assert f"module {path}: " in status(app), status(app)

    run_app(app, actions, size=(120, 40))


@pytest.mark.parametrize(("typed", "leaf"), [(" w", " w"), ("w", "w"), ("w ", "w")])
def test_a_parameter_is_found_by_its_name_as_typed(trace: Trace, typed: str, leaf: str) -> None:
    task = the_task(trace)
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        selected = await find_in_tree(pilot, typed)
        assert selected is not None
        found = task.nodes[selected].leaf
        assert found is not None and found.name == leaf

    run_app(app, actions, size=(120, 40))


def test_spaces_alone_find_the_module_named_so_and_an_empty_prompt_finds_nothing(
    trace: Trace,
) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        before = node_list(app).selected
        await pilot.press("slash", "enter")
        await pilot.pause()
        assert not prompt_bar(app).display
        assert node_list(app).selected == before and app.finder.query is None
        await pilot.press("slash", "space", "space", "enter")  # no module is called "  "
        await pilot.pause()
        assert node_list(app).selected == before, status(app)
        assert notices(app) == ["No node matches '  '."]

    run_app(app, actions, size=(120, 40))


def test_what_matches_nothing_is_quoted_as_typed(trace: Trace) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await find_in_tree(pilot, "no\\where [b]x[/b]")
        assert notices(app) == ["No node matches 'no\\where [b]x[/b]'."]

    run_app(app, actions, size=(120, 40))


def test_a_part_of_a_name_is_looked_for_as_typed_then_without_its_spaces(trace: Trace) -> None:
    task = the_task(trace)
    leaf_w = next(n for n in task.nodes.values() if n.leaf is not None and n.leaf.name == " w")
    assert matches(leaf_w, " w") and matches(leaf_w, "W")  # a part, in any case
    mul = next(n for n in task.nodes.values() if n.name == "MulBackward0")
    assert not matches(mul, " mul") and matches(mul, "mul")
    assert matches(mul, f"#{mul.id}") and matches(mul, str(mul.id))
    esc = next(
        n for n in task.nodes.values() if n.leaf is not None and "\x1b" in (n.leaf.name or "")
    )
    assert matches(esc, "c\x1b[") and matches(esc, "C\\X1B[")  # raw, and as a view shows it
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        selected = await find_in_tree(pilot, "sin ")  # no name holds "sin ": "sin" is found
        assert selected is not None and task.nodes[selected].name == "SinBackward0"

    run_app(app, actions, size=(120, 40))


def test_a_superscript_digit_is_a_part_of_a_name_not_an_id(trace: Trace) -> None:
    task = the_task(trace)
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        selected = await find_in_tree(pilot, "²")
        assert selected is not None
        leaf = task.nodes[selected].leaf
        assert leaf is not None and leaf.name == "x²"

    run_app(app, actions, size=(120, 40))


@pytest.mark.parametrize(
    ("typed", "written", "said"),
    [
        (" step.dot", " step.dot", "written to ' step.dot' as DOT"),
        ("step.dot ", "step.dot", "written to step.dot as DOT"),
        ("st ep.dot", "st ep.dot", "written to st ep.dot as DOT"),
    ],
)
def test_export_writes_the_path_as_typed_unless_only_its_spaces_stop_it(
    trace: Trace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    typed: str,
    written: str,
    said: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("s")
        await export_via_prompt(pilot, typed)

    run_app(app, actions)
    assert [p.name for p in tmp_path.iterdir()] == [written]
    assert "digraph backward {" in (tmp_path / written).read_text()
    (notice,) = notices(app)
    assert said in notice, notice


def test_export_of_a_path_with_a_stray_space_before_it_writes_where_it_can(
    trace: Trace, tmp_path: Path
) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await export_via_prompt(pilot, f"  {tmp_path}/step.dot")  # no folder "  " here

    run_app(app, actions)
    assert [p.name for p in tmp_path.iterdir()] == ["step.dot"]


def test_a_leading_tilde_is_the_home_folder_as_a_shell_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autograd_viz.tui.exporting import path_as_typed

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert path_as_typed("~/step.svg") == str(home / "step.svg")
    assert path_as_typed("~") == str(home)  # no format: the export then says so
    assert path_as_typed(" ~/step.svg") == str(home / "step.svg")  # a stray space
    assert path_as_typed("./~/step.svg") == "./~/step.svg"  # a folder named ~
    assert path_as_typed("a~b.svg") == "a~b.svg"


def test_export_to_the_home_folder_writes_there(
    trace: Trace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await export_via_prompt(pilot, "~/step.dot")

    run_app(app, actions)
    assert [p.name for p in home.iterdir()] == ["step.dot"]
    assert not (tmp_path / "~").exists()
