"""Folds of modules whose names hold what a fold's name is read by, read back as shown.

``nn.ModuleDict`` takes any key but one with a dot or an empty one, so module
names may hold braces, commas, quotes, parentheses and spaces. A fold of such
calls, whole or cut at a step into one box per status, is named with those
names quoted (Note [Quoted names in a fold] in ``autograd_viz/draw/model/folds.py``)
and every such name, as the view shows it, is taken back by ``--around``,
``--expand`` and the TUI's ``/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import autograd_viz
from autograd_viz import cli
from autograd_viz.draw.model import select, showing
from autograd_viz.draw.model.folds import fold_name, fold_part
from autograd_viz.draw.model.graph_view import from_state
from autograd_viz.draw.model.targets import expand_braces
from autograd_viz.trace import Trace
from autograd_viz.trace.text import printable
from tests.viz.tui.tuiting import replay_app, run_app, status

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = pytest.importorskip("torch")
    nn = torch.nn

pytestmark = pytest.mark.oracle

KEYS = ["a,b", "{x}", "c}", "{", '"q"', "(p)", "a, b", " ", "*", "esc\x1b[31m", "\\", "0", "1"]
"""Module names PyTorch takes: every character a fold's name is read by but the dot."""


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        return torch.tanh(self.lin(x)) + x


class Hostile(nn.Module):
    """Blocks under hostile keys called in turn (one fold), then an unrolled loop calling two
    hostile modules at each step (a fold of a pattern)."""

    def __init__(self) -> None:
        super().__init__()
        self.d = nn.ModuleDict({key: Block() for key in KEYS})
        self.loop = nn.ModuleDict({"e,m": nn.Linear(4, 4), "{c}": nn.Tanh()})

    def forward(self, x: Any) -> Any:
        for block in self.d.values():
            x = block(x)
        for _ in range(6):
            x = self.loop["{c}"](self.loop["e,m"](x))
        return x.sum()


def test_pytorch_takes_these_names_and_refuses_a_dot() -> None:
    assert list(nn.ModuleDict({key: nn.Tanh() for key in KEYS})) == KEYS
    with pytest.raises(KeyError, match="contain"):
        nn.ModuleDict({"a.b": nn.Tanh()})


@pytest.mark.parametrize(
    "names",
    [
        ["h.0", "h.1", "h.2", "h.5"],
        [f"d.{key}" for key in KEYS],
        ["{x}.0", "{x}.1"],
        ['d."q"', "d.(p)"],
        ["d. ", "d.*"],
        ["l.e,m:0", "l.e,m:1"],
    ],
)
def test_a_fold_name_reads_back_as_its_names(names: list[str]) -> None:
    folded = fold_name(names)
    assert expand_braces(folded) == names
    shown = printable(folded)  # what a view writes, and so what a user types
    assert [printable(n) for n in names] == [printable(n) for n in expand_braces(shown)]
    assert expand_braces(fold_part(names[:1])) == names[:1]


def test_names_without_such_characters_read_as_before() -> None:
    assert fold_name([f"transformer.h.{i}" for i in range(12)]) == "transformer.h.{0..11}"
    assert fold_name(["cell:0", "cell:1", "cell:3"]) == "cell:{0,1,3}"
    assert fold_name(["a.x", "a.y"]) == "a.{x,y}"


@pytest.fixture(scope="module")
def trace() -> Trace:
    torch.manual_seed(0)
    with autograd_viz.record() as recorded:
        Hostile()(torch.randn(2, 4)).backward()
    return recorded


def boxes_at(trace: Trace, step: int) -> list[tuple[str, set[str]]]:
    """Each box the default picture at ``step`` draws: its name and its nodes."""
    picture = showing.show(from_state(trace.state_at(step)))
    return [(n.box.name, set(n.box.members)) for n in picture.nodes.values() if n.box]


def test_every_box_at_every_step_reads_back_as_shown(trace: Trace) -> None:
    labels: set[str] = set()
    for step in range(0, len(trace) + 1, 3):
        names = select.names_of_view(from_state(trace.state_at(step)))
        for label, members in boxes_at(trace, step):
            labels.add(label)
            for shown in {label, printable(label)}:
                assert set(names.resolve(shown).nodes) == members, (step, shown)
    quoted = [label for label in labels if '"' in label]
    # Both folds were cut into parts by status, with hostile names quoted.
    assert any(label.startswith("d.{") for label in quoted), sorted(labels)
    assert any(label.startswith("(") for label in quoted), sorted(labels)
    assert len(quoted) > 10


def test_around_and_expand_take_each_part(trace: Trace, tmp_path: Path) -> None:
    path = tmp_path / "hostile.jsonl"
    trace.save(path)
    step = len(trace) // 2
    parts = [label for label, _ in boxes_at(trace, step) if '"' in label]
    assert parts
    out = tmp_path / "out.dot"
    for label in parts:
        shown = printable(label)
        args = ["dot", str(path), "--step", str(step), "-o", str(out)]
        assert cli.main([*args, "--around", shown, "--depth", "1"]) == 0, shown
        assert "within 1 edge" in out.read_text()
        assert cli.main([*args, "--expand", shown]) == 0, shown


def test_find_takes_each_part_in_the_tui(trace: Trace) -> None:
    step = len(trace) // 2
    app = replay_app(trace)

    async def actions(pilot: Any) -> None:
        from autograd_viz.tui.dag import DagView

        await pilot.press("v", "v")
        app.driver.goto(step)
        app.refresh_view(follow=True)
        await app.query_one(DagView).drawn()
        picture = app.query_one(DagView).picture
        assert picture is not None
        shown = [item for item in picture.items.values() if item.is_box and '"' in item.name]
        assert shown, [item.name for item in picture.items.values()]
        for item in shown:
            await pilot.press("slash")
            app.screen.query_one("#prompt-input").value = item.name  # type: ignore[attr-defined]
            await pilot.press("enter")
            await pilot.pause()
            count = "1 node" if len(item.members) == 1 else f"{len(item.members):,} nodes"
            assert f": {count}" in status(app), (item.name, status(app))

    run_app(app, actions, size=(120, 40))


def test_a_module_named_with_a_space_is_read_as_given(trace: Trace) -> None:
    names = select.names_of_view(from_state(trace.state_at(len(trace))))
    target = names.resolve("d. ")
    assert [names.tree.scopes[i].path for i in target.scopes] == ["d. "]
    assert names.resolve(" d.{0} ").kind == "module"  # padding around other names is dropped
