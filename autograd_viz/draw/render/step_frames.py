"""An animation's frames as DOT statements, drawn once per step and redrawn only where it changed.

:func:`view_frames` reads each step through the view model
(:func:`autograd_viz.draw.model.showing.show`, the module view every picture uses,
with the call being worked on open, Note [An animation opens the work]) and
writes each frame's DOT as :class:`~autograd_viz.draw.render.frame_diff.Frame` elements.
A step changes a few nodes, edges and clusters: only those are drawn
again (see Note [Drawing what changed]), so a frame costs what it changes, not
what the graph holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import graphviz

from autograd_viz.draw.model import showing
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.render import dot, dot_render
from autograd_viz.draw.render.escape import html_label, html_text
from autograd_viz.draw.render.frame_diff import Frame, read_frame

if TYPE_CHECKING:
    from autograd_viz.draw.model.graph_view import GraphView
    from autograd_viz.trace import Trace

# Note [An animation opens the work]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# As the TUI does, each frame opens the modules of the step's running and failed
# nodes and of its event's node (showing.focus_of): the fold being worked on
# shows its inside while its calls run, then closes again. The rest is what a
# still picture draws, and a fold's calls stay one box whatever their status, so
# the frames between two openings share one drawing (Note [Frames as changes]
# in frame_diff.py); each opening is one more drawing to lay out.

# Note [Drawing what changed]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~
# When two steps draw the same nodes, edges, clusters and graph tasks, the
# second frame is the first with the statements of what changed replaced. Those
# come from drawing a view that holds only them: the changed nodes, every edge
# between a pair of nodes where one edge changed (the k-th edge from A to B stays
# the k-th), a node inside each cluster whose summary changed (a cluster is
# drawn only around what it holds), and the first node of each device of each
# graph task (devices are numbered in the order their first node comes, and the
# clusters are named by that number). A statement the smaller drawing names
# that the frame does not have means the guess was wrong: the frame is drawn whole.


def view_frames(
    trace: Trace, steps: Sequence[int], options: ViewOptions, *, graph_task: int | None = None
) -> list[Frame | str]:
    """Each step's picture (the options of :func:`autograd_viz.draw.render.dot.to_dot`) as a
    frame.

    A frame that cannot be read as elements is its DOT source.
    """
    marked = set(options.highlight)
    drawing = _Drawing(options.saved, options.values, options.highlight)
    frames: list[Frame | str] = []
    pictures = showing.StepPictures()
    before: tuple[GraphView, Frame] | None = None
    for step in steps:
        whole = dot.build_view(trace.state_at(step), graph_task=graph_task)
        view = showing.show(
            whole, options, focus=working(whole, marked), follow=False, pictures=pictures
        )
        frame: Frame | str | None = None
        if before is not None and _same_shape(before[0], view):
            frame = _redrawn(before[1], before[0], view, drawing)
        if frame is None:
            frame = _drawn(view, drawing, options.legend)
        frames.append(frame)
        before = (view, frame) if isinstance(frame, Frame) else None
    return frames


def working(whole: GraphView, marked: Iterable[int] = ()) -> list[str]:
    """The nodes a frame opens the modules of (Note [An animation opens the work]): the
    step's running and failed nodes, its event's node, and the nodes of ``marked`` ids."""
    ids = set(marked)
    return [*showing.focus_of(whole), *(n.key for n in whole.nodes.values() if n.info.id in ids)]


def graph_frames(graphs: Iterable[graphviz.Digraph]) -> list[Frame | str]:
    """Frames of graphs drawn by any producer: read, or their whole source when unreadable."""
    out: list[Frame | str] = []
    for graph in graphs:
        source = graph.source
        lines = source.splitlines(keepends=True)
        head = next((i for i, line in enumerate(lines) if line.rstrip().endswith("{")), None)
        frame = None
        if head is not None and lines[-1].strip() == "}" and "strict" not in lines[head]:
            frame = read_frame(lines[head + 1 : -1])
        out.append(frame if frame is not None else source)
    return out


@dataclass(frozen=True, slots=True)
class _Drawing:
    """How every frame is drawn (the options of :func:`autograd_viz.draw.render.dot.render`)."""

    saved: bool
    values: bool
    highlight: tuple[int, ...]

    def render(
        self, view: GraphView, legend: bool, stacking: bool = True, quick: bool | None = None
    ) -> graphviz.Digraph:
        return dot.render(
            view,
            saved=self.saved,
            values=self.values,
            legend=legend,
            highlight=self.highlight,
            stacking=stacking,
            quick=quick,
            every_style=True,  # one legend for frames whose statuses change
        )


def _drawn(view: GraphView, drawing: _Drawing, legend: bool = True) -> Frame | str:
    """A whole frame. The caption under the graph keeps only the notices: the page
    writes each step's caption above the graph, and a caption that changed at
    every step would make every frame a drawing of its own."""
    graph = drawing.render(view, legend)
    notices = [*((dot.PATH_NOTICE,) if drawing.highlight else ()), *view.notices]
    caption = f"\tlabel={html_label([html_text(n) for n in notices])}\n" if notices else None
    # The graph's own settings (Note [Laying out big pictures quickly] in dot_render.py).
    settings = " ".join(f"{k}={v}" for k, v in graph.graph_attr.items())
    body = [f"\tgraph [{settings}]\n"] if settings else []
    for line in graph.body:
        if line.startswith("\tlabel="):  # the graph's own label: the caption
            if caption is not None:
                body.append(caption)
            continue
        body.append(line)
    frame = read_frame(body)
    return frame if frame is not None else "digraph backward {\n" + "".join(body) + "}\n"


def _same_shape(a: GraphView, b: GraphView) -> bool:
    """Whether two steps draw the same nodes, edges, boxes, clusters and graph tasks."""
    return (
        a.nodes.keys() == b.nodes.keys()
        and list(a.nodes) == list(b.nodes)
        and [(e.tail, e.head, e.input_nr) for e in a.edges]
        == [(e.tail, e.head, e.input_nr) for e in b.edges]
        and [x.key for x in a.boxes] == [x.key for x in b.boxes]
        and list(a.clusters) == list(b.clusters)
        and a.cluster_of == b.cluster_of
        and [(t.id, t.started_by) for t in a.tasks] == [(t.id, t.started_by) for t in b.tasks]
        and a.notices == b.notices
        and a.elided == b.elided
        and a.elided_near == b.elided_near
    )


def _redrawn(frame: Frame, before: GraphView, view: GraphView, drawing: _Drawing) -> Frame | None:
    """``frame`` (of ``before``) with what changed at ``view`` drawn again; ``None`` if unsure.

    See Note [Drawing what changed].
    """
    # Most of a step's nodes, edges and clusters are the last step's own objects
    # (Note [A picture from the step before] in module_picture.py): no fields compared.
    old_nodes, old_clusters = before.nodes, before.clusters
    nodes = {k for k, n in view.nodes.items() if n is not (o := old_nodes[k]) and n != o}
    pairs = {
        (e.tail, e.head)
        for e, old in zip(view.edges, before.edges, strict=True)
        if e is not old and e != old
    }
    nodes.update(b.node for b, old in zip(view.boxes, before.boxes, strict=True) if b != old)
    if nodes and len(view.nodes) > dot_render.QUICK_LAYOUT and nodes & _copied(view):
        # Its copies, drawn with the whole, change too (Note [Far edges drawn to a copy]).
        return None
    clusters = {
        k for k, c in view.clusters.items() if c is not (was := old_clusters[k]) and c != was
    }
    if not (nodes or pairs or clusters) and view.tasks == before.tasks:
        return frame
    for tail, head in pairs:
        nodes.update((tail, head))
    if clusters:
        nodes.update(_one_inside_each(view, clusters))
    firsts: dict[tuple[int, str], str] = {}
    for key, node in view.nodes.items():
        firsts.setdefault((node.graph_task, node.info.device), key)
    nodes.update(firsts.values())
    smaller = dataclasses.replace(
        view,
        nodes={k: n for k, n in view.nodes.items() if k in nodes},
        edges=tuple(e for e in view.edges if (e.tail, e.head) in pairs),
        boxes=tuple(b for b in view.boxes if b.node in nodes),
        elided=0,
        elided_near=(),
    )
    # The frame's stacking edges stay: the shape is the same, and they are made from
    # the whole graph, which the smaller view is not.
    quick = len(view.nodes) > dot_render.QUICK_LAYOUT  # the part drawn as the whole is
    graph = drawing.render(smaller, legend=False, stacking=False, quick=quick)
    changed = read_frame([line for line in graph.body if not line.startswith("\tlabel=")])
    if changed is None:
        return None
    elements = dict(frame.elements)
    for element, statements in changed.elements.items():
        known = elements.get(element)
        if known is None or len(known) != len(statements):
            return None
        elements[element] = statements
    return Frame(frame.skeleton, elements)


def _copied(view: GraphView) -> set[str]:
    """The nodes of ``view`` drawn again as copies at the ends of its far edges."""
    edges = view.edges
    return {
        edges[at].head if end == "head" else edges[at].tail
        for at, end in dot_render.far_edges(view).items()
    }


def _one_inside_each(view: GraphView, clusters: set[str]) -> set[str]:
    """A node inside each of ``clusters`` (directly or in a cluster within it)."""
    found: dict[str, str] = {}
    for key, innermost in view.cluster_of.items():
        cluster: str | None = innermost
        while cluster is not None:
            if cluster in clusters and cluster not in found:
                found[cluster] = key
            cluster = view.clusters[cluster].parent
        if len(found) == len(clusters):
            break
    return set(found.values())


__all__ = ["graph_frames", "view_frames", "working"]
