"""Folds compare shapes, not just ops; ``--around`` a fold or inside one opens one call.

A ResNet-style stack (stages of blocks at growing widths) must fold the
blocks of one stage but never the stages; a name inside (or naming) a fold
of a GPT-like stack draws the call that holds it and one box for the others.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import autograd_viz
import engine
from autograd_viz.draw.model import showing
from autograd_viz.draw.model.graph_view import GraphView, from_state
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.model.targets import Names, expand_braces
from autograd_viz.draw.model.tree import ModuleTree, fold_name
from autograd_viz.draw.render import dot
from autograd_viz.draw.render.dot_clusters import OPS_ONLY
from autograd_viz.trace import Trace
from tests.viz.draw.test_modules import transformer_trace

WIDTHS = (2, 3, 4)
BLOCKS = 3


def staged_trace(widths: tuple[int, ...] = WIDTHS, blocks: int = BLOCKS) -> Trace:
    """``net.stage{i}.{j}`` residual blocks, each stage at its own width (its first op widens)."""
    rng = np.random.default_rng(1)
    x = engine.tensor(rng.standard_normal((2, widths[0])), requires_grad=True, name="x")
    with engine.scope("net", kind="Net"):
        for i, width in enumerate(widths):
            up = engine.tensor(
                rng.standard_normal((x.shape[-1], width)), requires_grad=True, name=f"up{i}"
            )
            with engine.scope(f"stage{i}", kind="Stage"):
                x = x @ up
                for j in range(blocks):
                    w = engine.tensor(
                        rng.standard_normal((width, width)) * 0.3,
                        requires_grad=True,
                        name=f"stage{i}.{j}.w",
                    )
                    with engine.scope(str(j), kind="Block"):
                        x = x + (x @ w).tanh()
    with autograd_viz.record() as trace:
        x.sum().backward()
    return trace


def _view(trace: Trace) -> GraphView:
    return from_state(trace.state_at(len(trace)))


def _folds(tree: ModuleTree) -> dict[str, int]:
    return {g.name: g.count for g in tree.groups}


# -- folds respect shapes --------------------------------------------------------------


def test_stages_of_different_widths_do_not_fold_but_their_blocks_do() -> None:
    tree = ModuleTree.of_view(_view(staged_trace()))
    folds = _folds(tree)
    # Without shapes the three stages are one signature and would fold as stage{0..2} ×3.
    assert folds == {f"net.stage{i}.{{0..2}}": BLOCKS for i in range(3)}, folds
    assert all(g.shapes for g in tree.groups)


def test_stages_of_one_width_still_fold() -> None:
    tree = ModuleTree.of_view(_view(staged_trace(widths=(3, 3, 3))))
    stages = [g for g in tree.groups if g.kind == "Stage"]
    assert [g.count for g in stages] == [3]


def test_without_recorded_shapes_calls_fold_by_their_ops_and_the_box_says_so() -> None:
    view = _view(staged_trace())
    shapeless = {k: replace(n, info=replace(n.info, inputs=())) for k, n in view.nodes.items()}
    bare = replace(view, nodes=shapeless)
    tree = ModuleTree.of_view(bare)
    stages = [g for g in tree.groups if g.kind == "Stage"]
    assert [g.count for g in stages] == [3] and not stages[0].shapes
    shown = showing.module_view(bare, level=1)
    folded = [n.box for n in shown.nodes.values() if n.box is not None and n.box.count > 1]
    assert folded and all(not b.shapes for b in folded)
    source = dot.render(shown).source
    assert OPS_ONLY in source
    # With shapes recorded, no box says it.
    assert OPS_ONLY not in dot.render(showing.module_view(view, level=1)).source


# -- names of part of a fold -----------------------------------------------------------


def test_a_fold_name_with_a_gap_is_ranges_and_reads_back() -> None:
    names = [f"h.{i}" for i in (0, 1, 2, 4, 5, 6, 9)]
    assert fold_name(names) == "h.{0..2,4..6,9}"
    assert expand_braces(fold_name(names)) == names
    assert fold_name(["h.1", "h.3"]) == "h.{1,3}"


# -- around a fold ---------------------------------------------------------------------


def _boxes(view: GraphView) -> dict[str, int]:
    return {n.box.name: n.box.count for n in view.nodes.values() if n.box is not None}


def test_around_a_call_of_a_fold_opens_it_and_folds_the_others_into_one_box() -> None:
    full = _view(transformer_trace(6))
    view = showing.show(full, ViewOptions(around="transformer.h.3", depth=2))
    assert _boxes(view) == {"transformer.h.{0..2,4,5}": 5}
    opened = {c.name for c in view.clusters.values()}
    assert {"transformer.h.3", "transformer.h.3.attn", "transformer.h.3.mlp"} <= opened
    assert not any(name.startswith("transformer.h.0") for name in opened)
    (box,) = (n.box for n in view.nodes.values() if n.box is not None)
    tree = ModuleTree.of_view(full)
    others = [s for s in tree.scopes if s.kind == "Block" and s.name != "transformer.h.3"]
    assert sorted(box.members) == sorted(k for s in others for k in tree.members(s.index))
    assert box.summary.nodes == len(box.members)
    # The box's name, typed back, names the five other blocks.
    target = Names(((k, n.info) for k, n in full.nodes.items()), tree).resolve(box.name)
    assert sorted(tree.scopes[i].name for i in target.scopes) == sorted(s.name for s in others)
    # Without a fold in the way the picture would hold every block: it is far smaller.
    assert len(view.nodes) < len(showing.show(full, ViewOptions(expand=["transformer"])).nodes) / 3


def test_around_a_fold_opens_its_first_call_and_folds_the_rest() -> None:
    view = showing.show(
        _view(transformer_trace(6)), ViewOptions(around="transformer.h.{0..5}", depth=1)
    )
    assert _boxes(view) == {"transformer.h.{1..5}": 5}
    assert "transformer.h.0.attn" in {c.name for c in view.clusters.values()}
    assert any("alike calls" in n for n in view.notices)


def test_around_a_node_inside_a_fold_keeps_the_neighbourhood_small() -> None:
    full = _view(transformer_trace(6))
    near = showing.show(full, ViewOptions(around="transformer.h.3.attn.w", depth=1))
    assert _boxes(near) == {}  # the other blocks are not within one edge
    assert len(near.nodes) <= 4
    wide = showing.show(full, ViewOptions(around="transformer.h.3.attn", depth=3))
    boxes = _boxes(wide)
    # Blocks 2 and 4 are reached: the other blocks are boxes, five calls in all, none opened.
    others = {name: n for name, n in boxes.items() if not name.startswith("transformer.h.3")}
    assert sum(others.values()) == 5, boxes
    assert "transformer.h.3.attn" in {c.name for c in wide.clusters.values()}


def test_around_a_shared_parameter_of_an_unrolled_cell_folds_the_other_steps() -> None:
    w = engine.tensor(np.eye(3) * 0.5, requires_grad=True, name="cell.weight")
    h = engine.tensor(np.ones((1, 3)), requires_grad=True, name="h0")
    for _ in range(8):
        with engine.scope("cell", kind="Cell"):
            h = (h @ w).tanh()
    with autograd_viz.record() as trace:
        h.sum().backward()
    view = showing.show(_view(trace), ViewOptions(around="cell.weight", depth=1))
    assert _boxes(view) == {"cell:{1..7}": 7}
    # DOT draws it: the box with its count, the first call open around the parameter.
    source = autograd_viz.to_dot(trace, around="cell.weight", depth=1).source
    assert "cell:{1..7}" in source and "× 7" in source
