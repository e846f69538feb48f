"""Animations of a backward pass: frame selection, batched rendering, a still layout, HTML, GIF."""

from __future__ import annotations

import io
import itertools
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import graphviz
import pytest

import autograd_viz
import engine
from autograd_viz.draw.model import showing
from autograd_viz.draw.model.graph_view import NodeStatus
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.render import animate as animation
from autograd_viz.draw.render import dot, frames, step_frames
from autograd_viz.draw.render.animate import (
    LAST_FRAME_MS,
    GraphvizError,
    GraphvizNotFoundError,
    animate,
    describe_step,
    frame_steps,
    output_format,
    render_frames,
    script_json,
    write_gif,
)
from autograd_viz.draw.render.frame_diff import Frame
from autograd_viz.live import thread_name
from autograd_viz.trace import Trace
from tests.viz.dotting import needs_dot

SVG = "{http://www.w3.org/2000/svg}"
CONTROLS = ("first", "back", "play", "forward", "last", "slider", "speed", "caption")


@pytest.fixture
def trace() -> Trace:
    """``(a * a).sum().backward()``: 19 events, one graph task, three nodes."""
    a = engine.tensor([2.0, 3.0], requires_grad=True, name="a")
    with autograd_viz.record() as recorded:
        (a * a).sum().backward()
    return recorded


def growing_labels(trace: Trace, step: int, **_: Any) -> graphviz.Digraph:
    """A stand-in for ``dot.to_dot`` whose text grows as the pass runs.

    Every frame has the same nodes and edges. A node's label names its status
    (``waiting`` is longer than ``done``) and, once it ran, a long line more; an
    edge's label gets a gradient once delivered. dot alone would move nodes
    between frames.
    """
    state = trace.state_at(step)
    info = next(iter(trace.graph_tasks.values()))
    graph = graphviz.Digraph("frame")
    graph.attr(label=f"step {step}")  # as dot.to_dot does, so no two frames look alike
    graph.attr("node", shape="box")
    for node_id, node in info.nodes.items():
        status = state.nodes().get(node_id)
        text = "not run" if status is None else str(status.status)
        if status is not None and status.outputs is not None:
            text += "\\ngradient sent on to every next node"
        graph.node(f"n{node_id}", f"{node.name}\\n{text}")
    delivered = {(d.from_node, d.to_node) for d in state.deliveries(info.id)}
    for node_id, node in info.nodes.items():
        for edge in node.next_edges:
            if edge is not None:
                label = "grad [4.0, 6.0] delivered" if (node_id, edge[0]) in delivered else "0"
                graph.edge(f"n{node_id}", f"n{edge[0]}", label=label)
    return graph


def titled(text: str) -> graphviz.Digraph:
    graph = graphviz.Digraph()
    graph.node("only", text)
    return graph


def page_data(page: str) -> tuple[str, dict[str, Any]]:
    """The raw JSON block of an animation page, and what it decodes to."""
    match = re.search(
        r'<script type="application/json" id="animation-data">(.*?)</script>', page, re.DOTALL
    )
    assert match is not None
    return match.group(1), json.loads(match.group(1))


def whole_frames(data: dict[str, Any]) -> list[str]:
    """Each frame of a page as the SVG its player shows: the drawing, with the changes swapped in.

    The player's own logic (in the page's script), written again: a frame is its
    group's drawing with every change since the group's first frame applied.
    """
    out = []
    for i, (drawing, _) in enumerate(data["frames"]):
        start = i
        while start > 0 and data["frames"][start - 1][0] == drawing:
            start -= 1
        wanted: dict[str, int] = {}
        for _, delta in data["frames"][start : i + 1]:
            wanted.update((eid, variant) for eid, variant in delta)
        root = ET.fromstring(data["drawings"][drawing])
        for parent in list(root.iter()):
            for position, child in enumerate(list(parent)):
                eid = child.get("id")
                if eid in wanted and wanted[eid] != data["bases"][drawing].get(eid):
                    markup = data["variants"][wanted[eid]]
                    holder = ET.fromstring(
                        f'<svg xmlns="http://www.w3.org/2000/svg" '
                        f'xmlns:xlink="http://www.w3.org/1999/xlink">{markup}</svg>'
                    )
                    parent.remove(child)
                    parent.insert(position, holder[0])
        out.append(ET.tostring(root, encoding="unicode"))
    return out


