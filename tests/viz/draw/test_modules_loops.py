"""Unrolled loops whose step calls several modules in turn fold into one box: ``(emb, cell) ×T``.

Built from ``torch.nn`` alone: an encoder-decoder unrolled by hand (``emb``
then ``enc`` at each source step, ``emb``, ``dec``, ``out`` at each target
step), a weight-shared stack calling ``attn`` then ``mlp`` in turn, and two
cells of one class one after the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

import autograd_viz
from autograd_viz.draw.model import showing
from autograd_viz.draw.model.folds import _runs
from autograd_viz.draw.model.graph_view import GraphView, from_state
from autograd_viz.draw.model.targets import Names
from autograd_viz.draw.model.tree import ModuleTree
from autograd_viz.trace import Trace


def test_runs_find_patterns_of_calls_and_stop_where_the_module_changes() -> None:
    # emb, enc five times, then emb, dec, out four times: two loops.
    sigs = [1, 2] * 5 + [1, 2, 3] * 4
    paths = ["emb", "enc"] * 5 + ["emb", "dec", "out"] * 4
    assert list(_runs(sigs, paths, [False] * 22)) == [(0, 10, 2), (10, 22, 3)]
    # One signature throughout folds one call at a time, not in pairs.
    assert list(_runs([7] * 4, ["h.0", "h.1", "h.2", "h.3"], [True] * 4)) == [(0, 4, 1)]
    # Alike cells of two modules: two runs, not one, however short.
    for enc in (2, 3):
        cells = ["enc"] * enc + ["dec"] * 2
        runs = [(0, enc, 1), (enc, enc + 2, 1)]
        assert list(_runs([5] * len(cells), cells, [False] * len(cells))) == runs
    # A module used twice around another is no loop.
    assert list(_runs([4, 4, 4], ["shared", "middle", "shared"], [False, True, False])) == []
    assert list(_runs([1, 2, 3], ["a", "b", "c"], [True] * 3)) == []


if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = pytest.importorskip("torch")
    nn = torch.nn


class Seq2Seq(nn.Module):
    """An encoder-decoder unrolled by hand: one embedding, two GRU cells, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.enc = nn.GRUCell(4, 6)
        self.dec = nn.GRUCell(4, 6)
        self.out = nn.Linear(6, 10)

    def forward(self, src: Any, tgt: Any) -> Any:
        h = torch.zeros(src.shape[1], 6)
        for t in range(src.shape[0]):
            h = self.enc(self.emb(src[t]), h)
        outs = []
        for t in range(tgt.shape[0]):
            h = self.dec(self.emb(tgt[t]), h)
            outs.append(self.out(h))
        return torch.stack(outs)


class InTurn(nn.Module):
    """Two sibling modules called in turn, six times (weights shared across steps)."""

    def __init__(self, residual: bool) -> None:
        super().__init__()
        self.attn = nn.Linear(4, 4)
        self.mlp = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 4))
        self.residual = residual

    def forward(self, x: Any) -> Any:
        for _ in range(6):
            x = x + self.attn(x) if self.residual else self.attn(x)
            x = x + self.mlp(x) if self.residual else self.mlp(x)
        return x


