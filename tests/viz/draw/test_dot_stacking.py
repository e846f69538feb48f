"""Module calls stacked down the page: what the invisible edges promise, and dot failing on them."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import autograd_viz
import engine
from autograd_viz import cli
from autograd_viz.draw.model.graph_view import GraphView
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.render import dot, dot_clusters
from autograd_viz.trace import Trace
from tests.viz.dotting import dot_that_crashes_on, needs_dot, svg_groups, svg_tree
from tests.viz.draw.test_dot_default_picture import chain_trace
from tests.viz.draw.test_modules import transformer_trace


def _stacked(trace: Trace, **options: object) -> tuple[GraphView, dict[str, list[str]]]:
    """The view ``dot`` draws, and the tensor boxes hanging under each node."""
    view = dot.select(dot.build_view(trace), ViewOptions(**options))  # type: ignore[arg-type]
    hanging: dict[str, list[str]] = {}
    for box in view.boxes:
        if box.kind != "output":
            hanging.setdefault(box.node, []).append(box.key)
    return view, hanging


def _outermost_left(view: GraphView, tail: str, head: str) -> str | None:
    left, cluster = None, view.cluster_of.get(tail)
    while cluster is not None:
        members = {k for k, c in view.cluster_of.items() if _within(view, c, cluster)}
        if head in members:
            break
        left, cluster = cluster, view.clusters[cluster].parent
    return left


def _within(view: GraphView, cluster: str | None, outer: str) -> bool:
    while cluster is not None:
        if cluster == outer:
            return True
        cluster = view.clusters[cluster].parent
    return False


def _reaches(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, stack = {start}, [start]
    while stack:
        for head in edges.get(stack.pop(), ()):
            if head not in seen:
                seen.add(head)
                stack.append(head)
    return seen


def test_a_call_is_drawn_above_every_node_its_gradients_reach_outside_it() -> None:
    # What stacking promises: the node a gradient reaches outside a module call is ranked
    # below every node of that call and every tensor hanging under them, unless it leads
    # back into the call. Inner calls' edges stand for outer ones, so few edges remain.
    view, hanging = _stacked(transformer_trace(), expand=["transformer"])
    pairs = dot_clusters.stacking_edges(view, hanging)
    assert _checked_promise(view, hanging, pairs) > 100
    # Edges leave a call only from its lowest nodes: fewer than one per node drawn.
    assert 0 < len(pairs) < len(view.nodes)


def _checked_promise(
    view: GraphView, hanging: dict[str, list[str]], pairs: list[tuple[str, str]]
) -> int:
    """How many (drawn node, head) orders stacking promises; fails on one that does not hold."""
    edges: dict[str, set[str]] = {}
    for edge in view.edges:
        edges.setdefault(edge.tail, set()).add(edge.head)
    for node, boxes in hanging.items():
        edges.setdefault(node, set()).update(boxes)
    for tail, head in pairs:
        edges.setdefault(tail, set()).add(head)
    checked = 0
    for edge in view.edges:
        left = _outermost_left(view, edge.tail, edge.head)
        if left is None:
            continue
        members = [k for k, c in view.cluster_of.items() if _within(view, c, left)]
        if any(k in _reaches(edges, edge.head) for k in members):
            continue
        for key in members:
            for drawn in [key, *hanging.get(key, ())]:
                assert edge.head in _reaches(edges, drawn), (drawn, edge.head, left)
                checked += 1
    return checked


def _encoder_decoder_trace(layers: int = 4) -> Trace:
    """A T5-shaped stack: every decoder block reads the encoder's output and a position bias
    that the first decoder block makes, so their gradients all end at the bottom of the page."""
    rng = np.random.default_rng(0)
    n = 4

    def p(name: str, *shape: int) -> engine.Tensor:
        return engine.tensor(rng.standard_normal(shape) * 0.3, requires_grad=True, name=name)

    x = engine.tensor(rng.standard_normal((2, n)))
    with engine.scope("encoder", kind="Stack"):
        for i in range(layers):
            with engine.scope(f"block.{i}", kind="Block"):
                x = x + (x @ p(f"encoder.block.{i}.w", n, n)).tanh()
    memory, y = x, engine.tensor(rng.standard_normal((2, n)))
    with engine.scope("decoder", kind="Stack"):
        for i in range(layers):
            with engine.scope(f"block.{i}", kind="Block"):
                if i == 0:
                    with engine.scope("bias", kind="Embedding"):
                        bias = p("decoder.block.0.bias", n) * 2.0
                attended = ((y @ p(f"decoder.block.{i}.q", n, n)) * memory + bias).softmax(-1)
                y = y + attended @ p(f"decoder.block.{i}.w", n, n)
    with autograd_viz.record() as trace:
        y.sum().backward()
    return trace


def test_a_stacking_edge_goes_only_where_no_other_one_of_its_node_leads() -> None:
    # Every decoder block's gradients reach the block below it, the shared bias and the
    # encoder's output; the block below reaches the last two anyway. Edges from every block's
    # bottoms to them crossed the whole decoder: on a T5 of 9 + 9 layers, most of dot's 40 s.
    view, hanging = _stacked(_encoder_decoder_trace(), expand=["encoder", "decoder"])
    pairs = dot_clusters.stacking_edges(view, hanging)
    assert _checked_promise(view, hanging, pairs) > 50
    drawn: dict[str, set[str]] = {}
    for edge in view.edges:
        drawn.setdefault(edge.tail, set()).add(edge.head)
    heads: dict[str, set[str]] = {}
    for tail, head in pairs:
        heads.setdefault(tail, set()).add(head)
    for tail, below in heads.items():
        for head in below:
            assert not (_reaches(drawn, head) - {head}) & below, (tail, head)

    # The encoder's output and the shared bias take stacking edges from the bottoms of one
    # block only, the lowest that reaches them, not from every decoder block above it.
    def block(key: str) -> str:
        cluster = view.clusters[view.cluster_of[key.removesuffix("_leaf")]]
        return ".".join(cluster.name.split(".")[:3])

    senders: dict[str, set[str]] = {}
    for tail, head in pairs:
        senders.setdefault(head, set()).add(block(tail))
    assert {block(head) for head in senders} >= {"encoder.block.3", "decoder.block.0"}
    assert all(len(blocks) == 1 for blocks in senders.values()), senders


def _tied_language_model() -> Trace:
    torch: Any = pytest.importorskip("torch")
    import autograd_viz

    nn = torch.nn
    module: Any = nn.Module

    class Tied(module):
        """An embedding whose weight the output layer uses again, as GPT-2 and BERT do."""

        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(20, 8)
            layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
            self.head = nn.Linear(8, 20, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, ids: object) -> object:
            return self.head(self.encoder(self.embed(ids)))

    torch.manual_seed(0)
    with autograd_viz.record() as trace:
        Tied()(torch.randint(0, 20, (2, 5))).sum().backward()
    return trace


@pytest.mark.oracle
@pytest.mark.parametrize("expand", [(), ("encoder",)])
def test_no_stacking_edge_doubles_a_drawn_edge(expand: tuple[str, ...]) -> None:
    # The output layer's gradient goes to the embedding's AccumulateGrad at the bottom of the
    # picture; an invisible edge beside that edge crashed Graphviz 2.43 on a 12-layer GPT-2.
    source = autograd_viz.to_dot(_tied_language_model(), expand=expand, leaves=True).source
    edges = re.findall(r"^\s*(\w+) -> (\w+)(.*)$", source, re.M)
    invisible = {(t, h) for t, h, attrs in edges if "style=invis" in attrs}
    drawn = {(t, h) for t, h, attrs in edges if "style=invis" not in attrs}
    assert invisible and drawn
    assert not invisible & drawn


def test_unstacked_is_the_drawing_without_stacking() -> None:
    view, _ = _stacked(transformer_trace(layers=3), expand=["transformer"])
    stacked = dot.render(view)
    flat = dot_clusters.unstacked(stacked)
    assert flat is not None and "style=invis" in stacked.source
    assert flat.source == dot.render(view, stacking=False).source
    assert dot_clusters.unstacked(dot.render(view, stacking=False)) is None


@pytest.fixture
def crashing_dot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``dot`` that dies of a segmentation fault on a stacked picture."""
    dot_that_crashes_on(tmp_path, monkeypatch, "*newrank*")