def texts(svg: str) -> dict[str, list[str]]:
    """Each node's, edge's and cluster's title → the text it shows, and its colours."""
    root = ET.fromstring(svg)
    found: dict[str, list[str]] = {}
    for group in root.iter(f"{SVG}g"):
        if group.get("class") in ("node", "edge", "cluster"):
            title = group.findtext(f"{SVG}title", "")
            seen = found.setdefault(title, [])
            for item in group.iter():
                if item.tag == f"{SVG}text" and item.text:
                    seen.append(item.text)
                for colour in ("fill", "stroke"):
                    if item.get(colour) not in (None, "none", "transparent"):
                        seen.append(f"{colour}={item.get(colour)}")
    return found


def shapes(svg: bytes | str) -> dict[str, list[str]]:
    """Each node, edge and cluster's title → the coordinates of what draws it, in order."""
    root = ET.fromstring(svg)
    drawn: dict[str, list[str]] = {}
    for group in root.iter(f"{SVG}g"):
        if group.get("class") in ("node", "edge", "cluster"):
            title = group.findtext(f"{SVG}title", "")
            for child in group:
                points = child.get("d") or child.get("points") or child.get("cx")
                if points is not None:
                    drawn.setdefault(title, []).append(points)
    return drawn


# -- choosing the steps ----------------------------------------------------------------


def test_every_step_is_a_frame_when_they_fit() -> None:
    assert frame_steps(19) == list(range(20))
    assert frame_steps(19, 5, 8) == [5, 6, 7, 8]


def test_many_steps_are_sampled_evenly_keeping_the_first_and_last() -> None:
    steps = frame_steps(1000, max_frames=600)
    assert len(steps) == 600
    assert steps[0] == 0 and steps[-1] == 1000
    gaps = {b - a for a, b in itertools.pairwise(steps)}
    assert gaps == {1, 2}
    assert frame_steps(100, 10, 50, max_frames=5) == [10, 20, 30, 40, 50]
    assert frame_steps(10, max_frames=2) == [0, 10]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((19, 0, 20, 600), "outside this trace"),
        ((19, 5, 4, 600), "outside this trace"),
        ((19, -1, None, 600), "outside this trace"),
        ((19, 0, None, 1), "max_frames must be at least 2"),
        ((19, 0.5, None, 600), "first must be an integer"),
    ],
)
def test_bad_ranges_are_refused(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        frame_steps(*args)


def test_captions_name_the_step_and_its_event(trace: Trace) -> None:
    assert describe_step(trace, 0) == f"step 0 of {len(trace)} · before backward"
    event = trace.events[2]
    assert event.kind == "node_start"
    assert describe_step(trace, 3) == (
        f"step 3 of {len(trace)} · node_start SumBackward0 · thread {thread_name(event.thread)} "
        f"· graph task {event.graph_task}"
    )
    assert describe_step(trace, len(trace)).startswith(f"step {len(trace)} of {len(trace)} · ")
    assert "graph_task_end" in describe_step(trace, len(trace))
    assert " · thread main · " in describe_step(trace, 3)  # as every other view names it


# -- errors ----------------------------------------------------------------------------


def test_the_suffix_picks_the_format() -> None:
    assert [output_format(n) for n in ("a.html", "b.HTM", "c.gif")] == ["html", "html", "gif"]


@pytest.mark.parametrize("name", ["run.mp4", "run", "run.svg"])
def test_an_unsupported_suffix_is_refused(trace: Trace, tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match=r"unsupported suffix .*\.html, \.htm, \.gif"):
        animate(trace, tmp_path / name, to_dot=growing_labels)
    assert not (tmp_path / name).exists()


def test_a_trace_without_backward_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no backward pass to animate"):
        animate(Trace(), tmp_path / "run.html", to_dot=growing_labels)


def test_a_missing_dot_says_what_to_install(
    trace: Trace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GraphvizNotFoundError, match="'dot' program.*install Graphviz") as caught:
        animate(trace, tmp_path / "run.html", to_dot=growing_labels)
    assert isinstance(caught.value, dot.GraphvizNotFoundError)  # the CLI catches this one
    assert not (tmp_path / "run.html").exists()


@needs_dot
def test_a_dot_failure_names_the_frame_and_quotes_dot(trace: Trace, tmp_path: Path) -> None:
    def broken_at_5(trace: Trace, step: int, **options: Any) -> graphviz.Digraph:
        graph = growing_labels(trace, step, **options)
        if step == 5:
            graph.body.append("\t-> ->\n")
        return graph

    with pytest.raises(GraphvizError, match=r"frame for step 5 .*syntax error"):
        animate(trace, tmp_path / "run.html", to_dot=broken_at_5)


def test_a_gif_without_pillow_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match="pip install pillow"):
        write_gif(tmp_path / "run.gif", [b""])


