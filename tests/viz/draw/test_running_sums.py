"""A picture made from the step before is the picture made from scratch, field for field.

Note [A picture from the step before] (module_picture.py) and Note [What
changes in a summary] (running_sums.py): an animation's frames move the last
step's summaries by what changed. Checked at every step, forwards, backwards
and in jumps, on folds, clusters, parts of folds, NaNs and pruned edges.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

import autograd_viz
import engine
from autograd_viz.draw.model import showing
from autograd_viz.draw.model.graph_view import GraphView, from_state
from autograd_viz.draw.model.module_picture import StepPictures
from autograd_viz.draw.model.totals import ordered_statuses
from autograd_viz.draw.model.tree import ModuleTree
from autograd_viz.trace import Trace
from tests.viz.draw.test_modules import transformer_trace, unrolled_trace


def _views(trace: Trace) -> list[GraphView]:
    return [from_state(trace.state_at(step)) for step in range(len(trace) + 1)]


def _choices(tree: ModuleTree) -> list[showing.Choice]:
    """The default level, level 1 with the top call open, and each fold unfolded or split."""
    level1 = showing.choose(tree, level=1)
    out = [showing.choose(tree), level1, replace(level1, open=level1.open | set(tree.roots))]
    for group in tree.groups:
        out.append(showing.choose(tree, unfold=[group.index]))
        count = len(group.repetitions())
        halves = (frozenset(range(count // 2)), frozenset(range(count // 2, count)))
        out.append(replace(level1, parts={group.index: halves}))
        out.append(replace(level1, held={group.index: frozenset({1})}))
    return out


def _check_every_order(trace: Trace) -> int:
    """Each choice, steps in order, reversed and shuffled: the same picture as from scratch."""
    views = _views(trace)
    tree = ModuleTree.of_view(views[-1])
    assert tree.scopes
    orders = [list(range(len(views)))]
    orders.append(orders[0][::-1])
    orders.append(random.Random(0).sample(orders[0], len(views)))
    reused = 0
    for choice in _choices(tree):
        for order in orders:
            pictures = StepPictures()
            for step in order:
                expected = showing.apply(views[step], tree, choice)
                last = pictures._last
                got = pictures.apply(views[step], tree, choice)
                assert got == expected, (choice, step)
                reused += last is not None and pictures._last is last  # made from the step before
    return reused


def test_folds_clusters_and_parts_step_by_step_equal_the_picture_from_scratch() -> None:
    assert _check_every_order(transformer_trace(4)) > 0


def test_an_unrolled_cells_rolled_loop_step_by_step() -> None:
    assert _check_every_order(unrolled_trace(6)) > 0


def test_nan_failure_and_pruned_edges_step_by_step() -> None:
    x = engine.tensor([-1.0, 4.0], requires_grad=True, name="x")
    w = engine.tensor(np.ones(2), requires_grad=True, name="w")
    with engine.scope("encoder", kind="Encoder"):
        with engine.scope("bad", kind="Sqrt"):
            y = x.sqrt()
        with engine.scope("fine", kind="Tanh"):
            z = (y * w).tanh()
    with autograd_viz.record() as trace:
        z.sum().backward(retain_graph=True)
        engine.autograd.grad(z.sum(), [w], retain_graph=True)  # prunes the path to x
        with engine.autograd.detect_anomaly(), pytest.raises(RuntimeError):
            z.sum().backward()  # a NaN gradient: the node returning it fails
    views = _views(trace)
    statuses = {str(n.status) for v in views for n in v.nodes.values()}
    assert {"failed", "pruned", "done"} <= statuses
    assert any(n.non_finite for v in views for n in v.nodes.values())
    assert _check_every_order(trace) > 0


def test_a_different_graph_is_drawn_from_scratch() -> None:
    small, big = transformer_trace(2), transformer_trace(3)
    pictures = StepPictures()
    for trace in (small, big, small):
        view = from_state(trace.state_at(len(trace) // 2))
        tree = ModuleTree.of_view(view)
        choice = showing.choose(tree, level=1)
        assert pictures.apply(view, tree, choice) == showing.apply(view, tree, choice)


def test_statuses_are_listed_in_one_order_without_zeros() -> None:
    assert list(ordered_statuses({"done": 2, "waiting": 0, "not run": 1, "partial": 3})) == [
        "not run",
        "partial",
        "done",
    ]
