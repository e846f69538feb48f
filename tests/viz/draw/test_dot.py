"""The Graphviz exporter: numbers and counts as the seeds define them, state at every step,
statuses, clusters, escaping, golden DOT and rendered SVG."""

from __future__ import annotations

import itertools
import os
import re
import shutil
from pathlib import Path
from typing import Any

import graphviz
import numpy as np
import pytest

import autograd_viz
import engine
from autograd_viz.draw.render import dot
from autograd_viz.drawing import graph_of, to_dot
from autograd_viz.trace import Trace
from autograd_viz.trace.text import printable
from engine import graph
from tests.graphs import FailsInBackward, Reentrant, reachable
from tests.viz.dotting import (
    drawn_edges,
    drawn_nodes,
    fresh_numbers,
    needs_dot,
    paper_rnn,
    svg_groups,
    svg_text,
    svg_tree,
)

__all__ = ["fresh_numbers"]  # a fixture, used by name

GOLDEN = Path(__file__).parents[1] / "golden"
UPDATE = os.environ.get("AUTOGRAD_VIZ_UPDATE_GOLDEN") == "1"


def _check_golden(name: str, source: str) -> None:
    """Compare with ``golden/NAME``; AUTOGRAD_VIZ_UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(source, encoding="utf-8")
    assert path.exists(), f"{path} is missing; run with AUTOGRAD_VIZ_UPDATE_GOLDEN=1 to create it"
    assert source == path.read_text(encoding="utf-8")


def _blog_graph() -> tuple[engine.Tensor, engine.Tensor, engine.Tensor]:
    """The blog's example, exp(x * y).sum(), with y also used a second time (a fan-in)."""
    x = engine.tensor([0.5, 0.75], requires_grad=True, name="x")
    y = engine.tensor([0.1, 0.90], requires_grad=True, name="y")
    z = (engine.exp(x * y) + y).sum()
    return x, y, z


def _reference_numbers(root: engine.Node) -> tuple[dict[int, int], dict[int, int]]:
    """Longest path to a leaf and number of incoming edges, by node id, from first principles."""
    nodes = reachable(root)
    incoming = dict.fromkeys(nodes, 0)
    for node in nodes.values():
        for edge in node.next_edges:
            if edge is not None:
                incoming[edge.function.node_id] += 1
    longest: dict[int, int] = {}

    def depth(node: engine.Node) -> int:
        if node.node_id not in longest:
            children = [e.function for e in node.next_edges if e is not None]
            longest[node.node_id] = 1 + max(map(depth, children)) if children else 0
        return longest[node.node_id]

    depth(root)
    return longest, incoming


def _by_id(drawn: dict[str, Any], view_ids: dict[str, int]) -> dict[int, Any]:
    return {view_ids[key]: node for key, node in drawn.items()}


def _ids(target: Any, **kwargs: Any) -> dict[str, int]:
    view = dot.build_view(graph_of(target), **kwargs)
    return {key: node.info.id for key, node in view.nodes.items()}


# -- what the seeds define -------------------------------------------------------------


def test_topological_numbers_and_dependencies_follow_the_blogs_rules() -> None:
    _, _, z = _blog_graph()
    assert z.grad_fn is not None
    longest, incoming = _reference_numbers(z.grad_fn)
    drawn = _by_id(drawn_nodes(to_dot(z)), _ids(z))
    assert set(drawn) == set(longest)
    for node_id, node in drawn.items():
        assert node.topological_nr == longest[node_id], node
        assert node.dependencies == incoming[node_id], node
        assert node.remaining == node.dependencies  # before backward, nothing has arrived
    names = sorted((n.name, n.topological_nr, n.dependencies) for n in drawn.values())
    assert names == [
        ("AccumulateGrad", 0, 1),  # x
        ("AccumulateGrad", 0, 2),  # y: through MulBackward0 and AddBackward0
        ("AddBackward0", 3, 1),
        ("ExpBackward0", 2, 1),
        ("MulBackward0", 1, 1),
        ("SumBackward0", 4, 0),
    ]


