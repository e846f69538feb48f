"""Big graphs: a neighbourhood, folded chains and a node budget, each with a visible notice."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import autograd_viz
import engine
from autograd_viz import to_dot
from autograd_viz.draw.model import chains
from autograd_viz.draw.model import select as graph_select
from autograd_viz.draw.model.graph_view import GraphViewError
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.render import dot
from autograd_viz.drawing import graph_of
from autograd_viz.trace import Trace
from tests.viz.dotting import drawn_edges, drawn_nodes


def _chain(steps: int) -> tuple[engine.Tensor, engine.Tensor]:
    """W1 of the benchmarks: y = y * 1.0001 + 0.0, ``steps`` times (two nodes a step)."""
    x = engine.tensor([1.0], requires_grad=True, name="x")
    y = x
    for _ in range(steps):
        y = y * 1.0001 + 0.0
    return x, y.sum()


def _recorded_chain(steps: int) -> Trace:
    _, loss = _chain(steps)
    with autograd_viz.record() as trace:
        loss.backward()
    return trace


def test_around_keeps_the_nodes_within_depth_edges_either_way() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    loss = (x.exp() * 2.0).tanh().sum()
    view = dot.build_view(graph_of(loss))
    exp = graph_select.find_node(view, "ExpBackward0")
    near = graph_select.around(view, "ExpBackward0", 1)
    names = sorted(n.info.name for n in near.nodes.values())
    assert names == ["AccumulateGrad", "ExpBackward0", "MulBackward0"]
    assert near.elided == 2 and set(near.elided_near) == {
        graph_select.find_node(near, "MulBackward0")
    }
    assert near.notices == ("showing the 3 nodes within 1 edge of ExpBackward0; 2 more not shown",)
    assert graph_select.around(view, view.nodes[exp].info.id, 0).nodes.keys() == {exp}
    assert graph_select.around(view, "ExpBackward0", 9) is view


def test_around_explains_names_it_cannot_use() -> None:
    x = engine.tensor([1.0], requires_grad=True)
    view = dot.build_view(graph_of((x * 2.0 * 3.0).sum()))
    with pytest.raises(
        GraphViewError,
        match=r"2 nodes are named 'MulBackward0'; name one with its id: "
        r"MulBackward0 #\d+, MulBackward0 #\d+$",
    ):
        graph_select.around(view, "MulBackward0", 1)
    with pytest.raises(
        GraphViewError,
        match="nothing named 'Nope' in this graph: no node id, node name, parameter or module path "
        "\\(it has AccumulateGrad, MulBackward0, SumBackward0\\)",
    ):
        graph_select.around(view, "Nope", 1)
    with pytest.raises(GraphViewError, match="no node with id 0 in this graph"):
        graph_select.around(view, 0, 1)
    with pytest.raises(ValueError, match="depth must be a non-negative integer, got -1"):
        graph_select.around(view, "SumBackward0", -1)


def test_collapse_folds_an_unrolled_chain_into_one_node_with_counts() -> None:
    trace = _recorded_chain(50)
    middle = (
        next(
            e.index
            for e in trace.events
            if e.kind == "node_start" and e.node_name == "MulBackward0"
        )
        + 200
    )
    view = dot.build_view(trace, middle)
    folded = graph_select.collapse(view)
    folds = [n for n in folded.nodes.values() if n.box is not None]
    assert len(folds) == 1
    fold = folds[0].box
    assert fold is not None
    assert set(fold.pattern) == {"AddBackward0", "MulBackward0"} and len(fold.pattern) == 2
    assert fold.count * 2 == len(fold.members) >= 96
    assert sum(fold.summary.statuses.values()) == len(fold.members) == fold.summary.nodes
    assert fold.summary.statuses["done"] > 0 and fold.summary.statuses["waiting"] > 0
    assert fold.summary.node_status is not None
    assert len(folded.nodes) == len(view.nodes) - len(fold.members) + 1
    # Edges into the run now end at the fold, edges out of it start there.
    keys = set(folded.nodes)
    assert all(e.tail in keys and e.head in keys for e in folded.edges)
    source = to_dot(trace, step=middle, collapse=True).source
    assert f"× {fold.count:,}" in source and "shape=box3d" in source
    assert re.search(r"folded \d+ nodes of repeated chains into 1", source)


def test_collapse_leaves_a_graph_without_repeats_alone_and_says_so() -> None:
    x = engine.tensor([1.0], requires_grad=True)
    view = dot.build_view(graph_of((x.exp() * 2.0).tanh().sum()))
    same = graph_select.collapse(view)
    assert same.nodes == view.nodes and same.edges == view.edges and same.boxes == view.boxes
    assert same.notices == (
        *view.notices,
        "nothing to fold: no pattern of up to 4 nodes repeats 3 times along a chain or the "
        "steps of a loop",
    )


def unrolled_rnn(steps: int) -> Trace:
    """``h = (h @ W + x).tanh()`` ``steps`` times: each step has its own ``x``, all share ``W``."""
    rng = np.random.default_rng(0)
    w = engine.tensor(rng.standard_normal((4, 4)) * 0.5, requires_grad=True, name="W")
    h = engine.tensor(np.zeros((1, 4)), requires_grad=True, name="h0")
    with autograd_viz.record() as trace:
        for t in range(steps):
            x = engine.tensor(rng.standard_normal((1, 4)), requires_grad=True, name=f"x{t}")
            h = (h @ w + x).tanh()
        h.sum().backward()
    return trace


def test_collapse_folds_the_steps_of_an_unrolled_rnn_with_their_side_inputs() -> None:
    trace = unrolled_rnn(30)
    middle = [e.index for e in trace.events if e.kind == "node_start"][45]
    view = dot.build_view(trace, middle)
    folded = graph_select.collapse(view)
    folds = [n for n in folded.nodes.values() if n.box is not None]
    assert len(folds) == 1
    fold = folds[0].box
    assert fold is not None
    assert fold.pattern == ("TanhBackward0", "AddBackward0 +AccumulateGrad", "MmBackward0")
    assert fold.count == 30 and len(fold.members) == 120
    assert fold.summary.statuses["done"] > 0 and fold.summary.statuses["waiting"] > 0
    # Left: the loss, the fold, and the inputs every step shares (W) or the first one takes (h0).
    leaves = {n.info.leaf.name for n in folded.nodes.values() if n.info.leaf is not None}
    assert leaves == {"W", "h0"} and len(folded.nodes) == 4
    w = next(k for k, n in folded.nodes.items() if n.info.leaf and n.info.leaf.name == "W")
    assert [(e.tail, e.head) for e in folded.edges if e.head == w] == [(folds[0].key, w)]
    assert {b.node for b in folded.boxes} <= set(folded.nodes)
    source = to_dot(trace, step=middle, collapse=True).source
    assert "× 30" in source and "folded 120 nodes of repeated chains into 1" in source


def test_dot_collapse_says_when_nothing_could_be_folded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autograd_viz.cli.main import main

    x = engine.tensor([1.0], requires_grad=True)
    with autograd_viz.record() as trace:
        (x.exp() * 2.0).tanh().sum().backward()
    trace.save(tmp_path / "t.jsonl")
    assert (
        main(["dot", str(tmp_path / "t.jsonl"), "-o", str(tmp_path / "g.dot"), "--collapse"]) == 0
    )
    assert "nothing to fold" in capsys.readouterr().out


def test_repeating_runs_find_the_longest_period_cover() -> None:
    names = ["A", "B", "A", "B", "A", "B", "C", "D", "D", "D", "E"]
    view_nodes = {f"k{i}": _fake(name) for i, name in enumerate(names)}
    runs = list(chains._repeating_runs(list(view_nodes), 3, lambda k: view_nodes[k].info.name))
    assert [(run[0], len(run), period) for run, period in runs] == [("k0", 6, 2), ("k7", 3, 1)]


def _fake(name: str) -> object:
    class Info:
        pass

    class Node:
        pass

    info, node = Info(), Node()
    info.name = name  # type: ignore[attr-defined]
    node.info = info  # type: ignore[attr-defined]
    return node


def test_max_nodes_keeps_the_nodes_nearest_the_root_and_says_how_many_are_left_out() -> None:
    trace = _recorded_chain(30)
    drawing = to_dot(trace, max_nodes=10)
    nodes = drawn_nodes(drawing)
    assert len(nodes) == 10
    topo = sorted((n.topological_nr for n in nodes.values()), reverse=True)
    view = dot.build_view(trace)
    highest = sorted((n.info.topological_nr for n in view.nodes.values()), reverse=True)[:10]
    assert topo == highest  # the chain's root end
    left_out = len(view.nodes) - 10
    assert f"⋯ {left_out:,} more nodes not shown" in drawing.source
    assert (
        f"showing 10 of {len(view.nodes):,} nodes, nearest the root first; {left_out:,} more not shown"
        in drawing.source
    )
    into_notice = [(t, h) for t, h, _ in drawn_edges(drawing) if h == "elided"]
    assert len(into_notice) == 1 and into_notice[0][0] in nodes


def test_the_three_compose_around_then_collapse_then_budget() -> None:
    trace = _recorded_chain(200)
    view = dot.build_view(trace)
    root_id = view.nodes["n0"].info.id
    near = graph_select.around(view, root_id, 40)
    assert len(near.nodes) == 41
    folded = graph_select.collapse(near)
    assert len(folded.nodes) == 2  # the root, and one fold of the 40 links after it
    small = graph_select.limit(folded, 1)
    assert (
        dot.select(view, ViewOptions(around=root_id, depth=40, collapse=True, max_nodes=1)) == small
    )
    assert list(small.nodes) == ["n0"] and len(small.notices) == 3
    assert small.elided == (len(view.nodes) - 41) + 1


def test_max_nodes_must_be_positive() -> None:
    view = dot.build_view(graph_of(_chain(2)[1]))
    with pytest.raises(ValueError, match="max_nodes must be a positive integer, got 0"):
        graph_select.limit(view, 0)
    assert graph_select.limit(view, 100) is view
