"""The module view model on our engine's scopes: tree, folds, levels, summaries, names, DOT."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import autograd_viz
import engine
from autograd_viz import cli
from autograd_viz.draw.model import select as graph_select
from autograd_viz.draw.model import showing, totals
from autograd_viz.draw.model.graph_view import GraphView, GraphViewError, from_state
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.model.targets import Names, expand_braces, node_name
from autograd_viz.draw.model.tree import ModuleTree, fold_name
from autograd_viz.draw.render import dot
from autograd_viz.trace import Trace
from autograd_viz.trace.replay import NodeStatus
from tests.viz.dotting import SVG

LAYERS = 12


def _linear(x: engine.Tensor, w: engine.Tensor, b: engine.Tensor, name: str) -> engine.Tensor:
    with engine.scope(name, kind="Linear"):
        return x @ w + b


def _params(rng: np.random.Generator, prefix: str, n: int) -> dict[str, engine.Tensor]:
    def p(name: str, *shape: int) -> engine.Tensor:
        data = rng.standard_normal(shape) * 0.3
        return engine.tensor(data, requires_grad=True, name=f"{prefix}.{name}")

    return {"attn.w": p("attn.w", n, n), "attn.b": p("attn.b", n), "mlp.w": p("mlp.w", n, n)}


def transformer_trace(layers: int = LAYERS) -> Trace:
    """A GPT-like stack: ``transformer.h.<i>`` blocks with ``attn`` and ``mlp``, then a head."""
    rng = np.random.default_rng(0)
    n = 4
    blocks = [_params(rng, f"transformer.h.{i}", n) for i in range(layers)]
    head = engine.tensor(rng.standard_normal((n, 1)), requires_grad=True, name="lm_head.weight")
    bias = engine.tensor(np.zeros(1), requires_grad=True, name="lm_head.bias")
    x = engine.tensor(rng.standard_normal((2, n)))
    with engine.scope("transformer", kind="Transformer"):
        for i, p in enumerate(blocks):
            with engine.scope(f"h.{i}", kind="Block"):
                with engine.scope("attn", kind="Attention"):
                    a = (x @ p["attn.w"]).softmax(-1) + p["attn.b"]
                with engine.scope("mlp", kind="MLP"):
                    m = (a @ p["mlp.w"]).tanh()
                x = x + m
    loss = _linear(x, head, bias, "lm_head").sum()
    with autograd_viz.record() as trace:
        loss.backward()
    return trace


def unrolled_trace(steps: int = 12) -> Trace:
    """A cell called ``steps`` times on its own output (an unrolled RNN)."""
    w = engine.tensor(np.eye(3) * 0.5, requires_grad=True, name="cell.weight")
    h = engine.tensor(np.ones((1, 3)), requires_grad=True, name="h0")
    for _ in range(steps):
        with engine.scope("cell", kind="Cell"):
            h = (h @ w).tanh()
    with autograd_viz.record() as trace:
        h.sum().backward()
    return trace


def _view(trace: Trace, step: int | None = None) -> GraphView:
    return from_state(trace.state_at(len(trace) if step is None else step))


def _tree(view: GraphView) -> ModuleTree:
    return ModuleTree.of_view(view)


def _names(view: GraphView) -> Names:
    return Names(((k, n.info) for k, n in view.nodes.items()), _tree(view))


# -- the tree and its folds ------------------------------------------------------------


def test_the_tree_follows_the_scopes_and_folds_the_repeated_blocks() -> None:
    view = _view(transformer_trace())
    tree = _tree(view)
    roots = [tree.scopes[i].name for i in tree.roots]
    assert roots == ["transformer", "lm_head"]
    transformer = tree.scopes[tree.roots[0]]
    blocks = [tree.scopes[i] for i in transformer.children]
    assert [b.name for b in blocks] == [f"transformer.h.{i}" for i in range(LAYERS)]
    assert {b.kind for b in blocks} == {"Block"} and {b.depth for b in blocks} == {2}
    assert [tree.scopes[c].name for c in blocks[3].children] == [
        "transformer.h.3.attn",
        "transformer.h.3.mlp",
    ]
    (group,) = tree.groups
    assert group.name == "transformer.h.{0..11}" and group.count == LAYERS
    assert group.kind == "Block" and group.parent == transformer.index
    # Every node is in exactly one place: outside any module or in its innermost call.
    placed = list(tree.outside) + [k for s in tree.scopes for k in s.nodes]
    assert sorted(placed) == sorted(view.nodes)
    assert transformer.size == len(tree.members(transformer.index))


def test_the_calls_of_an_unrolled_cell_fold_into_one_box_with_their_count() -> None:
    view = _view(unrolled_trace(12))
    tree = _tree(view)
    assert [tree.scopes[i].name for i in tree.roots] == [f"cell:{i}" for i in range(12)]
    (group,) = tree.groups
    # The first call also made the weight's AccumulateGrad, and still folds with the others.
    assert group.name == "cell:{0..11}" and group.count == 12
    picture = showing.module_view(view)
    (box,) = [n.box for n in picture.nodes.values() if n.box is not None]
    assert box.count == 12 and box.name == "cell:{0..11}"
    assert box.summary.nodes == len(view.nodes) - len(tree.outside)


def test_alike_calls_side_by_side_or_around_their_parents_node_do_not_fold() -> None:
    w = engine.tensor(np.eye(2), requires_grad=True, name="w")
    x = engine.tensor(np.ones((1, 2)), requires_grad=True, name="x")
    with engine.scope("wte", kind="Embedding"):
        a = (x @ w).tanh()
    with engine.scope("wpe", kind="Embedding"):
        b = (x @ w).tanh()
    s = a + b
    with engine.scope("linear1", kind="Linear"):
        c = s @ w
    c = c.relu()  # the parent's own node, between two alike calls
    with engine.scope("linear2", kind="Linear"):
        d = c @ w
    with autograd_viz.record() as trace:
        d.sum().backward()
    view = _view(trace)
    assert not _tree(view).groups
    without_edges = ModuleTree.build(((k, n.info) for k, n in view.nodes.items()), view.modules)
    assert [g.name for g in without_edges.groups] == ["{wte,wpe}", "{linear1,linear2}"]


def test_fold_names_read_back_as_their_members() -> None:
    names = [f"transformer.h.{i}" for i in range(12)]
    assert fold_name(names) == "transformer.h.{0..11}"
    assert expand_braces(fold_name(names)) == names
    calls = [f"cell:{i}" for i in range(3, 9)]
    assert fold_name(calls) == "cell:{3..8}" and expand_braces("cell:{3..8}") == calls
    odd = ["blocks.a.ff", "blocks.b.ff", "blocks.c.ff"]
    assert fold_name(odd) == "blocks.{a,b,c}.ff" and expand_braces(fold_name(odd)) == odd
    assert fold_name(["layer.10", "layer.11"]) == "layer.{10..11}"


# -- levels and boxes ------------------------------------------------------------------


def test_levels_count_what_they_draw_and_the_default_fits_the_budget() -> None:
    view = _view(transformer_trace())
    tree = _tree(view)
    for level in range(tree.max_depth + 1):
        chosen = showing.choose(tree, level=level)
        picture = showing.apply(view, tree, chosen)
        drawn = len(picture.nodes) + len(picture.boxes)
        assert drawn == tree.count(level), level
    assert tree.count(0) == 2 + len(tree.outside)  # transformer and lm_head, closed
    counts = [tree.count(level) for level in range(tree.max_depth + 1)]
    assert counts == sorted(counts) and counts[0] < counts[-1]
    for budget in range(counts[0], counts[-1] + 1):
        level = tree.default_level(budget)
        assert counts[level] <= budget and (level == tree.max_depth or counts[level + 1] > budget)
        small = showing.module_view(view, max_boxes=budget)
        assert len(small.nodes) + len(small.boxes) <= budget


def test_the_default_level_asked_again_is_the_answer_for_those_arguments() -> None:
    # A tree keeps its answers (an animation asks at every frame): each is the one a new
    # tree gives for the same budget and unfolded groups, whatever was asked before.
    view = _view(transformer_trace())
    tree = _tree(view)
    unfolded = frozenset({tree.groups[0].index})
    budgets = range(tree.count(0), tree.count(tree.max_depth) + 2)
    questions = [(b, u) for b in budgets for u in (frozenset(), unfolded)]
    first = [tree.default_level(b, u) for b, u in questions]
    again = [tree.default_level(b, u) for b, u in reversed(questions)][::-1]
    fresh = [_tree(view).default_level(b, u) for b, u in questions]
    assert first == again == fresh
    assert len(set(first)) > 1 and first != [tree.default_level(b) for b, _ in questions]


def test_an_unfolded_fold_shows_its_calls_as_boxes_until_one_is_opened() -> None:
    view = _view(transformer_trace())
    tree = _tree(view)
    group = tree.groups[0]
    blocks = {f"transformer.h.{i}" for i in range(LAYERS)}
    for level in range(tree.max_depth + 1):  # no level opens the calls of a fold
        chosen = showing.choose(tree, level=level, unfold=[group.index])
        picture = showing.apply(view, tree, chosen)
        boxes = {n.box.name for n in picture.nodes.values() if n.box is not None}
        assert blocks <= boxes or level == 0
        assert len(picture.nodes) + len(picture.boxes) == tree.count(level, chosen.unfolded)
    (block3,) = [s.index for s in tree.scopes if s.name == "transformer.h.3"]
    chosen = showing.choose(tree, level=3, unfold=[group.index], open=[block3])
    picture = showing.apply(view, tree, chosen)
    boxes = {n.box.name for n in picture.nodes.values() if n.box is not None}
    assert boxes == (blocks - {"transformer.h.3"}) | {
        "transformer.h.3.attn",
        "transformer.h.3.mlp",
    }
    assert "transformer.h.3" in {c.name for c in picture.clusters.values()}


def _sum_check(picture: GraphView, view: GraphView) -> None:
    """Every box's summary is the sum of the nodes it stands for."""
    for node in picture.nodes.values():
        box = node.box
        if box is None:
            continue
        members = [view.nodes[k] for k in box.members]
        summary = box.summary
        assert summary.nodes == len(members)
        assert summary.remaining == sum(m.remaining for m in members)
        assert summary.dependencies == sum(m.info.dependencies for m in members)
        assert summary.non_finite == sum(m.non_finite for m in members)
        topos = [m.info.topological_nr for m in members]
        assert summary.topological_nrs == (min(topos), max(topos))
        seqs = [m.info.sequence_nr for m in members if m.info.leaf is None]
        if seqs:
            assert summary.sequence_nrs == (min(seqs), max(seqs))
        counted: dict[str, int] = {}
        for m in members:
            status = "not run" if m.status is None else m.status.value
            counted[status] = counted.get(status, 0) + 1
        assert dict(summary.statuses) == counted
        keys = set(box.members)
        into = [e for e in view.edges if e.head in keys and e.tail not in keys]
        assert summary.inputs == len(into)
        assert summary.waiting_inputs == sum(not e.delivered and not e.pruned for e in into)