def test_step_by_step_each_decrement_lowers_one_count_which_reaches_zero_before_the_node_runs() -> (
    None
):
    _, _, z = _blog_graph()
    with autograd_viz.record() as trace:
        z.backward()
    ids = _ids(trace)
    before = _by_id(drawn_nodes(to_dot(trace, step=0)), ids)
    for step, event in enumerate(trace.events, start=1):
        after = _by_id(drawn_nodes(to_dot(trace, step=step)), ids)
        changed = {i for i in after if after[i].remaining != before[i].remaining}
        if event.kind == "dependency_decrement":
            assert changed == {event.node_id}
            node = after[event.node_id]
            assert node.remaining == before[event.node_id].remaining - 1
            assert node.remaining == event.data["remaining"]
        else:
            assert not changed, (event.kind, changed)
        if event.kind == "node_start":
            assert after[event.node_id].remaining == 0
            assert after[event.node_id].status == "running"
        before = after
    assert all(node.status == "done" and node.remaining == 0 for node in before.values())


def test_executed_edges_turn_bold_as_gradients_are_delivered() -> None:
    _, _, z = _blog_graph()
    with autograd_viz.record() as trace:
        z.backward()
    start = [e for _, _, e in drawn_edges(to_dot(trace, step=0)) if "input" in e]
    end = [e for _, _, e in drawn_edges(to_dot(trace)) if "input" in e]
    assert len(start) == len(end) == 6
    assert not any("style=bold" in attrs for attrs in start)
    assert all("style=bold" in attrs for attrs in end)
    decrements = [e.index for e in trace.events if e.kind == "dependency_decrement"]
    middle = decrements[2] + 1  # three deliveries made
    bold = [a for _, _, a in drawn_edges(to_dot(trace, step=middle)) if "style=bold" in a]
    assert len(bold) == 3


def test_every_node_shows_name_numbers_dependencies_and_device() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    loss = ((x.to("sim:0") * 2.0).to("cpu") + x).sum()
    drawn = drawn_nodes(to_dot(loss))
    seen = {(n.name, n.device) for n in drawn.values()}
    assert ("MulBackward0", "sim:0") in seen
    assert ("SumBackward0", "cpu") in seen
    acc = next(n for n in drawn.values() if n.name == "AccumulateGrad")
    assert acc.sequence_nr == "2⁶⁴−1"
    view = dot.build_view(graph_of(loss))
    for key, node in drawn.items():
        assert node.sequence_nr in (str(view.nodes[key].info.sequence_nr), "2⁶⁴−1")


# -- statuses --------------------------------------------------------------------------


def test_pruned_nodes_are_dashed_and_captured_ones_have_a_double_border() -> None:
    x, y, z = _blog_graph()
    with autograd_viz.record() as trace:
        engine.grad([z], [x])
    drawing = to_dot(trace)
    drawn = drawn_nodes(drawing)
    acc_y = y.gradient_edge().function.node_id
    acc_x = x.gradient_edge().function.node_id
    by_id = _by_id(drawn, _ids(trace))
    assert by_id[acc_y].status == "pruned" and "dashed" in by_id[acc_y].attrs
    assert "peripheries=2" in by_id[acc_x].attrs
    pruned_edges = [a for _, head, a in drawn_edges(drawing) if "style=dashed" in a]
    assert len(pruned_edges) == 2  # both edges into y's AccumulateGrad


def test_a_failed_node_is_red_with_its_error_and_the_task_says_error() -> None:
    a = engine.tensor([1.0], requires_grad=True, name="a")
    loss = FailsInBackward.apply(a * 2.0).sum()
    with autograd_viz.record() as trace, pytest.raises(ValueError):
        loss.backward()
    source = to_dot(trace).source
    failed = [n for n in drawn_nodes(to_dot(trace)).values() if n.status == "failed"]
    assert [n.name for n in failed] == ["FailsInBackwardBackward"]
    assert dot.STATUS_STYLES["failed"].fill in failed[0].attrs
    assert "ValueError: this backward always fails" in source
    assert "graph task 1 · error" in re.sub(r"graph task \d+", "graph task 1", source)


