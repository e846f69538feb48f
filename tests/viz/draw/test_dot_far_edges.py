"""Far edges of a big picture drawn to a copy of their far end (Note [Far edges drawn to a
copy] in draw/render/dot_render.py), and every reader of the picture still finding one node
per graph node."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import autograd_viz
import engine
from autograd_viz.draw.model.graph_view import GraphView
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.render import dot, step_frames
from autograd_viz.draw.render.dot_render import FAR_RANKS, QUICK_LAYOUT, far_edges
from autograd_viz.trace import Trace
from tests.viz import captions
from tests.viz.dotting import drawn_edges, drawn_nodes, needs_dot, svg_groups

SVG = "{http://www.w3.org/2000/svg}"

_NOTICE = re.compile(
    rf"([\d,]+) edges? longer than {FAR_RANKS} ranks drawn to a dashed copy of their far end"
)


def t5_shaped(blocks: int) -> Trace:
    """An encoder and a decoder of ``blocks`` small blocks each: every decoder block reads
    the encoder's output, every block its stack's shared bias, made in its first block."""
    rng = np.random.default_rng(0)

    def linear(x: engine.Tensor, name: str) -> engine.Tensor:
        w = engine.tensor(rng.standard_normal((4, 4)) * 0.1, requires_grad=True, name=name)
        with engine.scope(name.rpartition(".")[0].rpartition(".")[2], kind="Linear"):
            return x @ w

    def stack(x: engine.Tensor, name: str, memory: engine.Tensor | None) -> engine.Tensor:
        with engine.scope(name, kind="Stack"):
            for i in range(blocks):
                with engine.scope(f"block.{i}", kind="Block"):
                    if i == 0:
                        table = engine.tensor(
                            rng.standard_normal((4, 4)), requires_grad=True, name=f"{name}.bias"
                        )
                        bias = table * 1.0
                    path = f"{name}.block.{i}"
                    read = x if memory is None else memory
                    q, k = linear(x, f"{path}.q.weight"), linear(read, f"{path}.k.weight")
                    scores = ((q @ k.t()) + bias).softmax(-1)
                    x = x + linear(scores @ linear(read, f"{path}.v.weight"), f"{path}.o.weight")
                    x = x + linear(linear(x, f"{path}.wi.weight").tanh(), f"{path}.wo.weight")
        return x

    memory = stack(engine.tensor(rng.standard_normal((4, 4))), "encoder", None)
    y = stack(engine.tensor(rng.standard_normal((4, 4))), "decoder", memory)
    with autograd_viz.record() as trace:
        y.sum().backward()
    return trace


@pytest.fixture(scope="module")
def t5() -> GraphView:
    """The T5-shaped stand-in, every node drawn: past QUICK_LAYOUT nodes."""
    view = dot.select(dot.build_view(t5_shaped(12)), ViewOptions(expand=("all",)))
    assert len(view.nodes) > QUICK_LAYOUT
    return view


def _copies(source: str) -> dict[str, str]:
    """Each copy's key and label, read back from the DOT source."""
    found = {}
    for line in source.splitlines():
        match = re.match(r'^\s*(\w+) \[label=<(.*)>.*class="proxy ', line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def test_far_edges_of_a_t5_shaped_picture_end_at_copies_with_a_notice(t5: GraphView) -> None:
    graph = dot.render(t5)
    copies = _copies(graph.source)
    far = far_edges(t5)
    assert len(copies) == len(far) > 0
    # The line under the picture counts them.
    (count,) = _NOTICE.findall(graph.source)
    assert int(count.replace(",", "")) == len(copies)
    # The far ends copied are the nodes many blocks read: the encoder's output and the
    # biases, each copy named after its original, ``= name #id``.
    originals = {key.rpartition("_far")[0] for key in copies}
    assert originals <= set(t5.nodes)
    assert 1 < len(originals) <= 3
    for key, label in copies.items():
        node = t5.nodes[key.rpartition("_far")[0]]
        assert f"= <B>{node.info.name}</B>" in label and f"#{node.info.id}<" in label
    # Every edge is drawn once: to its own ends, or with one of them a copy of it.
    drawn = [(tail, head) for tail, head, _ in drawn_edges(graph) if "invis" not in _]
    ends = {(t.rpartition("_far")[0] or t, h.rpartition("_far")[0] or h) for t, h in drawn}
    assert ends >= {(e.tail, e.head) for e in t5.edges}
    assert sum(1 for t, h in drawn if t in copies or h in copies) == len(copies)


def test_readers_of_the_picture_find_one_node_per_graph_node(t5: GraphView) -> None:
    graph = dot.render(t5)
    assert set(drawn_nodes(graph)) == {k for k, n in t5.nodes.items() if n.box is None}
    # The captions the picture's view says still read back.
    assert captions.check_pictures(t5, expand=("all",)) == 0


@needs_dot
def test_each_copy_is_drawn_beside_its_near_end(t5: GraphView) -> None:
    graph = dot.render(t5, legend=False)
    root = ET.fromstring(dot.pipe(graph, "svg"))
    places: dict[str, float] = {}
    proxies = 0
    for group in svg_groups(root, "node"):
        text = next(group.iter(f"{SVG}text"))
        places[group.get("id") or ""] = float(text.get("y") or 0)
        proxies += "proxy" in (group.get("class") or "").split()
    assert proxies == len(_copies(graph.source))
    copies = {key for key in places if "_far" in key}
    assert len(copies) == proxies  # and every graph node has its own, once
    assert set(places) - copies >= set(t5.nodes)
    for tail, head, _ in drawn_edges(graph):
        copy, near = (head, tail) if "_far" in head else (tail, head)
        if "_far" not in copy:
            continue
        original = copy.rpartition("_far")[0]
        assert abs(places[copy] - places[near]) < abs(places[original] - places[near]) / 4


def test_a_small_picture_is_drawn_as_before() -> None:
    # Six blocks a stack: edges longer than FAR_RANKS, but not past QUICK_LAYOUT nodes.
    small = dot.select(dot.build_view(t5_shaped(6)), ViewOptions(expand=("all",)))
    assert len(small.nodes) < QUICK_LAYOUT and far_edges(small)
    source = dot.render(small).source
    assert "proxy" not in source and "copy of their far end" not in source
    assert source == dot.render(small, far=False).source
    assert len(_copies(dot.render(small, far=True).source)) == len(far_edges(small))


def test_an_animations_frames_redrawn_where_they_changed_keep_their_copies_alike() -> None:
    # A copy has its original's colour and counts: a frame redrawn from what changed is
    # the frame drawn whole at its step, copies included (Note [Drawing what changed]).
    x = engine.tensor([1.0], requires_grad=True, name="x")
    shared = x * 2.0
    y = x
    for step in range(QUICK_LAYOUT // 2 + 10):
        y = y * 1.0001 + (shared if step % 20 == 0 else 0.0)
    with autograd_viz.record() as trace:
        y.sum().backward()
    steps = [*range(0, len(trace) - 40, 40), *range(len(trace) - 40, len(trace) + 1)]
    frames = step_frames.view_frames(trace, steps, ViewOptions(expand=("all",)))
    assert all('class="proxy' in frame.source() for frame in frames)  # type: ignore[union-attr]
    for step, frame in zip(steps, frames, strict=True):
        assert frame == step_frames.view_frames(trace, [step], ViewOptions(expand=("all",)))[0], (
            step
        )
