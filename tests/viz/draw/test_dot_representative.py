"""A fold shows its inside once, and opening a call is one model (Notes [A fold shows its
inside once] and [Opening is one model] in autograd_viz/draw/model/choosing.py).

The default picture of ``dot`` opens the first call of a twelve-block stack, its
attention and MLP drawn, the eleven others one box with their count; calls that hold
no calls stay boxes. ``--expand`` of one block opens exactly that block and keeps the
fold closed, as ``--around`` does; ``--expand`` of the fold opens its representative.
"""

from __future__ import annotations

import numpy as np

import autograd_viz
import engine
from autograd_viz.draw.model import showing
from autograd_viz.draw.model.choosing import choose, open_call
from autograd_viz.draw.model.drawn import BoxStatus
from autograd_viz.draw.model.graph_view import GraphView, from_state
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.model.targets import Names
from autograd_viz.draw.model.tree import ModuleTree
from autograd_viz.trace import Trace
from tests.viz.captions import check_pictures
from tests.viz.draw.test_modules import transformer_trace


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


def _stacks(picture: GraphView) -> dict[str, tuple[int, str]]:
    return {
        c.stack.name: (c.stack.count, c.stack.drawn)
        for c in picture.clusters.values()
        if c.stack is not None
    }


def test_the_default_draws_one_block_as_a_stack_of_twelve() -> None:
    view = _view()
    picture = showing.show(view, represent=True)
    # One stack, its first call drawn inside; no box beside it for the other eleven.
    assert _stacks(picture) == {"transformer.h.{0..11}": (12, "transformer.h.0")}
    assert _folds(picture) == {}
    opened = _open(picture)
    assert {"transformer", "transformer.h.0"} <= opened
    assert not any(name.startswith("transformer.h.1") for name in opened)
    # No node of the eleven calls not drawn is drawn; the stack counts them.
    drawn_calls = {n.info.scope[1][0] for n in picture.nodes.values() if len(n.info.scope) > 1}
    assert drawn_calls <= {"transformer.h.0", "transformer.h"}
    (stack,) = [c.stack for c in picture.clusters.values() if c.stack is not None]
    assert stack.statuses == ((BoxStatus.DONE, 12),)
    # attn and mlp hold no calls: they are boxes inside the open block, not frames.
    boxes = {n.box.name for n in picture.nodes.values() if n.box is not None}
    assert {"transformer.h.0.attn", "transformer.h.0.mlp", "lm_head"} <= boxes
    assert check_pictures(view, represent=True) == 0  # no fold box: the fold is the stack
    source = autograd_viz.to_dot(transformer_trace()).source
    assert "<B>transformer.h.{0..11}</B> × 12" in source
    assert "transformer.h.{1..11}" not in source
    assert "12 done" in source and "drawn: transformer.h.0" in source
    # The loop rolled: one edge back up the drawn block, for the eleven hand-offs.
    loops = [e for e in picture.edges if e.rolled]
    assert len(loops) == 1 and loops[0].rolled == 12
    assert 'xlabel="loop × 11"' in source
    assert "2 parameters" in source  # h.0.attn's w and b; lm_head's weight and bias
    assert "AccumulateGrad" not in source.split("legend")[0]
    # Without it, the fold is one closed box (the TUI's and animate's pictures).
    assert _folds(showing.show(view)) == {"transformer.h.{0..11}": 12}


