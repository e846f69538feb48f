"""Every name a picture shows reads back: module calls, folds of calls and folded chains alike.

A fold is one kind of box in every view (:class:`~autograd_viz.draw.model.drawn.ModuleBox`):
a name, a count, what it holds. Whatever label a default or ``--collapse``
picture draws, typed back into ``--around``, ``--expand`` or the TUI's ``/``,
names what the label stands for.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import autograd_viz
import engine
from autograd_viz.cli.main import main as cli_main
from autograd_viz.draw.model import chains, select, showing
from autograd_viz.draw.model.graph_view import GraphView, GraphViewError, from_state
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.model.targets import node_name
from autograd_viz.trace import Trace
from autograd_viz.tui.pictures import Pictures
from tests.viz.draw.test_graph_select import unrolled_rnn
from tests.viz.draw.test_modules import transformer_trace, unrolled_trace


def _looped_scopes() -> Trace:
    """A chain inside one module call, a bare chain outside any, and an unrolled cell."""
    x = engine.tensor([1.0], requires_grad=True, name="x")
    y = x
    for _ in range(12):
        y = y * 1.0001 + 0.0
    with engine.scope("loop", kind="Loop"):
        for _ in range(20):
            y = (y * 1.0001).tanh()
    for _ in range(4):
        with engine.scope("cell", kind="Cell"):
            y = y * 1.0001 + 0.0
    with autograd_viz.record() as trace:
        y.sum().backward()
    return trace


PROGRAMS: dict[str, Callable[[], Trace]] = {
    "transformer": transformer_trace,
    "unrolled": unrolled_trace,
    "rnn": lambda: unrolled_rnn(30),
    "looped": _looped_scopes,
}


def _view(trace: Trace, step: int | None = None) -> GraphView:
    return from_state(trace.state_at(len(trace) if step is None else step))


def shown_names(picture: GraphView) -> list[str]:
    """Every label a picture draws that names something: boxes, nodes, clusters, leaves."""
    names = [n.box.name if n.box else node_name(n.info) for n in picture.nodes.values()]
    names += [c.name for c in picture.clusters.values()]
    names += [b.title for b in picture.boxes if b.kind == "leaf"]
    return names


def _pictures(view: GraphView) -> dict[str, GraphView]:
    return {
        "default": showing.show(view),
        "collapse": showing.show(view, ViewOptions(collapse=True)),
        "collapse, every node": showing.show(view, ViewOptions(collapse=True, expand=["all"])),
    }


def _held(picture: GraphView, name: str) -> set[str]:
    """The node keys a drawn label stands for."""
    for node in picture.nodes.values():
        if node.box is not None and node.box.name == name:
            return set(node.box.members)
        if node.box is None and node_name(node.info) == name:
            return {node.key}
    return set()


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_every_label_of_every_picture_reads_back_as_what_it_stands_for(program: str) -> None:
    trace = PROGRAMS[program]()
    for step in (len(trace) // 2, len(trace)):
        view = _view(trace, step)
        names = select.names_of_view(view)
        for title, picture in _pictures(view).items():
            for name in shown_names(picture):
                target = names.resolve(name)
                assert target.nodes, (title, name)
                held = _held(picture, name)
                if held:  # a box or a node: the name names exactly what it holds
                    assert set(target.nodes) == held, (title, name)


def test_a_chain_fold_is_a_box_with_a_name_a_count_and_what_it_holds() -> None:
    trace = unrolled_rnn(30)
    view = _view(trace)
    picture = showing.show(view, ViewOptions(collapse=True))
    (box,) = [n.box for n in picture.nodes.values() if n.box is not None]
    ids = {view.nodes[k].info.id: k for k in box.members}
    assert box.count == 30 and len(box.members) == 120 and box.summary.nodes == 120
    assert box.summary.status.value == "done" and box.scopes == () and box.kind == ""
    head, tail = box.name.rsplit(" #", 2)[0], box.name.split(" ")[-1]
    assert head == "(TanhBackward0, AddBackward0, MmBackward0)"
    first, last = (int(part.lstrip("#")) for part in tail.split(".."))
    assert view.nodes[ids[first]].info.name == "TanhBackward0" and ids[first] == box.members[0]
    assert view.nodes[ids[last]].info.name == "MmBackward0"
    assert [c.name for c in chains.chain_folds(view)] == [box.name]
    source = autograd_viz.to_dot(trace, collapse=True).source
    assert f"{box.name}</B> × 30" in source and "shape=box3d" in source


def test_a_chain_folds_name_works_in_around_expand_and_the_tuis_find() -> None:
    trace = unrolled_rnn(30)
    view = _view(trace)
    (fold,) = chains.chain_folds(view)
    target = select.resolve(view, fold.name)
    assert target.kind == "chain" and target.nodes == fold.members
    near = showing.show(view, ViewOptions(collapse=True, around=fold.name, depth=0))
    assert f"within 0 edges of {fold.name}" in near.notices[0]
    assert [n.box.name for n in near.nodes.values() if n.box] == [fold.name]
    assert len(near.nodes) == 1  # the fold alone: its 120 nodes are what the name names
    source = autograd_viz.to_dot(trace, collapse=True, around=fold.name, depth=1).source
    assert f"{fold.name}</B> × 30" in source and "30 repetitions folded" in source
    # --expand draws the chain whole; the loss and the shared W stay as they are.
    whole = showing.show(view, ViewOptions(collapse=True, expand=[fold.name]))
    assert not any(n.box for n in whole.nodes.values()) and len(whole.nodes) == len(view.nodes)
    assert autograd_viz.to_dot(trace, expand=fold.name).source == autograd_viz.to_dot(trace).source
    # The TUI's / reads the same names as dot.
    task = next(iter(trace.graph_tasks.values()))
    found = Pictures(trace, task).resolve(fold.name)
    assert found.kind == "chain" and set(found.nodes) == set(fold.members)


def test_a_chain_name_that_is_not_there_is_refused_with_the_closest() -> None:
    view = _view(unrolled_rnn(30))
    (fold,) = chains.chain_folds(view)
    wrong = fold.name.replace("#", "#9", 1)
    with pytest.raises(GraphViewError, match="did you mean"):
        select.resolve(view, wrong)


def test_chain_folds_stay_inside_one_module_call_and_name_their_nodes() -> None:
    view = _view(_looped_scopes())
    folds = chains.chain_folds(view)
    assert sorted(f.repeats for f in folds) == [12, 20]
    for fold in folds:
        scopes = {view.nodes[k].info.scope for k in fold.members}
        assert len(scopes) == 1
    names = [f.name for f in folds]
    assert len(set(names)) == len(names)


@pytest.mark.oracle
@pytest.mark.parametrize("model", ["transformer", "resnet", "gru", "shared"])
def test_every_label_of_a_torch_models_pictures_reads_back(model: str) -> None:
    pytest.importorskip("torch")
    from tests.viz.draw.test_modules_torch import MODELS

    trace = MODELS[model]()
    view = _view(trace)
    names = select.names_of_view(view)
    task = next(iter(trace.graph_tasks.values()))
    tui = Pictures(trace, task)
    for title, picture in _pictures(view).items():
        for name in shown_names(picture):
            assert names.resolve(name).nodes, (title, name)
            assert tui.resolve(name).nodes, (title, name)


# -- the command line ------------------------------------------------------------------


@pytest.fixture
def transformer_file(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    transformer_trace().save(path)
    return path


BLOCKS = [f"transformer.h.{i}" for i in range(12)]


@pytest.mark.parametrize(
    ("words", "option", "wanted"),
    [
        # dot t.jsonl --around transformer.h.{0..11}, unquoted
        (["--around", *BLOCKS], "--around", "transformer.h.{0..11}"),
        (["--expand", *BLOCKS, "--level", "1"], "--expand", "transformer.h.{0..11}"),
        (
            ["--around", "transformer.h.{0..11}", "--expand", *BLOCKS[:3]],
            "--expand",
            "transformer.h.{0..2}",
        ),
    ],
)
def test_a_fold_name_the_shell_expanded_is_refused_with_how_to_quote_it(
    transformer_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    words: list[str],
    option: str,
    wanted: str,
) -> None:
    out = tmp_path / "g.dot"
    for order in (
        ["dot", str(transformer_file), "-o", str(out), *words],
        ["dot", *words, str(transformer_file), "-o", str(out)],
    ):
        assert cli_main(order) == 2
        err = capsys.readouterr().err
        assert f"the shell expanded {wanted!r} into" in err, err
        assert f"quote the name: {option} '{wanted}'" in err, err
    assert not out.exists()


def test_a_quoted_fold_name_and_unrelated_words_pass(
    transformer_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "g.dot"
    args = ["dot", str(transformer_file), "-o", str(out), "--around", "transformer.h.{0..11}"]
    assert cli_main(args) == 0
    assert "within 2 edges of transformer.h.{0..11}" in out.read_text()
    assert cli_main(["dot", str(transformer_file), "-o", str(out), "--around", "lm_head"]) == 0
    # Two alike names, each its own option's: no shell expansion.
    for words in (
        ["--around", "transformer.h.3.attn", "--expand", "transformer.h.5"],
        ["--expand", "transformer.h.5", "--around=transformer.h.3.attn"],
        ["--expand", "transformer.h.2", "--expand", "transformer.h.3"],
    ):
        assert cli_main(["dot", str(transformer_file), "-o", str(out), *words]) == 0, words
    capsys.readouterr()
