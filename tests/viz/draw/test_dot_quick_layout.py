"""Big pictures laid out quickly: labels beside their edges, bounded placement, a fallback."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import autograd_viz
import engine
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.render import dot
from autograd_viz.draw.render.dot_render import QUICK_LAYOUT, QUICK_SETTINGS
from autograd_viz.trace import Trace
from tests.viz.dotting import dot_that_crashes_on, needs_dot, svg_groups

SVG = "{http://www.w3.org/2000/svg}"


def chain(steps: int) -> Trace:
    """``y = y * 1.0001 + 0.0`` ``steps`` times: two nodes a step."""
    x = engine.tensor([1.0], requires_grad=True, name="x")
    y = x
    for _ in range(steps):
        y = y * 1.0001 + 0.0
    with autograd_viz.record() as trace:
        y.sum().backward()
    return trace


def edge_lines(graph: object) -> list[str]:
    return [line for line in graph.body if " -> " in line]  # type: ignore[attr-defined]


def test_a_big_picture_puts_its_labels_beside_the_edges_and_bounds_the_placement() -> None:
    """Note [Laying out big pictures quickly]: the same input slots, as xlabels."""
    big = autograd_viz.to_dot(chain(QUICK_LAYOUT // 2 + 10), expand=["all"])
    small = autograd_viz.to_dot(chain(10), expand=["all"])
    assert {k: big.graph_attr[k] for k in QUICK_SETTINGS} == QUICK_SETTINGS
    assert not set(QUICK_SETTINGS) & set(small.graph_attr)
    big_edges, small_edges = edge_lines(big), edge_lines(small)
    assert len(big_edges) > QUICK_LAYOUT
    assert not [line for line in big_edges if "[label=" in line or " label=" in line]
    assert sum("xlabel=0" in line for line in big_edges) == len(big_edges) - 1  # not the leaf's
    assert not [line for line in small_edges if "xlabel" in line]
    assert sum("[label=0" in line for line in small_edges) == len(small_edges) - 1


@needs_dot
def test_every_label_of_a_big_picture_is_drawn() -> None:
    graph = autograd_viz.to_dot(chain(QUICK_LAYOUT // 2 + 10), expand=["all"])
    root = ET.fromstring(dot.pipe(graph, "svg"))
    edges = svg_groups(root, "edge")
    assert len(edges) == len(edge_lines(graph))
    texts = [t.text for edge in edges for t in edge.iter(f"{SVG}text")]
    assert texts == ["0"] * (len(edges) - 1)  # every input slot; the leaf's edge has none


@pytest.fixture
def crashing_dot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``dot`` that dies on a bounded placement with curved edges, as 2.43 did on some."""
    dot_that_crashes_on(tmp_path, monkeypatch, "*splines=line*) ;; *nslimit*")


@needs_dot
def test_a_big_picture_dot_crashes_on_is_drawn_with_straight_edges(crashing_dot: None) -> None:
    graph = autograd_viz.to_dot(chain(QUICK_LAYOUT // 2 + 10), expand=["all"])
    notices: list[str] = []
    root = ET.fromstring(dot.pipe(graph, "svg", notices))
    assert notices == [
        dot.STRAIGHT_EDGES.format(problem="killed by SIGSEGV"),
    ]
    assert len(svg_groups(root, "edge")) == len(edge_lines(graph))
    # A small picture has no quick settings to fall back from: dot's failure is the error.
    small = autograd_viz.to_dot(chain(10), expand=["all"])
    small.attr(nslimit="1")
    with pytest.raises(RuntimeError, match="killed by SIGSEGV"):
        dot.pipe(small, "svg")


def fan_in(steps: int, every: int = 20) -> Trace:
    """:func:`chain` with one tensor made first added again every ``every`` steps, as T5's
    shared position bias is in every layer: long edges that all end in one node."""
    x = engine.tensor([1.0], requires_grad=True, name="x")
    shared = x * 2.0
    y = x
    for step in range(steps):
        y = y * 1.0001 + (shared if step % every == 0 else 0.0)
    with autograd_viz.record() as trace:
        y.sum().backward()
    return trace


def _ends(root: ET.Element) -> dict[str, tuple[list[tuple[float, float]], int]]:
    """Each edge's path points and how many arrowheads it draws, by its ``tail->head`` title."""
    ends: dict[str, tuple[list[tuple[float, float]], int]] = {}
    for edge in svg_groups(root, "edge"):
        title = edge.find(f"{SVG}title")
        assert title is not None and title.text is not None
        points = [
            (float(x), float(y))
            for path in edge.iter(f"{SVG}path")
            for x, y in re.findall(r"(-?[\d.]+),(-?[\d.]+)", path.get("d", ""))
        ]
        ends[title.text] = (points, len(list(edge.iter(f"{SVG}polygon"))))
    return ends


@needs_dot
def test_long_edges_into_one_node_run_as_one_line_and_none_is_lost() -> None:
    # Note [Laying out big pictures quickly]: concentrated, the gradients the shared tensor
    # gets from all along the chain join one line into its node; each edge is still drawn,
    # from its tail to where it joins a line that goes on into the node. Drawn with its far
    # edges along the chain (Note [Far edges drawn to a copy] would end them at copies).
    view = dot.build_view(fan_in(QUICK_LAYOUT // 2 + 10))
    graph = dot.render(dot.select(view, ViewOptions(expand=("all",))), far=False)
    assert graph.graph_attr["concentrate"] == "true"
    pairs = [line.split()[:3:2] for line in edge_lines(graph)]
    shared = max({head for _, head in pairs}, key=[head for _, head in pairs].count)
    into = [f"{tail}->{head}" for tail, head in pairs if head == shared]
    assert len(into) > 10
    ends = _ends(ET.fromstring(dot.pipe(graph, "svg")))
    assert len(ends) == len(pairs)
    arrows = [title for title in into if ends[title][1]]
    assert 0 < len(arrows) < len(into)  # joined: fewer lines reach the node than edges
    for title in into:
        points, arrowheads = ends[title]
        if arrowheads:
            continue
        last = points[-1]
        assert any(
            math.dist(last, point) < 1.0
            for other in into
            if other != title
            for point in ends[other][0]
        ), title


@pytest.fixture
def concentrating_crashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``dot`` that dies of a segmentation fault on concentrated edges."""
    dot_that_crashes_on(tmp_path, monkeypatch, "*concentrate*")


@needs_dot
def test_a_picture_dot_fails_to_concentrate_is_drawn_with_every_edge_apart(
    concentrating_crashes: None,
) -> None:
    graph = autograd_viz.to_dot(fan_in(QUICK_LAYOUT // 2 + 10), expand=["all"])
    notices: list[str] = []
    ends = _ends(ET.fromstring(dot.pipe(graph, "svg", notices)))
    assert notices == [dot.STRAIGHT_EDGES.format(problem="killed by SIGSEGV")]
    assert len(ends) == len(edge_lines(graph))
    assert all(arrowheads == 1 for _, arrowheads in ends.values())