def test_non_finite_gradients_cannot_be_missed() -> None:
    w = engine.tensor([0.0, 1.0], requires_grad=True, name="w")
    with autograd_viz.record() as trace, np.errstate(all="ignore"):
        (engine.log(w) * 0.0).sum().backward()
    drawing = to_dot(trace, values=True)
    flagged = [n for n in drawn_nodes(drawing).values() if n.status == "nonfinite"]
    assert {n.name for n in flagged} == {"LogBackward0", "AccumulateGrad"}
    assert all(dot.NON_FINITE.fill in n.attrs and "penwidth=4" in n.attrs for n in flagged)
    assert "⚠ NaN×1" in drawing.source
    red_edges = [a for _, _, a in drawn_edges(drawing) if dot.NON_FINITE.border in a]
    assert len(red_edges) == 1  # LogBackward0 → AccumulateGrad carries the NaN


def test_a_drawing_at_step_k_matches_the_replayed_state() -> None:
    _, _, z = _blog_graph()
    with autograd_viz.record() as trace:
        z.backward()
    for step in range(1, len(trace) + 1):
        state = trace.state_at(step)
        drawn = _by_id(drawn_nodes(to_dot(state)), _ids(state))
        for node_id, node in drawn.items():
            replayed = state.node(node_id)
            assert node.status == replayed.status.value
            assert node.remaining == replayed.remaining


# -- clusters --------------------------------------------------------------------------


def test_one_cluster_per_device() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    loss = ((x.to("sim:0") * 2.0).to("cpu") + (x.to("sim:1") * 3.0).to("cpu")).sum()
    with autograd_viz.record() as trace:
        loss.backward()
    source = to_dot(trace).source
    devices = sorted(re.findall(r"subgraph cluster_t0_d\d+ \{\n[^\n]*?<I>(.*?)</I>", source))
    assert devices == ["cpu", "sim:0", "sim:1"]


def test_a_reentrant_graph_task_is_its_own_cluster_linked_to_the_node_that_started_it() -> None:
    a = engine.tensor([1.0], requires_grad=True, name="a")
    loss = Reentrant.apply(a * 3.0, 1).sum()
    with autograd_viz.record() as trace:
        loss.backward()
    inner = next(t for t in trace.graph_tasks.values() if t.parent is not None)
    during = inner.first_event + 1
    drawing = to_dot(trace, step=during)
    source = drawing.source
    assert "subgraph cluster_t1 {" in source
    assert f"graph task {inner.id} · reentrant backward, depth 1 · running" in source
    links = [(t, h, a) for t, h, a in drawn_edges(drawing) if "reentrant backward" in a]
    assert len(links) == 1
    tail, head, attrs = links[0]
    view = dot.build_view(trace, during)
    assert view.nodes[tail].info.name == "ReentrantBackward"
    assert view.nodes[tail].graph_task == inner.parent
    assert view.nodes[head].graph_task == inner.id and "lhead=cluster_t1" in attrs
    # Before the reentrant call starts, its cluster is not drawn.
    assert "cluster_t1" not in to_dot(trace, step=inner.first_event).source
    # Asking for the inner task draws it alone.
    alone = dot.build_view(trace, during, graph_task=inner.id)
    assert [t.id for t in alone.tasks] == [inner.id]


# -- escaping --------------------------------------------------------------------------

HOSTILE = [
    'quote " and \\" backslash \\',
    "braces { } [ ] ; -> --",
    "<b>bold</b> & <i>html</i>",
    "<<TABLE><TR><TD>x</TD></TR></TABLE>>",
    "new\nline and tab\t and bell\x07",
    "&amp; &lt; entity",
    "\\N \\G \\l escapes",
]