def test_box_summaries_are_the_sums_of_their_nodes_at_every_step() -> None:
    trace = transformer_trace(4)
    tree_view = _view(trace)
    tree = _tree(tree_view)
    statuses: set[showing.BoxStatus] = set()
    for step in [*range(0, len(trace), 7), len(trace)]:
        view = _view(trace, step)
        picture = showing.apply(view, tree, showing.choose(tree, level=1))
        _sum_check(picture, view)
        statuses.update(n.box.summary.status for n in picture.nodes.values() if n.box)
    assert statuses >= {
        showing.BoxStatus.NOT_STARTED,
        showing.BoxStatus.RUNNING,
        showing.BoxStatus.DONE,
    }


def test_a_picture_not_summed_draws_the_same_boxes_and_edges_without_summaries() -> None:
    trace = transformer_trace(4)
    tree = _tree(_view(trace))
    view = _view(trace, len(trace) // 2)
    chosen = showing.choose(tree, level=1)
    chosen = replace(chosen, open=chosen.open | {tree.roots[0]})  # clusters too
    summed = showing.apply(view, tree, chosen)
    bare = showing.apply(view, tree, chosen, summed=False)
    assert bare.clusters and any(n.box for n in bare.nodes.values())
    assert list(bare.nodes) == list(summed.nodes)
    assert bare.edges == summed.edges
    assert bare.cluster_of == summed.cluster_of
    for key, node in bare.nodes.items():
        if node.box is None:
            assert node == summed.nodes[key]
        else:
            assert node.box.members == summed.nodes[key].box.members  # type: ignore[union-attr]
            assert node.box.summary is showing.NOT_SUMMED
            assert summed.nodes[key].box.summary.nodes == len(node.box.members)  # type: ignore[union-attr]
    assert all(c.summary is showing.NOT_SUMMED for c in bare.clusters.values())
    assert list(bare.clusters) == list(summed.clusters)


def test_a_box_holding_a_nan_says_so_and_is_failed() -> None:
    x = engine.tensor([0.0, 4.0], requires_grad=True, name="x")
    with engine.scope("encoder", kind="Encoder"):
        with engine.scope("bad", kind="Sqrt"):
            y = x.sqrt()
        with engine.scope("fine", kind="Tanh"):
            z = y.tanh()
    with autograd_viz.record() as trace:
        z.sum().backward()
    view = _view(trace)
    picture = showing.module_view(view, level=1)
    boxes = {n.box.name: n.box for n in picture.nodes.values() if n.box is not None}
    assert boxes["encoder.bad"].summary.status is showing.BoxStatus.FAILED
    assert boxes["encoder.bad"].summary.non_finite == 2  # SqrtBackward0 and x's AccumulateGrad
    assert boxes["encoder.fine"].summary.status is showing.BoxStatus.DONE
    _sum_check(picture, view)
    encoder = [c for c in picture.clusters.values() if c.name == "encoder"]
    assert encoder[0].summary.status is showing.BoxStatus.FAILED
    assert "⚠ 2 with NaN/Inf" in autograd_viz.to_dot(trace, level=1).source


def test_the_running_nodes_modules_open_by_themselves_at_a_step() -> None:
    trace = transformer_trace()
    starts = [e.index + 1 for e in trace.events if e.kind == "node_start"]
    step = starts[len(starts) // 2]
    view = _view(trace, step)
    (running,) = [n for n in view.nodes.values() if n.status is NodeStatus.RUNNING]
    picture = showing.module_view(view, max_boxes=40)
    assert running.key in picture.nodes  # drawn as itself, not inside a box
    chain = []
    cluster = picture.cluster_of.get(running.key)
    while cluster is not None:
        chain.append(picture.clusters[cluster].name)
        cluster = picture.clusters[cluster].parent
    assert chain[-1] == "transformer" and re.fullmatch(r"transformer\.h\.\d+(\.\w+)?", chain[0])
    # Its neighbours stay closed: the other blocks are boxes with their count, one per
    # status: the later blocks (run first) done, the earlier ones not started (the one
    # just before it, holding a gradient already, running), each status true of every
    # block in its box.
    folds = [n.box for n in picture.nodes.values() if n.box is not None and n.box.group is not None]
    block = int(chain[0].split(".")[2])
    layers = {f.name: [int(n.rsplit(".", 1)[1]) for n in expand_braces(f.name)] for f in folds}
    assert sorted(i for f in folds for i in layers[f.name]) == [
        i for i in range(LAYERS) if i != block
    ]
    status = totals.status_of_calls(view, ModuleTree.of_view(view))
    statuses = {f.summary.status for f in folds}
    assert {showing.BoxStatus.DONE, showing.BoxStatus.NOT_STARTED} <= statuses
    assert len(statuses) == len(folds)
    for f in folds:
        assert f.count == len(layers[f.name]) == len(f.scopes)
        assert {status(i) for i in f.scopes} == {f.summary.status}, f.name
        if f.summary.status is showing.BoxStatus.DONE:
            assert all(i > block for i in layers[f.name]), f.name
        else:
            assert all(i < block for i in layers[f.name]), f.name
    _sum_check(picture, view)
    assert len(picture.nodes) + len(picture.boxes) <= 40


def test_expand_all_is_the_drawing_without_modules() -> None:
    trace = transformer_trace(3)
    with_modules = autograd_viz.to_dot(trace, expand="all").source
    assert with_modules == autograd_viz.to_dot(_strip_scopes(trace)).source
    assert "cluster_t0_d0_c" not in with_modules
    assert autograd_viz.to_dot(trace).source != with_modules


def _strip_scopes(trace: Trace) -> Trace:
    tasks = {
        gid: replace(
            info,
            modules={},
            nodes={k: replace(n, scope=()) for k, n in info.nodes.items()},
        )
        for gid, info in trace.graph_tasks.items()
    }
    return Trace(trace.header, tasks, list(trace.events))


# -- names -----------------------------------------------------------------------------


def test_every_name_a_picture_shows_is_read_back() -> None:
    view = _view(transformer_trace())
    names = _names(view)
    shown = names.shown()
    assert "transformer.h.{0..11}" in shown and "lm_head.weight" in shown
    for name in shown:
        if name.startswith("AccumulateGrad #") or " #" in name:
            target = names.resolve(name)
            assert target.kind == "node" and node_name(view.nodes[target.nodes[0]].info) == name
            continue
        assert names.resolve(name).nodes, name
    picture = showing.module_view(view)
    for node in picture.nodes.values():
        label = node.box.name if node.box is not None else node_name(node.info)
        assert names.resolve(label).nodes
    for cluster in picture.clusters.values():
        assert names.resolve(cluster.name).scopes


def test_names_resolve_to_what_they_name() -> None:
    view = _view(transformer_trace())
    names = _names(view)
    tree = names.tree
    fold = names.resolve("transformer.h.{0..11}")
    assert fold.kind == "fold" and fold.group == 0 and len(fold.scopes) == LAYERS
    container = names.resolve("transformer.h")  # never called itself: the calls inside it
    assert set(container.scopes) == set(fold.scopes) and container.group == 0
    block = names.resolve("transformer.h.3")
    assert block.kind == "module" and tree.scopes[block.scopes[0]].name == "transformer.h.3"
    assert set(block.nodes) == set(tree.members(block.scopes[0]))
    attn = names.resolve("transformer.h.*.attn")
    assert len(attn.scopes) == LAYERS and attn.kind == "module"
    param = names.resolve("transformer.h.3.attn.w")
    assert param.kind == "parameter"
    (key,) = param.nodes
    assert view.nodes[key].info.leaf is not None
    info = view.nodes[key].info
    assert names.resolve(f"#{info.id}").nodes == (key,)
    assert names.resolve(str(info.id)).nodes == (key,)
    with pytest.raises(GraphViewError, match="is 'AccumulateGrad', not 'TanhBackward0'"):
        names.resolve(f"TanhBackward0 #{info.id}")
    with pytest.raises(GraphViewError, match="12 nodes are named 'TanhBackward0'"):
        names.resolve("TanhBackward0")
    with pytest.raises(GraphViewError, match="did you mean 'transformer.h.3'"):
        names.resolve("transfomer.h.3")


def test_a_name_of_spaces_or_padded_with_them_is_read_as_given_first() -> None:
    w = engine.tensor(np.ones(2), requires_grad=True, name=" w")
    v = engine.tensor(np.ones(2), requires_grad=True, name="w")
    with engine.scope(" ", kind="Block"):
        y = (w * 2.0).tanh()
    with engine.scope(" a", kind="Block"):
        y = (y * v).exp()
    with engine.scope("a", kind="Block"):
        y = y.sin()
    with autograd_viz.record() as trace:
        y.sum().backward()
    view = _view(trace)
    names = _names(view)
    paths = {
        text: [names.tree.scopes[i].path for i in names.resolve(text).scopes]
        for text in [" ", " a", "a", "a "]
    }
    assert paths == {" ": [" "], " a": [" a"], "a": ["a"], "a ": ["a"]}
    notices = {text: graph_select.around(view, text, 1).notices[0] for text in [" a", "a"]}
    assert " edge of ' a'" in notices[" a"] and " edge of a" in notices["a"], notices
    leaves = {
        text: [view.nodes[key].info.leaf for key in names.resolve(text).nodes]
        for text in [" w", "w", " w "]
    }
    assert {text: [leaf.name for leaf in found if leaf] for text, found in leaves.items()} == {
        " w": [" w"],
        "w": ["w"],
        " w ": ["w"],
    }
    for empty in ["", "  "]:  # no module is called "  "
        with pytest.raises(GraphViewError, match="an empty name names nothing"):
            names.resolve(empty)


# -- DOT ---------------------------------------------------------------------------------


def test_dot_draws_modules_as_clusters_and_folds_as_boxes() -> None:
    trace = transformer_trace()
    source = autograd_viz.to_dot(trace).source
    # One stack of the twelve blocks, the first drawn inside; no box for the eleven others.
    assert "transformer.h.{0..11}</B> × 12" in source and "class=stack" in source
    assert "transformer.h.{1..11}" not in source
    assert "transformer.h.0.attn</B>" in source
    leaves = autograd_viz.to_dot(trace, leaves=True).source
    assert "transformer.h.{0..11}</B> × 12" in leaves and 'class="fold done"' in leaves
    assert "shaded frame: alike calls (× count), one of them drawn inside" in source  # the legend
    assert "3D box" not in autograd_viz.to_dot(trace, expand="all").source
    assert re.search(r"subgraph cluster_t0_d0_c\d+ \{", source)
    opened = autograd_viz.to_dot(trace, expand="transformer.h.3").source
    assert "transformer.h.3.attn</B> <I>Attention</I>" in opened
    # Exactly that call opens, drawn in the fold's stack; --around keeps the others one box.
    assert "transformer.h.{0..11}</B> × 12" in opened and "drawn: transformer.h.3 " in opened
    assert "transformer.h.4</B>" not in opened and "transformer.h.4.attn" not in opened
    around = autograd_viz.to_dot(trace, around="transformer.h.3", depth=1).source
    assert "transformer.h.{0..2,4..11}</B> × 11" in around
    fold = autograd_viz.to_dot(trace, expand="transformer.h.{0..11}").source
    assert "transformer.h.0.attn</B>" in fold and "transformer.h.1.attn</B>" not in fold


def test_around_a_module_draws_it_whole_with_its_neighbours() -> None:
    trace = transformer_trace()
    view = dot.select(_view(trace), ViewOptions(around="transformer.h.3.attn", depth=1))
    names = {c.name for c in view.clusters.values()}
    assert "transformer.h.3.attn" in names
    assert any("within 1 edge of transformer.h.3.attn" in n for n in view.notices)
    param = dot.select(_view(trace), ViewOptions(around="transformer.h.3.attn.w", depth=1))
    assert any(
        n.info.leaf and n.info.leaf.name == "transformer.h.3.attn.w" for n in param.nodes.values()
    )


def test_module_names_are_text_in_dot() -> None:
    hostile = 'h"<b>{0}</b>\\N\x1b[31m'
    w = engine.tensor(np.ones((2, 2)), requires_grad=True)
    x = engine.tensor(np.ones((1, 2)))
    with engine.scope(hostile, kind="<i>Kind</i>"):
        y = (x @ w).tanh()
    with autograd_viz.record() as trace:
        y.sum().backward()
    graph = autograd_viz.to_dot(trace, level=0)
    source = graph.source
    assert chr(27) not in source and "<I><i>" not in source
    assert r"<B>h&quot;&lt;b&gt;{0}&lt;/b&gt;\\N\\x1b[31m</B>" in source
    if shutil.which("dot"):
        svg = ET.fromstring(dot.pipe(graph, "svg"))
        texts = [t.text or "" for t in svg.iter(f"{SVG}text")]
        assert 'h"<b>{0}</b>\\N\\x1b[31m' in texts and "<i>Kind</i>" in texts


# -- the command line ------------------------------------------------------------------


def test_dot_command_takes_level_expand_and_around_a_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace_file = tmp_path / "gpt.jsonl"
    transformer_trace().save(trace_file)
    out = tmp_path / "g.dot"
    assert cli.main(["dot", str(trace_file), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "nodes and 3 module boxes," in printed and "drawn by module (level 3)" in printed
    assert "1 stack draws one call for 11 more" in printed
    assert "transformer.h.{0..11}</B> × 12" in out.read_text()
    assert cli.main(["dot", str(trace_file), "-o", str(out), "--leaves"]) == 0
    assert "nodes and 1 module box," in capsys.readouterr().out
    assert "transformer.h.{0..11}</B> × 12" in out.read_text()
    argv = ["dot", str(trace_file), "-o", str(out), "--level", "0", "--expand", "lm_head"]
    assert cli.main(argv) == 0
    source = out.read_text()
    assert "<B>transformer</B>" in source and "lm_head</B> <I>Linear</I>" in source
    argv = ["dot", str(trace_file), "-o", str(out), "--around", "transformer.h.{2..3}"]
    assert cli.main(argv) == 0
    assert "within 2 edges of transformer.h.{2..3}" in capsys.readouterr().out
    assert cli.main(["dot", str(trace_file), "-o", str(out), "--expand", "all"]) == 0
    assert "module boxes" not in capsys.readouterr().out
    assert cli.main(["dot", str(trace_file), "-o", str(out), "--expand", "transformer.x"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("autograd-viz: error: nothing named 'transformer.x' in this graph")
    assert err.count("\n") == 1


def test_collapse_folds_chains_inside_one_call_never_across_calls() -> None:
    x = engine.tensor([1.0], requires_grad=True, name="x")
    y = x
    with engine.scope("loop", kind="Loop"):
        for _ in range(20):
            y = y * 1.0001 + 0.0
    for _ in range(3):
        with engine.scope("cell", kind="Cell"):
            for _ in range(2):
                y = y * 1.0001 + 0.0
    with autograd_viz.record() as trace:
        y.sum().backward()
    view = _view(trace)
    folded = showing.show(view, ViewOptions(collapse=True, expand=["all"]))
    (fold,) = [n.box for n in folded.nodes.values() if n.box is not None]
    assert fold.count == 20 and fold.pattern == ("AddBackward0", "MulBackward0")
    scopes = {view.nodes[k].info.scope for k in fold.members}
    assert scopes == {(("loop", 0),)}
    # The cell's three calls fold as calls, by the module view.
    assert "cell:{0..2}" in {n.box.name for n in showing.show(view).nodes.values() if n.box}


# -- random programs -------------------------------------------------------------------


def _random_program(seed: int) -> Trace:
    """Ops on two streams inside randomly nested, repeated and shared scopes."""
    rng = np.random.default_rng(seed)
    w = engine.tensor(rng.standard_normal((2, 2)), requires_grad=True, name="w")
    xs = [
        engine.tensor(rng.standard_normal((1, 2)), requires_grad=True, name=f"x{i}")
        for i in range(2)
    ]

    def op() -> None:
        i = int(rng.integers(0, 2))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            xs[i] = (xs[i] @ w).tanh()
        elif kind == 1:
            xs[i] = xs[i] + xs[1 - i] * 0.5
        else:
            xs[i] = xs[i] * 2.0

    def body(depth: int) -> None:
        for _ in range(int(rng.integers(2, 5))):
            if depth < 3 and rng.random() < 0.6:
                name = ["a", "b", "block", "cell"][int(rng.integers(0, 4))]
                inner = int(rng.integers(0, 1 << 30))
                for _ in range(int(rng.integers(1, 4))):  # one call, or several alike
                    with engine.scope(name, kind=name.title()):
                        saved = rng.bit_generator.state
                        rng.bit_generator.state = np.random.default_rng(inner).bit_generator.state
                        body(depth + 1)
                        rng.bit_generator.state = saved
            else:
                op()

    body(0)
    with autograd_viz.record() as trace:
        (xs[0].sum() + xs[1].sum()).backward()
    return trace


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_keep_every_invariant(seed: int) -> None:
    trace = _random_program(seed)
    rng = np.random.default_rng(seed)
    for step in sorted({0, len(trace), *rng.integers(0, len(trace) + 1, 3).tolist()}):
        view = _view(trace, step)
        tree = _tree(view)
        names = Names(((k, n.info) for k, n in view.nodes.items()), tree)
        for level in range(tree.max_depth + 1):
            for unfold in ((), tuple(g.index for g in tree.groups)):
                chosen = showing.choose(tree, level=level, unfold=unfold)
                picture = showing.apply(view, tree, chosen)
                # Every node is drawn once: as itself, or in exactly one box.
                boxed = [k for n in picture.nodes.values() if n.box for k in n.box.members]
                own = [k for k, n in picture.nodes.items() if n.box is None]
                assert sorted(boxed + own) == sorted(view.nodes)
                assert len(picture.nodes) + len(picture.boxes) == tree.count(level, chosen.unfolded)
                _sum_check(picture, view)
                for edge in picture.edges:
                    assert edge.tail in picture.nodes and edge.head in picture.nodes
        for name in names.shown():
            if " #" not in name:
                assert names.resolve(name).nodes, name
        default = showing.module_view(view)
        assert all(n.box is None or n.box.members for n in default.nodes.values())
        keys = list(view.nodes)
        for key in (keys[int(i)] for i in rng.integers(0, len(keys), 3)):
            focused = showing.module_view(view, focus=[key], max_boxes=20)
            assert key in focused.nodes  # the node a step is about is never inside a box
            expanded = showing.module_view(view, expand=[node_name(view.nodes[key].info)])
            assert key in expanded.nodes
