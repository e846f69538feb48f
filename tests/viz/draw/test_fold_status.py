"""The other calls of a fold, around a name or at a step: one box per status, whole calls only.

Built from ``torch.nn`` alone: a 12-layer ``nn.TransformerEncoder`` and an unrolled
``nn.GRUCell``. ``--around`` part of one layer draws the eleven others as one box
(not two, cut at the layer the name is in); at a step, the done layers and those not
started are two boxes, each status true of every layer inside, and every box's
summary is still the sum of its nodes.
"""

from __future__ import annotations

import functools
import re

import pytest

import autograd_viz
from autograd_viz.draw.model import showing, totals
from autograd_viz.draw.model.graph_view import GraphView
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.model.targets import Names, expand_braces
from autograd_viz.draw.model.tree import ModuleTree
from autograd_viz.trace import Trace
from tests.viz.draw.test_modules_torch import _step_inside, _view, transformer_encoder, unrolled_gru

pytest.importorskip("torch")

pytestmark = pytest.mark.oracle

Done = showing.BoxStatus.DONE
NotStarted = showing.BoxStatus.NOT_STARTED


@functools.cache
def encoder() -> Trace:
    return transformer_encoder()


def _folds(picture: GraphView) -> dict[str, tuple[int, showing.BoxStatus]]:
    return {
        n.box.name: (n.box.count, n.box.summary.status)
        for n in picture.nodes.values()
        if n.box is not None and n.box.group is not None
    }


def _sums_hold(picture: GraphView, view: GraphView) -> None:
    """Every box's summary is the sum of its nodes; its inputs, the edges into it from the
    nodes the picture keeps."""
    kept = {k for n in picture.nodes.values() for k in (n.box.members if n.box else (n.key,))}
    for node in picture.nodes.values():
        box = node.box
        if box is None:
            continue
        members = [view.nodes[k] for k in box.members]
        summary = box.summary
        assert summary.nodes == len(members) > 0
        assert summary.remaining == sum(m.remaining for m in members)
        assert summary.dependencies == sum(m.info.dependencies for m in members)
        topos = [m.info.topological_nr for m in members]
        assert summary.topological_nrs == (min(topos), max(topos))
        counted: dict[str, int] = {}
        for m in members:
            status = "not run" if m.status is None else m.status.value
            counted[status] = counted.get(status, 0) + 1
        assert dict(summary.statuses) == counted
        keys = set(box.members)
        into = [e for e in view.edges if e.head in keys and e.tail not in keys and e.tail in kept]
        assert summary.inputs == len(into)
        assert summary.waiting_inputs == sum(not e.delivered and not e.pruned for e in into)


# -- around part of a call -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "depth"),
    [
        ("layers.3.self_attn", 2),
        ("layers.3.self_attn", 1),
        ("layers.3.linear1", 3),
        ("layers.3.norm1.weight", 6),
    ],
)
def test_around_part_of_a_layer_the_eleven_others_are_one_box(name: str, depth: int) -> None:
    view = _view(encoder())
    picture = showing.show(view, ViewOptions(around=name, depth=depth))
    folds = _folds(picture)
    assert folds == {"layers.{0..2,4..11}": (11, Done)}, folds
    (box,) = [n.box for n in picture.nodes.values() if n.box is not None and n.box.count > 1]
    tree = ModuleTree.of_view(view)
    others = [s for s in tree.scopes if re.fullmatch(r"layers\.(?!3\b)\d+", s.name)]
    assert sorted(box.members) == sorted(k for s in others for k in tree.members(s.index))
    _sums_hold(picture, view)
    # The box's name, typed back, names the eleven other layers.
    target = Names(((k, n.info) for k, n in view.nodes.items()), tree).resolve(box.name)
    assert sorted(target.scopes) == sorted(s.index for s in others)
    # dot draws it so.
    source = autograd_viz.to_dot(encoder(), around=name, depth=depth).source
    assert "<B>layers.{0..2,4..11}</B> × 11" in source
    assert not re.search(r"<B>layers\.\{0\.\.2\}</B>", source)