def _hostile_function(name: str) -> type[engine.Function]:
    def forward(ctx: Any, x: engine.Tensor) -> engine.Tensor:
        return x * 1.0

    def backward(ctx: Any, grad: engine.Tensor) -> engine.Tensor:
        raise ValueError(f"failed: {name}")

    attrs = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return type(name, (engine.Function,), attrs)


def _hostile_trace() -> Trace:
    leaves = [engine.tensor([1.0], requires_grad=True, name=name) for name in HOSTILE]
    total = leaves[0] * 1.0
    for leaf in leaves[1:]:
        total = total + leaf
    failing = _hostile_function(HOSTILE[3]).apply(total)
    with autograd_viz.record() as trace, pytest.raises(ValueError):
        failing.sum().backward()
    return trace


@needs_dot
def test_hostile_names_render_as_text_never_as_dot_or_html() -> None:
    trace = _hostile_trace()
    drawing = to_dot(trace, values=True, saved=True)
    root = svg_tree(drawing)  # dot parsed it, and the SVG is well-formed XML
    view = dot.build_view(trace)
    texts = {g.get("id"): svg_text(g) for g in svg_groups(root, "node")}
    assert set(texts) >= set(view.nodes)
    leaf_texts = [texts[b.key] for b in view.boxes if b.kind == "leaf"]
    for name in HOSTILE:
        shown = printable(name, newlines=True)
        lines = [line.strip() for line in shown.split("\n")]
        assert any(
            [line.strip() for line in text.splitlines()[: len(lines)]] == lines
            for text in leaf_texts
        ), name
    function = next(n for n in view.nodes.values() if n.info.name.endswith("Backward"))
    assert svg_text(
        next(g for g in svg_groups(root, "node") if g.get("id") == function.key)
    ).startswith(HOSTILE[3] + "Backward")
    assert f"ValueError: failed: {HOSTILE[3]}" in "".join(root.itertext())


def test_escaping_functions() -> None:
    assert dot.html_text('<a href="x">&') == "&lt;a href=&quot;x&quot;&gt;&amp;"
    assert dot.html_text("a\nb") == 'a<BR ALIGN="CENTER"/>b'
    assert dot.html_text("bell\x07") == "bell\\\\x07"  # shown as bell\x07
    assert dot.html_text("\\N") == "\\\\N"
    # A backslash four times: Graphviz undoubles twice (see dot.plain_text).
    assert dot.plain_text("C:\\path\nnext") == "C:\\\\\\\\path\\nnext"
    quoted = graphviz.Digraph()
    quoted.node("n", tooltip=dot.plain_text('say "hi" \\'))
    assert 'tooltip="say \\"hi\\" \\\\\\\\"' in quoted.source


# -- golden DOT and rendered SVG -------------------------------------------------------


@pytest.mark.usefixtures("fresh_numbers")
def test_golden_dot_of_a_graph_before_backward() -> None:
    _check_golden("blog_before_backward.dot", to_dot(_blog_graph()[2]).source)


@pytest.mark.usefixtures("fresh_numbers")
def test_golden_dot_mid_backward_with_values_and_saved_tensors() -> None:
    _, _, z = _blog_graph()
    with autograd_viz.record() as trace:
        z.backward()
    middle = next(
        e.index for e in trace.events if e.kind == "node_start" and e.node_name == "MulBackward0"
    )
    _check_golden(
        "blog_mid_backward.dot", to_dot(trace, step=middle, values=True, saved=True).source
    )


@pytest.mark.usefixtures("fresh_numbers")
def test_the_same_graph_built_twice_gives_the_same_dot(monkeypatch: pytest.MonkeyPatch) -> None:
    first = to_dot(paper_rnn()).source
    monkeypatch.setattr(graph, "_node_ids", itertools.count(1))
    graph.restart_sequence_nr(0)
    assert to_dot(paper_rnn()).source == first


