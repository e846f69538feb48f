"""A fold shows its inside once, and opening a call is one model (Notes [A fold shows its
inside once] and [Opening is one model] in autograd_viz/draw/model/choosing.py).

The default picture of ``dot`` opens the first call of a twelve-block stack, its
attention and MLP drawn, the eleven others one box with their count; calls that hold
no calls stay boxes. ``--expand`` of one block opens exactly that block and keeps the
fold closed, as ``--around`` does; ``--expand`` of the fold opens its representative.
"""

from __future__ import annotations

import autograd_viz
from autograd_viz.draw.model import showing
from autograd_viz.draw.model.choosing import choose, open_call
from autograd_viz.draw.model.graph_view import GraphView, from_state
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.model.targets import Names
from autograd_viz.draw.model.tree import ModuleTree
from tests.viz.captions import check_pictures
from tests.viz.test_modules import transformer_trace


def _view() -> GraphView:
    trace = transformer_trace()
    return from_state(trace.state_at(len(trace)))


def _folds(picture: GraphView) -> dict[str, int]:
    return {
        n.box.name: n.box.count
        for n in picture.nodes.values()
        if n.box is not None and n.box.count > 1
    }


def _open(picture: GraphView) -> set[str]:
    return {c.name for c in picture.clusters.values()}


def test_the_default_opens_one_block_and_counts_the_others() -> None:
    view = _view()
    picture = showing.show(view, represent=True)
    assert _folds(picture) == {"transformer.h.{1..11}": 11}
    opened = _open(picture)
    assert {"transformer", "transformer.h.0"} <= opened
    assert not any(name.startswith("transformer.h.1") for name in opened)
    # attn and mlp hold no calls: they are boxes inside the open block, not frames.
    boxes = {n.box.name for n in picture.nodes.values() if n.box is not None}
    assert {"transformer.h.0.attn", "transformer.h.0.mlp", "lm_head"} <= boxes
    check_pictures(view, represent=True)
    # A box counts its parameters in one line rather than drawing their nodes.
    source = autograd_viz.to_dot(transformer_trace()).source
    assert "<B>transformer.h.{1..11}</B> × 11" in source
    assert source.count("3 parameters each") == 1  # the fold: attn.w, attn.b, mlp.w a call
    assert "2 parameters" in source  # h.0.attn's w and b; lm_head's weight and bias
    assert "AccumulateGrad" not in source.split("legend")[0]
    # The open block says which fold it stands in for; the blocks' total is the box's and its.
    assert source.count("1 of transformer.h.{0..11} × 12") == 1
    # Without it, the fold is one closed box (the TUI's and animate's pictures).
    assert _folds(showing.show(view)) == {"transformer.h.{0..11}": 12}


def test_expand_of_a_call_opens_exactly_it_and_around_agrees() -> None:
    view = _view()
    for options in ({"expand": ["transformer.h.5"]}, {"around": "transformer.h.5", "depth": 1}):
        picture = showing.show(view, ViewOptions(**options))  # type: ignore[arg-type]
        assert _folds(picture) == {"transformer.h.{0..4,6..11}": 11}, options
        assert "transformer.h.5" in _open(picture)
        assert "transformer.h.4" not in _open(picture)
        check_pictures(view, **options)


def test_expand_of_a_fold_opens_its_representative_not_every_call() -> None:
    view = _view()
    picture = showing.show(view, ViewOptions(expand=["transformer.h.{0..11}"]))
    assert _folds(picture) == {"transformer.h.{1..11}": 11}
    assert {"transformer.h.0", "transformer.h.0.attn", "transformer.h.0.mlp"} <= _open(picture)
    assert len(picture.nodes) < len(view.nodes) // 4  # not the 12 blocks' nodes
    check_pictures(view, expand=["transformer.h.{0..11}"])
    assert (
        "transformer.h.{1..11}</B> × 11"
        in autograd_viz.to_dot(transformer_trace(), expand="transformer.h.{0..11}").source
    )


def test_open_call_is_what_expand_chooses() -> None:
    view = _view()
    tree = ModuleTree.of_view(view)
    names = Names(((k, n.info) for k, n in view.nodes.items()), tree)
    for name in ("transformer.h.5", "transformer.h.{0..11}", "transformer.h.3.attn"):
        target = names.resolve(name)
        assert open_call(tree, [target], level=1) == choose(
            tree, level=1, expand=[target], split=True
        )
        opened = open_call(tree, [target], level=1)
        assert set(target.scopes[:1]) <= opened.open
        assert tree.groups[0].index not in opened.unfolded  # the fold stays one model