def test_at_a_step_the_stack_draws_the_call_being_worked_on_and_counts_each_status() -> None:
    trace = transformer_trace()
    for step in range(len(trace) // 3, len(trace), 7):
        view = from_state(trace.state_at(step))
        picture = showing.show(view, represent=True)
        stacks = [c for c in picture.clusters.values() if c.stack is not None]
        if not stacks or len(stacks[0].stack.statuses) < 3:  # type: ignore[union-attr]
            continue
        (frame,) = stacks
        stack = frame.stack
        assert stack is not None
        statuses = dict(stack.statuses)
        assert set(statuses) == {BoxStatus.DONE, BoxStatus.RUNNING, BoxStatus.NOT_STARTED}
        # A call is running once a gradient reached it and until all of it ran: the one
        # being worked on, and the one before it that its residual already fed.
        assert 1 <= statuses[BoxStatus.RUNNING] <= 2 and sum(statuses.values()) == 12
        # The call drawn is one running, and no other call of the fold is a box.
        assert frame.summary.status is BoxStatus.RUNNING
        assert _folds(picture) == {}
        check_pictures(view, represent=True)
        source = autograd_viz.to_dot(trace, step=step).source
        later, done = statuses[BoxStatus.NOT_STARTED], statuses[BoxStatus.DONE]
        running = statuses[BoxStatus.RUNNING]
        assert f"{later} not started · {running} running · {done} done" in source
        return
    raise AssertionError("no step found with the stack's calls at three statuses")


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
    # dot draws it as the default does: a stack, the representative drawn inside.
    source = autograd_viz.to_dot(transformer_trace(), expand="transformer.h.{0..11}").source
    assert "<B>transformer.h.{0..11}</B> × 12" in source and "drawn: transformer.h.0 " in source
    assert "transformer.h.{1..11}" not in source
    stacked = autograd_viz.to_dot(transformer_trace(), expand="transformer.h.5").source
    assert "<B>transformer.h.{0..11}</B> × 12" in stacked and "drawn: transformer.h.5 " in stacked


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


def _nested_trace() -> Trace:
    """``net.blocks.{0..2}``, each holding ``sub.{0..1}`` (a matmul, a scale, a tanh and a
    residual): a fold inside each call of a fold."""
    rng = np.random.default_rng(0)
    x = engine.tensor(rng.standard_normal((1, 3)), requires_grad=True, name="x")
    with engine.scope("net", kind="Net"), engine.scope("blocks", kind="Sequential"):
        for i in range(3):
            with engine.scope(str(i), kind="Block"), engine.scope("sub", kind="Sequential"):
                for j in range(2):
                    name = f"net.blocks.{i}.sub.{j}"
                    w = engine.tensor(
                        rng.standard_normal((3, 3)), requires_grad=True, name=f"{name}.lin.w"
                    )
                    s = engine.tensor(np.ones(3), requires_grad=True, name=f"{name}.norm.w")
                    with engine.scope(str(j), kind="Sub"):
                        with engine.scope("lin", kind="Lin"):
                            y = x @ w
                        with engine.scope("norm", kind="Norm"):
                            y = y * s
                        with engine.scope("act", kind="Act"):
                            x = y.tanh() + x
    with autograd_viz.record() as trace:
        x.sum().backward()
    return trace


def test_a_fold_inside_a_stack_is_a_stack_and_each_loop_is_one_edge() -> None:
    trace = _nested_trace()
    for step in (len(trace) // 2, len(trace)):
        view = from_state(trace.state_at(step))
        picture = showing.show(view, ViewOptions(level=5), represent=True)
        stacks = {c.stack.name: c.stack for c in picture.clusters.values() if c.stack}
        drawn = next(iter(stacks["net.blocks.{0..2}"].drawn.split()))
        assert set(stacks) == {"net.blocks.{0..2}", f"{drawn}.sub.{{0..1}}"}
        check_pictures(view, represent=True, level=5)
        # Each stack's loop is one edge, whatever its calls hold; no node of a call not
        # drawn is drawn.
        loops = sorted(e.rolled for e in picture.edges if e.rolled)
        assert loops == sorted(s.count for s in stacks.values())
        others = {f"net.blocks.{i}" for i in range(3)} - {drawn}
        hidden = {k for k, n in view.nodes.items() if {p for p, _ in n.info.scope} & others}
        assert hidden and not hidden & picture.nodes.keys()