@needs_dot
def test_rendered_svg_has_every_node_edge_label_and_colour() -> None:
    loss = paper_rnn()
    with autograd_viz.record() as trace:
        loss.backward()
    step = next(
        e.index for e in trace.events if e.kind == "node_start" and e.node_name == "TanhBackward0"
    )
    drawing = to_dot(trace, step=step + 1)
    view = dot.build_view(trace, step + 1)
    root = svg_tree(drawing)
    nodes = {g.get("id"): g for g in svg_groups(root, "node")}
    backward = {k for k in nodes if k in view.nodes}
    assert backward == set(view.nodes)
    assert len([k for k in nodes if k.endswith("_leaf")]) == 4
    assert "legend" in nodes
    edges = svg_groups(root, "edge")
    assert len(edges) == len(view.edges) + 4  # four leaf boxes hang from their AccumulateGrad
    for key, node in view.nodes.items():
        group = nodes[key]
        text = svg_text(group)
        assert text.startswith(node.info.name)
        assert f"deps {node.remaining}/{node.info.dependencies}" in text
        fills = [p.get("fill") for p in group.iter() if p.get("fill") not in (None, "none")]
        assert dot.STATUS_STYLES[node.status].fill in fills  # type: ignore[index]
        assert node.status.value in (group.get("class") or "")  # type: ignore[union-attr]
    running = [k for k, n in view.nodes.items() if n.status == "running"]
    assert [view.nodes[k].info.name for k in running] == ["TanhBackward0"]
    leaf_texts = sorted(svg_text(nodes[k]).splitlines()[0] for k in nodes if k.endswith("_leaf"))
    assert leaf_texts == ["W_h", "W_x", "prev_h", "x"]


@needs_dot
@pytest.mark.parametrize("suffix", [".svg", ".png", ".pdf", ".dot"])
def test_save_writes_the_format_of_the_suffix(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"graph{suffix}"
    fmt = dot.save(to_dot(paper_rnn()), path)
    data = path.read_bytes()
    magic = {".svg": b"<?xml", ".png": b"\x89PNG", ".pdf": b"%PDF", ".dot": b"//"}[suffix]
    assert data.startswith(magic) and fmt == dot.FORMATS[suffix]


# -- errors ----------------------------------------------------------------------------


def test_bad_targets_and_arguments_are_named(tmp_path: Path) -> None:
    leaf = engine.tensor([1.0], requires_grad=True)
    with pytest.raises(dot.GraphViewError, match=re.escape("tensor 0 has no grad_fn (a leaf)")):
        to_dot(leaf)
    with pytest.raises(dot.GraphViewError, match="does not require grad"):
        to_dot(engine.tensor([1.0]))
    with pytest.raises(TypeError, match="got int"):
        to_dot(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="step and graph_task need a trace"):
        to_dot(leaf * 2.0, step=1)
    with autograd_viz.record() as trace:
        (leaf * 2.0).sum().backward()
    with pytest.raises(
        IndexError, match=re.escape(f"step 99 is outside this trace (0 .. {len(trace)})")
    ):
        to_dot(trace, step=99)
    with pytest.raises(dot.GraphViewError, match="graph task 12345 is not in the trace"):
        to_dot(trace, graph_task=12345)
    with pytest.raises(dot.GraphViewError, match="no backward call to draw"):
        to_dot(Trace())
    with pytest.raises(ValueError, match=re.escape("use one of .dot, .gv, .svg, .png, .pdf")):
        dot.save(to_dot(trace), tmp_path / "graph.jpeg")
    with pytest.raises(TypeError, match="pass the trace to choose the step"):
        to_dot(trace.state_at(2), step=3)


def test_missing_dot_is_a_clear_error_and_dot_source_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    drawing = to_dot(paper_rnn())
    with pytest.raises(dot.GraphvizNotFoundError, match="needs Graphviz's 'dot' program"):
        dot.save(drawing, tmp_path / "graph.svg")
    dot.save(drawing, tmp_path / "graph.dot")
    assert (tmp_path / "graph.dot").read_text(encoding="utf-8") == drawing.source