# -- rendering -------------------------------------------------------------------------


@needs_dot
def test_batches_give_one_image_per_frame_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frames.os, "cpu_count", lambda: 3)  # three dot processes
    graphs = [titled(f"frame {i}") for i in range(40)]
    svgs = render_frames(graphs, "svg")
    assert len(svgs) == 40
    for i, svg in enumerate(svgs):
        texts = [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]
        assert texts == [f"frame {i}"]
    pngs = render_frames(graphs[:20], "png")
    assert [png[:8] for png in pngs] == [b"\x89PNG\r\n\x1a\n"] * 20
    assert all(png.endswith(b"IEND\xaeB`\x82") for png in pngs)


@needs_dot
def test_the_layout_stays_still_while_text_grows(trace: Trace) -> None:
    graphs = [growing_labels(trace, step) for step in range(len(trace) + 1)]
    sources = "".join(g.source for g in graphs).encode()
    plain = subprocess.run(["dot", "-Tsvg"], input=sources, capture_output=True, check=True)
    plain_svgs = [b"<?xml" + svg for svg in plain.stdout.split(b"<?xml")[1:]]
    assert any(shapes(svg) != shapes(plain_svgs[-1]) for svg in plain_svgs), "dot moves things"
    svgs = render_frames(graphs, "svg")
    last = shapes(svgs[-1])
    assert len(last) == 3 + 2  # nodes and edges (a * a draws two edges with one title)
    for svg in svgs:
        assert shapes(svg) == last
        assert ET.fromstring(svg).get("viewBox") == ET.fromstring(svgs[-1]).get("viewBox")


@needs_dot
def test_a_still_graph_is_drawn_by_dot_once(trace: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []
    run = frames._run_dot

    def counted(command: Any, sources: Any, names: Any, formats: Any) -> Any:
        calls.append((*command[1:], *formats))
        return run(command, sources, names, formats)

    monkeypatch.setattr(frames, "_run_dot", counted)
    # The pictures of a running backward share one legend (Note [A legend of what is
    # drawn]); once its last node is done (the last two steps) it lists what is drawn.
    graphs = [autograd_viz.to_dot(trace, step=step) for step in range(len(trace) - 1)]
    svgs = render_frames(graphs, "svg")
    assert calls == [("json0", "svg")]  # one pass: colours change, nothing moves
    assert all(shapes(svg) == shapes(svgs[-1]) for svg in svgs)
    assert all("running" in graph.source for graph in graphs)
    finished = autograd_viz.to_dot(trace, step=len(trace)).source
    assert re.findall(r'ALIGN="LEFT">([^<]*)', finished) == [
        "done",
        "bold edge: gradient delivered",
        "leaf tensor (its .grad)",
    ]


# -- the HTML page -----------------------------------------------------------------------


@needs_dot
def test_the_page_has_a_frame_a_caption_and_the_controls(trace: Trace, tmp_path: Path) -> None:
    result = animate(trace, tmp_path / "run.html", to_dot=growing_labels, title="square.py")
    steps = tuple(range(len(trace) + 1))
    assert result == animation.AnimationResult(tmp_path / "run.html", len(steps), steps, 0)
    page = result.path.read_text(encoding="utf-8")
    raw, data = page_data(page)
    shown = whole_frames(data)
    assert len(shown) == len(steps)
    for step, frame in zip(steps, shown, strict=True):
        assert ET.fromstring(frame).tag == f"{SVG}svg"
        assert f">step {step}</" in frame  # growing_labels' caption
    assert data["captions"] == [describe_step(trace, step) for step in steps]
    for control in CONTROLS:
        assert f'id="{control}"' in page
    assert "<title>autograd-viz · square.py</title>" in page
    # Self-contained: nothing to fetch, and no frame can end the script element early.
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page)
    assert not re.search(r"url\(|@import|<link|<iframe", page)
    assert "</" not in raw and "</svg>" in data["drawings"][0]
    assert page.count("</script>") == 2