def test_around_a_layer_whole_is_still_one_box_for_the_others() -> None:
    picture = showing.show(_view(encoder()), ViewOptions(around="layers.3", depth=2))
    assert _folds(picture) == {"layers.{0..2,4..11}": (11, Done)}


# -- at a step -------------------------------------------------------------------------


def _check_one_status_a_box(picture: GraphView, view: GraphView) -> None:
    status = totals.status_of_calls(view, ModuleTree.of_view(view))
    for node in picture.nodes.values():
        if node.box is not None and node.box.group is not None:
            assert {status(i) for i in node.box.scopes} == {node.box.summary.status}, node.box.name


def test_at_a_step_done_and_waiting_layers_are_two_boxes() -> None:
    trace = encoder()
    step = _step_inside(trace, "layers.6")
    view = _view(trace, step)
    picture = showing.show(view)
    assert _folds(picture) == {"layers.{7..11}": (5, Done), "layers.{0..5}": (6, NotStarted)}
    assert "layers.6" in {c.name for c in picture.clusters.values()}
    _check_one_status_a_box(picture, view)
    _sums_hold(picture, view)
    # Each box's name reads back as its layers.
    names = Names(((k, n.info) for k, n in view.nodes.items()), ModuleTree.of_view(view))
    for name in ("layers.{7..11}", "layers.{0..5}"):
        assert len(names.resolve(name).scopes) == len(expand_braces(name))


def test_at_every_step_each_fold_box_is_one_status_and_sums_its_nodes() -> None:
    trace = encoder()
    for step in range(0, len(trace) + 1, len(trace) // 9):
        view = _view(trace, step)
        picture = showing.show(view)
        _check_one_status_a_box(picture, view)
        _sums_hold(picture, view)
        layers = sorted(
            int(name.rsplit(".", 1)[1])
            for n in picture.nodes.values()
            if n.box is not None and n.box.group is not None
            for name in expand_braces(n.box.name)
        )
        opened = {
            int(m[1])
            for c in picture.clusters.values()
            if (m := re.fullmatch(r"layers\.(\d+)", c.name))
        }
        assert sorted([*layers, *opened]) == list(range(12)), step


def test_around_at_a_step_splits_by_status_and_keeps_whole_calls() -> None:
    trace = encoder()
    step = _step_inside(trace, "layers.6")
    view = _view(trace, step)
    picture = showing.show(view, ViewOptions(around="layers.3.self_attn", depth=2))
    # Layer 3 (part of it, open), layer 6 (running, open), the others by status.
    assert _folds(picture) == {"layers.{7..11}": (5, Done), "layers.{0..2,4,5}": (5, NotStarted)}
    _check_one_status_a_box(picture, view)
    _sums_hold(picture, view)


def test_an_unrolled_cell_mid_backward_folds_its_done_and_waiting_steps_apart() -> None:
    trace = unrolled_gru()
    whole = _view(trace)
    tree = ModuleTree.of_view(whole)
    (cell,) = [s for s in tree.scopes if s.name == "cell:4"]
    inside = {whole.nodes[k].info.id for k in cell.nodes}
    step = next(e.index + 1 for e in trace.events if e.kind == "node_start" and e.node_id in inside)
    view = _view(trace, step)
    picture = showing.show(view)
    folds = _folds(picture)
    statuses = {status for _count, status in folds.values()}
    assert {Done, NotStarted} <= statuses, folds
    assert len(statuses) == len(folds)
    _check_one_status_a_box(picture, view)
    _sums_hold(picture, view)


def test_an_animation_keeps_one_box_for_the_fold() -> None:
    trace = encoder()
    view = _view(trace, _step_inside(trace, "layers.6"))
    picture = showing.show(view, follow=False)
    assert _folds(picture) == {"layers.{0..11}": (12, showing.BoxStatus.RUNNING)}