class TwoCells(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.GRUCell(3, 5)
        self.dec = nn.GRUCell(3, 5)

    def forward(self, x: Any) -> Any:
        h = torch.zeros(2, 5)
        for t in range(5):
            h = self.enc(x[t], h)
        for t in range(4):
            h = self.dec(x[t], h)
        return h


def _seq2seq(record: bool = True) -> tuple[Trace | None, list[Any]]:
    torch.manual_seed(0)
    model = Seq2Seq()
    src, tgt = torch.randint(0, 10, (5, 2)), torch.randint(0, 10, (4, 2))
    trace = None
    if record:
        with autograd_viz.record() as trace:
            model(src, tgt).sum().backward()
    else:
        model(src, tgt).sum().backward()
    return trace, [p.grad for p in model.parameters()]


def _record(model: Any, *inputs: Any) -> Trace:
    with autograd_viz.record() as trace:
        model(*inputs).sum().backward()
    return trace


def _view(trace: Trace) -> GraphView:
    return from_state(trace.state_at(len(trace)))


pytestmark = pytest.mark.oracle


def test_an_unrolled_encoder_decoder_folds_each_loop_with_its_count() -> None:
    trace, grads = _seq2seq()
    assert trace is not None
    _, plain = _seq2seq(record=False)
    assert all(torch.equal(a, b) for a, b in zip(grads, plain, strict=True))
    view = _view(trace)
    tree = ModuleTree.of_view(view)
    folds = {g.name: (g.count, g.period, g.kind) for g in tree.groups}
    assert folds == {
        "(emb:{0..4}, enc:{0..4})": (5, 2, "Embedding, GRUCell"),
        "(emb:{5..8}, dec:{0..3}, out:{0..3})": (4, 3, "Embedding, GRUCell, Linear"),
    }
    picture = showing.module_view(view)
    boxes = {n.box.name: n.box for n in picture.nodes.values() if n.box is not None}
    assert {name: box.count for name, box in boxes.items()} == {
        name: count for name, (count, _, _) in folds.items()
    }
    # Each box holds every node its calls made; the boxes and the loss are the whole graph.
    for group in tree.groups:
        box = boxes[group.name]
        assert sorted(box.members) == sorted(k for i in group.scopes for k in tree.members(i))
        assert box.summary.nodes == len(box.members)
    source = autograd_viz.to_dot(trace, leaves=True).source
    assert "(emb:{0..4}, enc:{0..4})</B> × 5" in source
    assert "(emb:{5..8}, dec:{0..3}, out:{0..3})</B> × 4" in source
    # By default each loop's first step is drawn open, the others one box.
    source = autograd_viz.to_dot(trace).source
    assert "(emb:{1..4}, enc:{1..4})</B> × 4" in source
    assert "<B>enc:0</B>" in source and "<B>emb:0</B>" in source


def test_a_fold_of_a_pattern_opens_on_request_and_its_names_read_back() -> None:
    trace, _ = _seq2seq()
    assert trace is not None
    view = _view(trace)
    tree = ModuleTree.of_view(view)
    encoder = next(g for g in tree.groups if g.period == 2)
    opened = showing.apply(view, tree, showing.choose(tree, unfold=[encoder.index]))
    shown = {n.box.name for n in opened.nodes.values() if n.box is not None}
    assert {f"emb:{t}" for t in range(5)} | {f"enc:{t}" for t in range(5)} <= shown
    names = Names(((k, n.info) for k, n in view.nodes.items()), tree)
    target = names.resolve(encoder.name)
    assert target.kind == "fold" and target.group == encoder.index
    assert names.resolve("enc:3").kind == "module"
    # Expanded by its name, the fold opens its first step; the others stay one box.
    drawn = autograd_viz.to_dot(trace, expand=encoder.name).source
    assert "<B>enc:0</B>" in drawn and "(emb:{1..4}, enc:{1..4})</B> × 4" in drawn
    assert "<B>enc:3</B>" not in drawn


def test_two_modules_called_in_turn_fold_as_one_step_of_a_loop() -> None:
    torch.manual_seed(0)
    view = _view(_record(InTurn(residual=False), torch.randn(2, 4)))
    (group,) = ModuleTree.of_view(view).groups
    assert (group.name, group.count, group.period) == ("(attn:{0..5}, mlp:{0..5})", 6, 2)


def test_calls_in_turn_with_a_residual_outside_them_do_not_fold() -> None:
    # The residual's add is the parent's own node between the calls: a gradient leaves
    # the calls and comes back, so a box would draw it wrong (Note [What folds]).
    torch.manual_seed(0)
    view = _view(_record(InTurn(residual=True), torch.randn(2, 4)))
    assert not ModuleTree.of_view(view).groups


def test_alike_cells_of_two_modules_fold_as_two_loops() -> None:
    torch.manual_seed(0)
    view = _view(_record(TwoCells(), torch.randn(5, 2, 3)))
    groups = {g.name: g.count for g in ModuleTree.of_view(view).groups}
    assert groups == {"enc:{0..4}": 5, "dec:{0..3}": 4}


def test_a_closed_fold_is_a_rolled_loop_with_one_edge_to_itself() -> None:
    from tests.viz.draw.test_modules import unrolled_trace

    view = _view(unrolled_trace(12))  # h = (h @ w).tanh() in cell, twelve times
    tree = ModuleTree.of_view(view)
    picture = showing.module_view(view)
    (box,) = [n for n in picture.nodes.values() if n.box is not None]
    loops = [e for e in picture.edges if e.tail == e.head]
    # Each call passes h to the next: eleven edges, one drawn; the shared weight's
    # AccumulateGrad, made in the first call, is no step of the loop.
    assert [(e.tail, e.count) for e in loops] == [(box.key, 11)]
    source = autograd_viz.to_dot(unrolled_trace(12), leaves=True).source
    assert f'{box.key} -> {box.key} [label="×11" class=loop' in source
    assert "from one repetition to the next (the loop, rolled)" in source
    # Opened, the loop is its calls again, and no edge goes from a box to itself.
    opened = showing.apply(view, tree, showing.choose(tree, unfold=[tree.groups[0].index]))
    assert not [e for e in opened.edges if e.tail == e.head]
    assert not [e for e in showing.module_view(view, expand=["all"]).edges if e.tail == e.head]