@needs_dot
def test_a_long_trace_is_sampled(trace: Trace, tmp_path: Path) -> None:
    result = animate(trace, tmp_path / "run.htm", to_dot=growing_labels, max_frames=5)
    assert result.frames == 5
    assert result.steps_shown[0] == 0 and result.steps_shown[-1] == len(trace)
    assert result.skipped == len(trace) + 1 - 5
    _, data = page_data(result.path.read_text(encoding="utf-8"))
    assert len(data["frames"]) == 5
    assert data["captions"][-1] == describe_step(trace, len(trace))


@needs_dot
def test_the_real_graph_animates(trace: Trace, tmp_path: Path) -> None:
    result = animate(trace, tmp_path / "run.html", values=True, first=2, last=10)
    _, data = page_data(result.path.read_text(encoding="utf-8"))
    assert result.steps_shown == tuple(range(2, 11))
    shown = whole_frames(data)
    assert len(shown) == 9 and len(data["drawings"]) == 1  # one layout for the whole run
    fills = [re.findall(r'fill="(#[0-9a-f]{6})"', frame) for frame in shown]
    assert len({str(f) for f in fills}) > 1  # colours change...
    boxes = [{t: s[:1] for t, s in shapes(f).items() if "->" not in t} for f in shown]
    assert all(b == boxes[-1] for b in boxes)  # ...but no node moves


def test_a_frame_redraws_only_what_changed_and_equals_the_whole_drawing(trace: Trace) -> None:
    """Note [Drawing what changed]: each frame's DOT is what drawing the step whole gives."""
    steps = list(range(len(trace) + 1))
    frames_ = step_frames.view_frames(trace, steps, ViewOptions(values=True))
    for step, frame in zip(steps, frames_, strict=True):
        whole = dot.build_view(trace.state_at(step))
        view = showing.show(whole, follow=False, focus=step_frames.working(whole))
        whole = step_frames._drawn(view, step_frames._Drawing(False, True, ()))
        assert isinstance(frame, Frame) and isinstance(whole, Frame)
        assert frame.source() == whole.source(), f"step {step}"


@needs_dot
def test_each_frame_shows_what_its_step_shows(trace: Trace, tmp_path: Path) -> None:
    """The page's frames, changes swapped in, say what each step's own drawing says."""
    result = animate(trace, tmp_path / "run.html", values=True)
    _, data = page_data(result.path.read_text(encoding="utf-8"))
    frames_ = step_frames.view_frames(trace, list(range(len(trace) + 1)), ViewOptions(values=True))
    for step, (shown, frame) in enumerate(zip(whole_frames(data), frames_, strict=True)):
        assert isinstance(frame, Frame)
        alone = subprocess.run(
            ["dot", "-Tsvg"],
            input=f"digraph backward {{\n{frame.source()}}}\n".encode(),
            capture_output=True,
            check=True,
        ).stdout
        drawn, expected = texts(shown), texts(alone.decode())
        assert drawn.keys() == expected.keys()
        for title, seen in expected.items():
            assert sorted(drawn[title]) == sorted(seen), f"step {step}: {title}"


@needs_dot
def test_the_page_grows_with_the_changes_not_with_the_frames(tmp_path: Path) -> None:
    x = engine.tensor([1.0], requires_grad=True, name="x")
    y = x
    for _ in range(60):
        y = y * 1.0001
    with autograd_viz.record() as chain:
        y.sum().backward()
    result = animate(chain, tmp_path / "run.html")
    page = result.path.read_text(encoding="utf-8")
    _, data = page_data(page)
    drawing = len(data["drawings"][0])
    assert result.frames > 250 and len(data["drawings"]) == 1
    # Each of ~60 nodes changes a few times; a drawing per frame would be frames × drawing.
    assert len(page) < 12 * drawing
    assert sum(len(delta) for _, delta in data["frames"]) < 8 * result.frames


def test_script_json_cannot_end_its_script_element() -> None:
    value = ["</script><script>alert(1)</script>", "<!-- <script>", "a</b"]
    text = script_json(value)
    assert "</" not in text and "<!--" not in text
    assert json.loads(text) == value


