"""A fold joins only calls alike in what a reader sees, and every caption says what is drawn.

Calls are alike when they have one module class, one set of parameters (names
below the module, shapes, dtypes), the same ops on tensors of the same shapes,
wired the same way inside, and alike children (Note [Alike calls] in
autograd_viz/draw/model/tree.py). Two calls whose gradients have one shape but
whose weights differ (a 1×1 expanding conv and a 5×5 depthwise conv, both at
120 channels) are not alike. The lines under a picture are checked against it
(tests/viz/captions.py) on every model these tests build.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import autograd_viz
import engine
from autograd_viz.draw.model import showing
from autograd_viz.draw.model.graph_view import GraphView, from_state
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.model.tree import ModuleTree
from autograd_viz.trace import Trace
from tests.viz.captions import check_notices, check_pictures, names_to_try
from tests.viz.draw.test_fold_shapes_around import staged_trace
from tests.viz.draw.test_modules import transformer_trace, unrolled_trace


def _view(trace: Trace, step: int | None = None) -> GraphView:
    return from_state(trace.state_at(len(trace) if step is None else step))


def _folds(trace: Trace) -> dict[str, int]:
    return {g.name: g.count for g in ModuleTree.of_view(_view(trace)).groups}


def _param(name: str, *shape: int, seed: int = 0) -> engine.Tensor:
    rng = np.random.default_rng(seed)
    return engine.tensor(rng.standard_normal(shape) * 0.3, requires_grad=True, name=name)


def two_weights_trace(blocks: int = 3) -> Trace:
    """``net.{i}`` blocks of two ``Layer`` calls: an expanding weight (3→4) then a square one
    (4→4). Both layers' gradients are (2, 4); only their weights tell them apart."""
    x = engine.tensor(np.ones((2, 3)), requires_grad=True, name="x")
    with engine.scope("net", kind="Net"):
        for i in range(blocks):
            with engine.scope(str(i), kind="Block"):
                expand = _param(f"net.{i}.0.weight", 3, 4, seed=i)
                square = _param(f"net.{i}.1.weight", 4, 4, seed=i + 10)
                down = _param(f"net.{i}.down", 4, 3, seed=i + 20)
                with engine.scope("0", kind="Layer"):
                    h = (x @ expand).tanh()
                with engine.scope("1", kind="Layer"):
                    h = (h @ square).tanh()
                x = x + h @ down
    with autograd_viz.record() as trace:
        x.sum().backward()
    return trace


def wired_trace() -> Trace:
    """Two sibling calls of one class with the same ops on the same shapes, wired in another
    order: ``exp`` then ``tanh``, and ``tanh`` then ``exp``."""
    x = engine.tensor(np.ones((2, 3)) * 0.1, requires_grad=True, name="x")
    with engine.scope("net", kind="Net"):
        with engine.scope("a", kind="Act"):
            x = x.exp().tanh()
        with engine.scope("b", kind="Act"):
            x = x.tanh().exp()
        with engine.scope("c", kind="Act"):
            x = x.tanh().exp()
    with autograd_viz.record() as trace:
        x.sum().backward()
    return trace


def test_two_layers_whose_weights_differ_do_not_fold_but_their_blocks_do() -> None:
    folds = _folds(two_weights_trace())
    # The blocks are alike (each a 3→4 then a 4→4 layer): they fold, and no fold joins a
    # block's two layers, whose gradients have one shape but whose weights do not.
    assert folds == {"net.{0..2}": 3}


def test_blocks_of_different_layers_do_not_fold() -> None:
    # A block whose second layer's weight is renamed is another block.
    x = engine.tensor(np.ones((2, 4)), requires_grad=True, name="x")
    with engine.scope("net", kind="Net"):
        for i, name in enumerate(["weight", "weight", "kernel"]):
            w = _param(f"net.{i}.{name}", 4, 4, seed=i)
            with engine.scope(str(i), kind="Layer"):
                x = (x @ w).tanh()
    with autograd_viz.record() as trace:
        x.sum().backward()
    assert _folds(trace) == {"net.{0..1}": 2}


def test_calls_wired_another_way_do_not_fold() -> None:
    # a (exp → tanh) holds the ops of b and c (tanh → exp), on the same shapes: only b, c fold.
    assert _folds(wired_trace()) == {"net.{b,c}": 2}


def test_the_first_call_of_an_unrolled_cell_still_folds_with_its_parameter() -> None:
    # The weight's AccumulateGrad is made in the first call only; it is the module's
    # parameter in every call, so the twelve calls stay one fold.
    assert _folds(unrolled_trace()) == {"cell:{0..11}": 12}


def test_around_a_call_of_a_fold_of_two_says_nothing_folded() -> None:
    # net.{0..1}: around a weight of net.1, the one other block is no fold, and the line
    # under the picture does not say "folded".
    trace = two_weights_trace(blocks=2)
    view = _view(trace)
    assert _folds(trace) == {"net.{0..1}": 2}
    picture = showing.show(view, ViewOptions(around="net.1.1.weight", depth=2))
    assert not any(n.box is not None and n.box.count > 1 for n in picture.nodes.values())
    assert not any("folded" in line for line in picture.notices)
    check_notices(view, picture)


def test_around_a_call_of_a_fold_of_three_folds_the_other_two_and_says_so() -> None:
    view = _view(two_weights_trace(blocks=3))
    picture = showing.show(view, ViewOptions(around="net.1", depth=1))
    (line,) = [n for n in picture.notices if n.startswith("showing the")]
    assert "with the alike calls they reach folded" in line
    assert [n.box.count for n in picture.nodes.values() if n.box and n.box.count > 1] == [2]
    check_notices(view, picture)


def test_a_running_call_opened_in_a_fold_is_not_said_to_be_folded() -> None:
    # Mid-backward the running node's call opens: the caption counts only what stays folded.
    trace = transformer_trace()
    for step in range(0, len(trace), max(1, len(trace) // 12)):
        view = _view(trace, step)
        for name in ("transformer.h.3.attn", "transformer.h.{0..11}"):
            check_pictures(view, around=name, depth=2)


MODELS: dict[str, Callable[[], Trace]] = {
    "transformer": transformer_trace,
    "unrolled": unrolled_trace,
    "staged": staged_trace,
    "two weights": two_weights_trace,
    "wired": wired_trace,
}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_caption_says_what_its_picture_shows(model: str) -> None:
    trace = MODELS[model]()
    for step in (len(trace) // 2, len(trace)):
        view = _view(trace, step)
        folds = check_pictures(view)
        folds += check_pictures(view, level=1)
        for name in names_to_try(view):
            folds += check_pictures(view, around=name, depth=2)
            folds += check_pictures(view, expand=[name])
        if step == len(trace) and ModuleTree.of_view(view).groups:
            assert folds  # the checks saw folds to check