@needs_dot
def test_a_picture_dot_crashes_on_is_drawn_unstacked_with_one_line(
    crashing_dot: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace_file = tmp_path / "t.jsonl"
    transformer_trace(layers=3).save(trace_file)
    out = tmp_path / "t.svg"
    assert cli.main(["dot", str(trace_file), "--expand", "transformer", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    (line,) = [x for x in captured.err.splitlines() if x.strip()]
    assert "failed on the picture with its modules stacked (killed by SIGSEGV)" in line
    assert "drawn without stacking" in line
    assert "Wrote" in captured.out
    root = ET.fromstring(out.read_bytes())
    view, _ = _stacked(Trace.load(trace_file), expand=["transformer"])
    assert len(svg_groups(root, "node")) == len(view.nodes) + len(view.boxes) + 1  # the legend


@needs_dot
def test_pipe_warns_when_no_list_takes_the_line(crashing_dot: None) -> None:
    view, _ = _stacked(transformer_trace(layers=2), expand=["transformer"])
    with pytest.warns(RuntimeWarning, match="drawn without stacking"):
        data = dot.pipe(dot.render(view), "svg")
    assert data.lstrip().startswith(b"<?xml")
    # A picture that is not stacked has nothing to fall back to: dot's failure is the error.
    flat = dot.render(view, stacking=False)
    flat.attr(newrank="true")
    with pytest.raises(RuntimeError, match="killed by SIGSEGV"):
        dot.pipe(flat, "svg")


@pytest.mark.oracle
@needs_dot
def test_an_opened_layer_of_a_tied_model_fits_a_screens_width() -> None:
    # Stacking edges into the tied embedding's AccumulateGrad at the bottom went round the
    # whole picture: 1,440 points wide with a layer opened, and BERT's opened layer 1,799.
    # Laid out well it is 1,151 points; node ids are the process's, and after the
    # million-node test ran first every box's `#1000018` made it 1,211.
    root = svg_tree(autograd_viz.to_dot(_tied_language_model(), expand="encoder.layers.0"))
    assert 0 < float(root.get("width", "0").removesuffix("pt")) <= 1300


@needs_dot
def test_the_tuis_export_says_a_picture_was_drawn_unstacked(
    crashing_dot: None, tmp_path: Path
) -> None:
    from autograd_viz.tui.search import export_step

    trace = chain_trace()
    path = tmp_path / "step.svg"
    # Mid-backward, the running node's modules open around it: the first such step whose
    # picture is stacked (a leaf's tensor hangs below the running AccumulateGrad).
    step = next(
        s
        for s in range(len(trace))
        if "newrank" in autograd_viz.to_dot(trace.state_at(s), values=True).source
    )
    written = export_step(trace.state_at(step), None, str(path))
    assert written.startswith(f"step {step} written to {path} as SVG; ")
    assert written.endswith("drawn without stacking")
    assert ET.fromstring(path.read_bytes()).tag.endswith("svg")


@needs_dot
def test_a_big_stacked_picture_is_placed_sooner_and_concentrates_no_edge() -> None:
    # dot_clusters.STACKED_QUICKLY: written after the big picture's own settings, so that dot
    # reads them last; a picture drawn again unstacked is a big picture like any other.
    view, _ = _stacked(transformer_trace(layers=70), expand=["transformer"])
    assert len(view.nodes) > dot_clusters.BIG_PICTURE
    graph = dot.render(view)
    assert graph.graph_attr["concentrate"] == "true" and graph.graph_attr["nslimit"] == "1"
    statements = [line.split() for line in graph.body if re.match(r"\t\w+=\S+( |$)", line)]
    assert sorted(statements[-1]) == sorted(
        f"{k}={v}" for k, v in dot_clusters.STACKED_QUICKLY.items()
    )
    flat = dot_clusters.unstacked(graph)
    assert flat is not None
    assert not [line for line in flat.body if "concentrate" in line or "nslimit" in line]
    assert flat.graph_attr["concentrate"] == "true"
    notices: list[str] = []
    root = ET.fromstring(dot.pipe(graph, "svg", notices))
    assert notices == []
    assert len(svg_groups(root, "node")) == len(view.nodes) + len(view.boxes) + 1  # the legend