# -- the GIF -------------------------------------------------------------------------------


def growing_graph(trace: Trace, step: int, **_: Any) -> graphviz.Digraph:
    """One node more every few steps: frames of different sizes."""
    graph = graphviz.Digraph()
    graph.attr(label=f"step {step}")
    for i in range(1 + step // 7):
        graph.node(f"n{i}", f"node {i}")
        if i:
            graph.edge(f"n{i - 1}", f"n{i}")
    return graph


@needs_dot
def test_the_gif_has_a_frame_per_step_all_the_same_size(trace: Trace, tmp_path: Path) -> None:
    image_module = pytest.importorskip("PIL.Image")
    pngs = render_frames([growing_graph(trace, s) for s in (0, len(trace))], "png")
    small, big = (image_module.open(io.BytesIO(png)).size for png in pngs)
    assert small != big
    result = animate(trace, tmp_path / "run.gif", to_dot=growing_graph, frame_ms=100)
    with image_module.open(result.path) as gif:
        assert gif.n_frames == len(trace) + 1 == result.frames
        sizes, durations = set(), []
        for i in range(gif.n_frames):
            gif.seek(i)
            sizes.add(gif.convert("RGB").size)
            durations.append(gif.info["duration"])
        assert gif.info["loop"] == 0
    assert sizes == {big}
    assert durations == [100] * len(trace) + [LAST_FRAME_MS]


def test_frames_redrawn_where_they_changed_are_the_frames_drawn_whole() -> None:
    # A module view stacks its clusters with invisible edges made from the whole graph
    # (Note [Stacking module clusters]): a frame redrawn from the elements that changed
    # keeps them, and every frame is the one drawn from nothing at its step.
    from autograd_viz.draw.render.step_frames import view_frames
    from tests.viz.draw.test_modules import transformer_trace

    trace = transformer_trace()
    steps = list(range(0, len(trace) + 1, 3))
    frames = view_frames(trace, steps, ViewOptions())
    assert all("style=invis" in repr(frame) for frame in frames)
    for step, frame in zip(steps, frames, strict=True):
        assert frame == view_frames(trace, [step], ViewOptions())[0], step


def test_the_call_being_worked_on_is_open_in_its_frame() -> None:
    """Note [An animation opens the work]: the running node is drawn, not hidden in a fold's
    box; once its call is done the fold closes again, so a frame draws few boxes."""
    from tests.viz.draw.test_modules import transformer_trace

    trace = transformer_trace()
    steps = list(range(len(trace) + 1))
    frames = step_frames.view_frames(trace, steps, ViewOptions())
    running = 0
    for step, frame in zip(steps, frames, strict=True):
        whole = dot.build_view(trace.state_at(step))
        assert isinstance(frame, Frame)
        for node in whole.nodes.values():
            if node.status == NodeStatus.RUNNING:
                running += 1
                assert ("n", node.key) in frame.elements, (step, node.info.name)
    assert running > 50
    # At the end nothing runs: the blocks are folded again, their nodes inside one box.
    drawn = sum(1 for key in frames[-1].elements if key[0] == "n")
    assert drawn < len(dot.build_view(trace.state_at(len(trace))).nodes)


def test_a_big_pictures_frames_are_laid_out_quickly_and_redrawn_alike() -> None:
    """Note [Laying out big pictures quickly]: every frame keeps the settings and the labels
    beside the edges, a frame redrawn from what changed among them."""
    from autograd_viz.draw.render.dot_render import QUICK_LAYOUT

    x = engine.tensor([1.0], requires_grad=True, name="x")
    y = x
    for _ in range(QUICK_LAYOUT // 2 + 10):
        y = y * 1.0001 + 0.0
    with autograd_viz.record() as trace:
        y.sum().backward()
    steps = list(range(100, 112))
    frames_ = step_frames.view_frames(trace, steps, ViewOptions(expand="all"))
    for step, frame in zip(steps, frames_, strict=True):
        assert isinstance(frame, Frame)
        assert "nslimit=1" in frame.source() and "[label=0" not in frame.source()
        assert frame == step_frames.view_frames(trace, [step], ViewOptions(expand="all"))[0], step
    assert len({frame.skeleton for frame in frames_}) == 1  # one drawing: redrawn, not drawn
