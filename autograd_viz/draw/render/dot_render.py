"""Graphviz drawing of a :class:`~autograd_viz.draw.model.graph_view.GraphView`: nodes, edges,
legend.

:func:`render` is the drawing half of :mod:`autograd_viz.draw.render.dot` (which
builds the view, chooses what to show and saves the file): each backward node
with its name and id, ``sequence_nr``, ``topological_nr``, dependencies and
device, filled with its status's colour; edges labelled with the input slot
they fill; a cluster per graph task and device; module boxes and clusters
through :mod:`autograd_viz.draw.render.dot_clusters`. Every piece of text comes from
user code and goes through :mod:`autograd_viz.draw.render.escape`.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import graphviz

from autograd_viz.draw.model.drawn import TensorBox
from autograd_viz.draw.model.graph_view import GraphView, TaskView, ViewEdge, ViewNode
from autograd_viz.draw.render import dot_quote
from autograd_viz.draw.render.dot_clusters import (
    MODULE_LEGEND,
    draw_nested,
    draw_stacking,
    loop_edge_attrs,
    module_attrs,
    module_edge_attrs,
)
from autograd_viz.draw.render.escape import html_label, html_text, plain_text
from autograd_viz.draw.render.styles import (
    BORDER,
    CAPTURED_BORDER,
    CUT_EDGE,
    DELIVERED,
    FONT,
    LEAF_FILL,
    NO_GRADIENT,
    NON_FINITE,
    OUTPUT_FILL,
    PATH_COLOR,
    PATH_NOTICE,
    PENDING,
    PRUNED_EDGE,
    REENTRANT,
    SAVED_FILL,
    STATUS_STYLES,
    Style,
)
from autograd_viz.trace.replay import NodeStatus
from autograd_viz.trace.text import sequence_text, thread_name

if TYPE_CHECKING:
    from autograd_viz.trace.summary import TensorSummary

# Note [Laying out big pictures quickly]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Graphviz's dot spends its time on a big picture in two searches, not in
# drawing: the order of nodes across each rank (mincross) and their places
# across the page (network simplex on a graph with a virtual node for each rank
# an edge crosses). Debian's 2.43 also checks each virtual node it deletes by
# walking the list of all of them, so its time grows with their square. Three
# things made that graph 20 times the picture:
# - an edge label is a node of its own, ranked halfway along its edge, so one
#   labelled edge doubles every rank of the picture (and every long edge's
#   virtual nodes). Past QUICK_LAYOUT nodes the input slot is an ``xlabel``,
#   placed beside the edge once the layout is done (``forcelabels`` keeps every
#   one): the same text, half the ranks;
# - a model's long edges (a tied embedding, T5's shared position bias, the
#   encoder's output into every decoder layer, the edges that stack module
#   clusters) cross hundreds of ranks. ``nslimit=1`` stops the placement after
#   as many steps as the picture has nodes; the widths measured stayed the same;
# - many of them end in one node (T5's encoder output takes a gradient from
#   each decoder layer's cross-attention, 18 edges of up to 650 ranks on 9 + 9
#   layers). ``concentrate`` runs edges that end in (or leave) the same node
#   as one line until they part: half the virtual nodes, a narrower page.
# A big stacked picture has its own (STACKED_QUICKLY in dot_clusters.py): its
# placement stops sooner, and no edges are concentrated, which there cost more
# than they saved.
# T5 with 6 layers opened whole (1,357 nodes) went from 112 s of dot to 2.5 s,
# with 9 layers (2,017 nodes) from 15 s to 7; a stacked 30-layer GPT-2 (2,118
# nodes) from 48 s to 2 (docs/performance.md).
# Debian's Graphviz 2.43 can crash routing splines around a placement stopped
# early: dot.pipe then draws the picture again with straight edges, and without
# concentrating them.

QUICK_LAYOUT = 400
"""Past this many nodes a picture is laid out with :data:`QUICK_SETTINGS`."""

QUICK_SETTINGS = {"forcelabels": "true", "nslimit": "1", "concentrate": "true"}
"""Graphviz's bounds on its searches for a big picture (Note [Laying out big pictures quickly])."""

# Note [Far edges drawn to a copy]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The settings above bound dot's searches, not the graph they search: an edge
# across R ranks is R - 1 virtual nodes, and a picture whose long edges grow
# with its depth (T5's encoder output read by every decoder block, every
# block's shared position bias) has tens of thousands of them at 2,000 nodes,
# past 10 s of dot whatever the settings. In a big picture (past QUICK_LAYOUT
# nodes) an edge that would cross more than FAR_RANKS ranks is drawn to a copy
# of its far end instead: a small dashed node, ``= name #id``, with the
# original's colour, drawn beside the other end, and the short edge to it.
# Which end is copied: the one with more far edges (the node that many far
# blocks read), the head on a tie. Every edge is then at most FAR_RANKS ranks
# plus what its ends' own ranks stretch it by, so the virtual nodes are
# bounded by the edges times FAR_RANKS, not by the picture's depth squared.
# Ranks are estimated before dot runs, as the longest path from the root over
# the drawn edges (a node no edge enters placed just above the first node it
# feeds), which is what dot's ranking starts from.
# It is done here, where the DOT is written, not in the view: the view keeps
# exactly one node per graph node for everything that reads a picture back
# (names typed back, captions, the TUI's finder), and a copy is only a place
# to end a line. Its id is its original's key with ``_far<n>`` after it and
# its class starts with ``proxy``, so readers of the SVG skip it. A line under
# the picture counts the edges drawn so.

FAR_RANKS = 40
"""In a big picture, an edge longer than this many ranks ends at a copy of its far end
(Note [Far edges drawn to a copy])."""


def render(
    view: GraphView,
    *,
    saved: bool = False,
    values: bool = False,
    legend: bool = True,
    highlight: Sequence[int] = (),
    stacking: bool = True,
    quick: bool | None = None,
    far: bool | None = None,
    every_style: bool = False,
) -> graphviz.Digraph:
    """Draw ``view`` (see :func:`to_dot`).

    The legend lists what this picture draws (Note [A legend of what is drawn]);
    ``every_style`` lists every status and mark instead, as an animation's frames share
    one legend while their statuses change.

    ``stacking=False`` leaves out the invisible edges that stack module clusters: they
    depend on the whole graph, and a view of part of it (an animation's changed
    elements, Note [Drawing what changed] in step_frames.py) would get other ones.
    ``quick`` lays it out with :data:`QUICK_SETTINGS`, its edge labels beside the edges
    (Note [Laying out big pictures quickly]); by default when ``view`` has more than
    :data:`QUICK_LAYOUT` nodes. The changed part of a big picture is drawn as the picture is.
    ``far`` draws edges longer than :data:`FAR_RANKS` ranks to a copy of their far end
    (Note [Far edges drawn to a copy]); by default when ``view`` has more than
    :data:`QUICK_LAYOUT` nodes.
    """
    graph = dot_quote.Digraph("backward", comment="autograd-viz backward graph")
    graph.attr(
        rankdir="TB",
        compound="true",
        nodesep="0.25",
        ranksep="0.35",
        fontname=FONT,
        fontsize="11",
        labelloc="b",
    )
    # Defaults carry what most nodes and edges share: quoting attributes is most of the cost.
    graph.attr(
        "node", shape="box", style="filled,rounded", color=BORDER, fontname=FONT, fontsize="11"
    )
    graph.attr("edge", color=PENDING, fontname=FONT, fontsize="9", arrowsize="0.7")
    if quick is None:  # Note [Laying out big pictures quickly]
        quick = len(view.nodes) > QUICK_LAYOUT
    if quick:
        # In graph_attr, so that a copy drawn again (dot.pipe) keeps them.
        graph.graph_attr.update(QUICK_SETTINGS)
    beside = quick or _stacked(view)  # Note [Edge labels beside a stacked picture]
    if beside and not quick:
        graph.graph_attr["forcelabels"] = "true"
    if far is None:  # Note [Far edges drawn to a copy]
        far = len(view.nodes) > QUICK_LAYOUT
    copied = far_edges(view) if far else {}
    caption = _caption(view, PATH_NOTICE if highlight else None, _far_notice(len(copied)))
    if caption:
        graph.attr(label=caption)
    boxes = list(view.boxes)
    if saved:
        boxes.extend(_saved_boxes(view))
    by_node: dict[str, list[TensorBox]] = {}
    for box in boxes:
        by_node.setdefault(box.node, []).append(box)
    with_clusters = view.step is not None
    for position, task in enumerate(view.tasks):
        members = [n for n in view.nodes.values() if n.graph_task == task.id]
        if with_clusters:
            with graph.subgraph(name=f"cluster_t{position}") as cluster:
                cluster.attr(
                    label=_task_label(task),
                    style="rounded",
                    color=REENTRANT if task.reentrant_depth else "#d1d5db",
                    fontcolor="#374151",
                    labelloc="t",
                )
                _draw_devices(cluster, members, by_node, values, f"t{position}", view)
        else:
            _draw_devices(graph, members, by_node, values, f"t{position}", view)
    on_path = set(itertools.pairwise(highlight))
    copies = itertools.count()
    for position, edge in enumerate(view.edges):
        attrs = _edge_attrs(edge, view, values)
        sender, receiver = view.nodes[edge.tail], view.nodes[edge.head]
        ids = (sender.info.id, receiver.info.id)
        if sender.box is None and receiver.box is None and ids in on_path:
            attrs.update(color=PATH_COLOR, penwidth="3.5")
        tail, head = edge.tail, edge.head
        end = copied.get(position)
        if end is not None:  # Note [Far edges drawn to a copy]
            original, near = (receiver, sender) if end == "head" else (sender, receiver)
            key = f"{original.key}_far{next(copies)}"
            graph.node(key, **_copy_attrs(original, near, key, values))
            tail, head = (tail, key) if end == "head" else (key, head)
        graph.edge(tail, head, **(_placed_after(attrs) if beside else attrs))
    marked = set(highlight)
    for node in view.nodes.values():
        if node.box is None and node.info.id in marked:
            graph.node(node.key, color=PATH_COLOR, penwidth="3.5")  # DOT merges the attributes
    for box in boxes:
        tail, head = (box.key, box.node) if box.kind == "output" else (box.node, box.key)
        if box.kind == "saved":
            graph.edge(tail, head, style="dashed", arrowhead="none")
        elif box.cut is not None:  # Note [Leaves without gradient in a picture]
            cut = _cut_attrs(box)
            graph.edge(tail, head, **(_placed_after(cut) if quick else cut))
        else:
            graph.edge(tail, head)
    _draw_reentrant_links(graph, view)
    if view.elided:
        _draw_elided(graph, view)
    if legend:
        # Two columns in a stacked picture, which is meant to be a page tall.
        columns = 2 if beside and not quick else 1
        label = _legend_label(view, columns, every_style)
        graph.node("legend", label=label, id="legend", shape="plaintext", style="")
    if stacking:
        draw_stacking(graph, view, boxes, legend)  # Note [Stacking module clusters]
    return graph


# Note [Edge labels beside a stacked picture]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The default picture of a model is meant to be a page tall (Note [A picture a page
# tall] in showing.py), and an edge label ranked halfway along its edge (an input
# slot's ``0``) adds a rank between every two rows of the picture. A picture with
# a stack (the default ``dot`` of a model that repeats a block) places its edge
# labels beside the edges once laid out, as a big picture does (Note [Laying out big
# pictures quickly]): the same text, ``forcelabels`` keeping every one, and rows
# that are only as far apart as ``ranksep``.


def _stacked(view: GraphView) -> bool:
    return any(cluster.stack is not None for cluster in view.clusters.values())


def _draw_devices(
    graph: graphviz.Digraph,
    members: Sequence[ViewNode],
    boxes: dict[str, list[TensorBox]],
    values: bool,
    prefix: str,
    view: GraphView,
) -> None:
    devices: dict[str, list[ViewNode]] = {}
    for node in members:
        devices.setdefault(node.info.device, []).append(node)

    def draw_node(graph: graphviz.Digraph, node: ViewNode) -> None:
        graph.node(node.key, **_node_attrs(node, values))
        for box in boxes.get(node.key, ()):
            graph.node(box.key, **_box_attrs(box, values))

    for i, (device, nodes) in enumerate(devices.items()):
        with graph.subgraph(name=f"cluster_{prefix}_d{i}") as cluster:
            cluster.attr(
                label=html_label([f"<I>{html_text(device)}</I>"]),
                style="dashed,rounded",
                color="#9ca3af",
                fontcolor="#6b7280",
                labelloc="t",
            )
            if view.clusters:
                draw_nested(cluster, nodes, view, f"{prefix}_d{i}", draw_node)
                continue
            for node in nodes:
                draw_node(cluster, node)


def _small(text: str, color: str | None = None) -> str:
    colour = f' COLOR="{color}"' if color else ""
    return f'<FONT POINT-SIZE="9"{colour}>{text}</FONT>'


def _seq(nr: int) -> str:
    return sequence_text(nr)


def _node_attrs(node: ViewNode, values: bool) -> dict[str, str]:
    if node.box is not None:
        return module_attrs(node.box)
    info = node.info
    status = node.status
    style = STATUS_STYLES["not run" if status is None else status]
    title = f"<B>{html_text(info.name)}</B> {_small(f'#{info.id}', PENDING)}"
    numbers = f"seq {_seq(info.sequence_nr)} · topo {info.topological_nr}"
    deps = f"deps {node.remaining}/{info.dependencies} · {html_text(info.device)}"
    rows = [title, _small(numbers), _small(deps)]
    if values:
        rows.extend(
            _small(f"in {i}: {html_text(_summary(s))}")
            for i, s in enumerate(node.slots)
            if s is not None
        )
    if node.error:
        rows.append(_small(html_text(_shorten(node.error, 60)), "#b91c1c"))
    flagged = node.non_finite
    if flagged:
        rows.append(f'<FONT COLOR="#dc2626"><B>{html_text(_non_finite_text(node))}</B></FONT>')
        style = Style(NON_FINITE.fill, NON_FINITE.border, NON_FINITE.penwidth, style.dashed)
    attrs = {
        "label": html_label(rows),
        "id": node.key,
        "class": "nonfinite" if flagged else ("not-run" if status is None else status.value),
        "fillcolor": style.fill,
        "tooltip": plain_text(_tooltip(node)),
    }
    if style.border != BORDER:
        attrs["color"] = style.border
    if style.dashed:
        attrs["style"] = "filled,rounded,dashed"
    if style.penwidth != 1.0:
        attrs["penwidth"] = str(style.penwidth)
    if node.captured:
        attrs["peripheries"] = "2"
        attrs["color"] = CAPTURED_BORDER
    return attrs


def _tooltip(node: ViewNode) -> str:
    info = node.info
    parts = [f"{info.name} (id {info.id}, graph task {node.graph_task})"]
    if node.status is not None:
        parts.append(f"status: {node.status.value}")
    if node.thread:
        parts.append(f"ran on {thread_name(node.thread)}")
    if node.error:
        parts.append(node.error)
    if info.traceback:
        parts.append("forward call:")
        parts.extend(line.rstrip() for line in info.traceback[-4:])
    return "\n".join(parts)


def _non_finite_text(node: ViewNode) -> str:
    nan = sum(s.nan_count for s in (*node.slots, *(node.outputs or ())) if s is not None)
    inf = sum(s.inf_count for s in (*node.slots, *(node.outputs or ())) if s is not None)
    found = [f"NaN×{nan}" if nan else "", f"Inf×{inf}" if inf else ""]
    return "⚠ " + " ".join(f for f in found if f)


def _box_attrs(box: TensorBox, values: bool) -> dict[str, str]:
    fill = {"leaf": LEAF_FILL, "output": OUTPUT_FILL, "saved": SAVED_FILL}[box.kind]
    shape = ", ".join(str(d) for d in box.shape)
    rows = [
        f"<B>{html_text(box.title)}</B>",
        _small(f"({html_text(shape)}) {html_text(box.dtype)}"),
    ]
    if values and box.summary is not None:
        what = ".grad " if box.kind == "leaf" else ""
        rows.append(_small(html_text(what + _summary(box.summary))))
    attrs = {
        "label": html_label(rows),
        "id": box.key,
        "class": box.kind,
        "fillcolor": fill,
        "style": "filled",
    }
    if box.summary is not None and not box.summary.finite:
        attrs.update(color=NON_FINITE.border, penwidth=str(NON_FINITE.penwidth))
    if box.why is not None:  # Note [Leaves without gradient in a picture]
        first = box.why.split("\n", 1)[0].partition(": ")[2].partition(": ")[0]
        rows.append(_small(html_text(first), NO_GRADIENT.border))
        attrs.update(
            label=html_label(rows),
            fillcolor=NO_GRADIENT.fill,
            color=NO_GRADIENT.border,
            penwidth=str(NO_GRADIENT.penwidth),
            style="filled,dashed",
            tooltip=plain_text(box.why),
        )
        attrs["class"] = "leaf no-gradient"
    return attrs


def _placed_after(attrs: dict[str, str]) -> dict[str, str]:
    """An edge's attributes with its label placed after the layout (``xlabel``), not ranked
    in the middle of the edge (Note [Laying out big pictures quickly])."""
    if "label" in attrs:
        attrs["xlabel"] = attrs.pop("label")
    return attrs


def _cut_attrs(box: TensorBox) -> dict[str, str]:
    """The dashed edge from the root to a parameter off the graph, labelled with its line."""
    return {
        "style": "dashed",
        "color": CUT_EDGE,
        "fontcolor": CUT_EDGE,
        "label": html_label([html_text(box.cut)]),
        "tooltip": plain_text(box.why),
        "class": "cut",
    }


def _edge_attrs(edge: ViewEdge, view: GraphView, values: bool) -> dict[str, str]:
    tail_node, head_node = view.nodes[edge.tail], view.nodes[edge.head]
    if edge.rolled:  # a stack's loop (Note [A fold is drawn as a stack] in stacks.py)
        return loop_edge_attrs(edge, tail_node, head_node)
    if tail_node.box is not None or head_node.box is not None:
        return module_edge_attrs(edge, tail_node, head_node)
    rows = [str(edge.input_nr)]
    attrs: dict[str, str] = {}
    if values and edge.grad is not None:
        rows.append(html_text(_summary(edge.grad)))
    if edge.pruned:
        attrs = {"color": PRUNED_EDGE, "style": "dashed"}
    elif edge.delivered:
        attrs = {"color": DELIVERED, "style": "bold", "penwidth": "2"}
    if edge.grad is not None and not edge.grad.finite:
        attrs.update(color=NON_FINITE.border, penwidth="3", fontcolor=NON_FINITE.border)
    tail = view.nodes[edge.tail].info.name
    head = view.nodes[edge.head].info.name
    attrs["label"] = html_label(rows) if len(rows) > 1 else rows[0]
    attrs["tooltip"] = plain_text(
        f"output {edge.output_nr} of {tail} → input {edge.input_nr} of {head}"
    )
    return attrs


def _saved_boxes(view: GraphView) -> Iterable[TensorBox]:
    for node in view.nodes.values():
        if node.box is not None:
            continue
        for i, summary in enumerate(node.info.saved):
            freed = summary is None or node.released
            title = f"saved {i}" + (" (freed)" if freed else "")
            shape = () if summary is None else summary.shape
            dtype = "" if summary is None else summary.dtype
            yield TensorBox(f"{node.key}_s{i}", "saved", node.key, title, summary, shape, dtype)


def _draw_reentrant_links(graph: graphviz.Digraph, view: GraphView) -> None:
    for position, task in enumerate(view.tasks):
        if task.started_by is None or task.started_by not in view.nodes:
            continue
        first = next((n.key for n in view.nodes.values() if n.graph_task == task.id), None)
        if first is None:
            continue
        graph.edge(
            task.started_by,
            first,
            label="reentrant backward",
            lhead=f"cluster_t{position}",
            color=REENTRANT,
            fontcolor=REENTRANT,
            style="dashed",
        )


def _draw_elided(graph: graphviz.Digraph, view: GraphView) -> None:
    graph.node(
        "elided",
        label=html_label([html_text(f"⋯ {view.elided:,} more nodes not shown")]),
        id="elided",
        shape="note",
        fillcolor="#fef3c7",
        style="filled",
    )
    for key in view.elided_near:
        graph.edge(key, "elided", style="dotted", arrowhead="none")


def _task_label(task: TaskView) -> str:
    kind = f"reentrant backward, depth {task.reentrant_depth}" if task.reentrant_depth else ""
    words = [f"graph task {task.id}", kind, task.status or ""]
    rows = [f"<B>{html_text(' · '.join(w for w in words if w))}</B>"]
    if task.error:
        rows.append(_small(html_text(_shorten(task.error, 80)), "#b91c1c"))
    return html_label(rows)


def _caption(view: GraphView, extra: str | None = None, last: str | None = None) -> str:
    rows = [] if extra is None else [html_text(extra)]
    if view.step is not None:
        line = f"step {view.step:,} of {view.total or 0:,}"
        event = view.event
        if event is None:
            line += ": before the first event"
        else:
            where = f" {event.node_name}" if event.node_name else ""
            line += f": {event.kind}{where} on {thread_name(event.thread)}"
        rows.append(html_text(line))
    rows.extend(html_text(n) for n in view.notices)
    if last is not None:
        rows.append(html_text(last))
    return html_label(rows) if rows else ""


def far_edges(view: GraphView) -> dict[int, str]:
    """The edges of ``view`` (by place in ``view.edges``) longer than :data:`FAR_RANKS`
    ranks, each with the end drawn as a copy: ``"head"`` or ``"tail"`` (Note [Far edges
    drawn to a copy])."""
    ranks = _estimated_ranks(view)
    long: list[tuple[int, str, str]] = []
    for position, edge in enumerate(view.edges):
        tail, head = ranks.get(edge.tail), ranks.get(edge.head)
        if edge.rolled or tail is None or head is None or edge.tail == edge.head:
            continue  # a stack's loop edge does not rank what it joins
        if head - tail > FAR_RANKS:
            long.append((position, edge.tail, edge.head))
    leaving = Counter(tail for _, tail, _ in long)
    entering = Counter(head for _, _, head in long)
    return {
        position: "tail" if leaving[tail] > entering[head] else "head"
        for position, tail, head in long
    }


def _estimated_ranks(view: GraphView) -> dict[str, int]:
    """Each node's rank as dot starts from: the longest path to it over the drawn edges, a
    node no edge enters just above the first it feeds. Nodes on a cycle (of boxes) have
    none."""
    below: dict[str, list[str]] = {key: [] for key in view.nodes}
    entering = dict.fromkeys(view.nodes, 0)
    for edge in view.edges:
        if edge.rolled or edge.tail == edge.head:
            continue
        if edge.tail in below and edge.head in entering:
            below[edge.tail].append(edge.head)
            entering[edge.head] += 1
    sources = [key for key, n in entering.items() if n == 0]
    order: list[str] = []
    ready = list(sources)
    ranks = dict.fromkeys(ready, 0)
    while ready:
        key = ready.pop()
        order.append(key)
        for head in below[key]:
            ranks[head] = max(ranks.get(head, 0), ranks[key] + 1)
            entering[head] -= 1
            if entering[head] == 0:
                ready.append(head)
    for key in sources:
        fed = [ranks[h] for h in below[key] if entering[h] == 0]
        if fed:
            ranks[key] = min(fed) - 1
    return {key: ranks[key] for key in order}


def _far_notice(copied: int) -> str | None:
    if not copied:
        return None
    edges = "1 edge" if copied == 1 else f"{copied:,} edges"
    return (
        f"{edges} longer than {FAR_RANKS} ranks drawn to a dashed copy of their far end"
        " (= name #id) beside the near one"
    )


def _copy_attrs(original: ViewNode, near: ViewNode, key: str, values: bool) -> dict[str, str]:
    """A small dashed copy of ``original``, drawn beside ``near`` (Note [Far edges drawn to a
    copy]): its name and id, its colour, a class that starts with ``proxy``."""
    attrs = _node_attrs(original, values)
    if original.box is not None:
        name = original.box.name
        count = f" × {original.box.count:,}" if original.box.count > 1 else ""
        title = f"= <B>{html_text(name)}</B>{count}"
        what = f"{name}{count}"
    else:
        name = original.info.name
        title = f"= <B>{html_text(name)}</B> {_small(f'#{original.info.id}', PENDING)}"
        what = f"{name} (id {original.info.id})"
    there = near.box.name if near.box is not None else f"{near.info.name} (id {near.info.id})"
    copy = {
        "label": html_label([title]),
        "id": key,
        "class": f"proxy {attrs['class']}",
        "fillcolor": attrs["fillcolor"],
        "style": "filled,rounded,dashed",
        "fontsize": "9",
        "tooltip": plain_text(
            f"{what}, drawn again beside {there}: its edge with it is drawn here, not across"
            f" the picture; the node itself is drawn once, elsewhere"
        ),
    }
    if "color" in attrs:
        copy["color"] = attrs["color"]
    return copy


# Note [A legend of what is drawn]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A picture's legend lists the statuses, marks, tensor boxes and module shapes
# the picture draws, not all sixteen: a finished backward is all "done", and
# rows for queued, running or failed nodes it does not have made the default
# picture of a model as wide again as its graph. The statuses are those of its
# nodes, module boxes and frames; a mark (captured, NaN or Inf, a delivered
# edge) is listed when something carries it. While a graph task runs, the
# legend lists every status a node passes through (waiting to done), so that
# pictures of one backward at its steps share one legend and one layout until
# it ends. An animation's frames share one legend to the end, so it lists every
# style (``every_style``).


def _legend_label(view: GraphView, columns: int = 1, every_style: bool = False) -> str:
    drawn = None if every_style else _drawn_styles(view)
    if drawn is not None and drawn & _RUNNING:
        drawn |= _PASSED_THROUGH  # mid-run: the statuses its nodes pass through, all of them
    shown = ["not run"] if view.step is None else [s for s in STATUS_STYLES if s != "not run"]
    cells = []
    for status in shown:
        if drawn is not None and view.step is not None and status not in drawn:
            continue  # before backward every node is "not run"
        style = STATUS_STYLES[status]
        cells.append((style.fill, style.meaning + (" (dashed)" if style.dashed else "")))
    if view.step is not None:
        if drawn is None or "captured" in drawn:
            cells.append(("#ffffff", "captured for grad() (double blue border)"))
        if drawn is None or "non-finite" in drawn:
            cells.append((NON_FINITE.fill, NON_FINITE.meaning + " (thick red border)"))
        if drawn is None or "delivered" in drawn:
            cells.append(("#ffffff", "bold edge: gradient delivered"))
    kinds = {box.kind for box in view.boxes}
    if drawn is None or "leaf" in kinds:
        cells.append((LEAF_FILL, "leaf tensor (its .grad)"))
    if drawn is None or "saved" in kinds:
        cells.append((SAVED_FILL, "saved tensor"))
    if any(box.why is not None for box in view.boxes):
        cells.append(
            (NO_GRADIENT.fill, NO_GRADIENT.meaning + "; dashed red edge: where it was cut")
        )
    if view.step is None and (drawn is None or "output" in kinds):
        cells.append((OUTPUT_FILL, "output tensor"))
    if view.clusters or any(n.box is not None for n in view.nodes.values()):
        cells.extend(
            row
            for shape, row in zip(_MODULE_SHAPES, MODULE_LEGEND, strict=True)
            if drawn is None or shape in drawn
        )
    if len(cells) <= 8:
        columns = 1  # a short legend is narrower in one column, and still short
    lines = -(-len(cells) // columns)  # column by column, ``columns`` side by side
    rows = "".join(
        "<TR>"
        + "".join(
            f'<TD BGCOLOR="{fill}" BORDER="1">  </TD><TD ALIGN="LEFT">{html_text(text)}</TD>'
            for fill, text in cells[row::lines]
        )
        + "</TR>"
        for row in range(lines)
    )
    return (
        '<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="2" CELLPADDING="2">'
        f'<TR><TD COLSPAN="{2 * columns}"><B>legend</B></TD></TR>{rows}</TABLE>>'
    )


_RUNNING = frozenset(
    {NodeStatus.WAITING, NodeStatus.PARTIAL, NodeStatus.QUEUED, NodeStatus.RUNNING}
)
_PASSED_THROUGH = _RUNNING | {NodeStatus.DONE, "delivered"}
_MODULE_SHAPES = ("box", "3d box", "frame", "stack")
"""What each row of :data:`MODULE_LEGEND` names, as :func:`_drawn_styles` marks it."""


def _drawn_styles(view: GraphView) -> set[object]:
    """What ``view`` draws that its legend names (Note [A legend of what is drawn]): node
    statuses, the marks ``"captured"``, ``"non-finite"`` and ``"delivered"``, and the
    module shapes it draws (:data:`_MODULE_SHAPES`)."""
    drawn: set[object] = set()
    for node in view.nodes.values():
        box = node.box
        if box is None:
            drawn.add(node.status)
            if node.non_finite:
                drawn.add("non-finite")
        else:
            drawn.add(box.summary.node_status)
            drawn.add("3d box" if box.count > 1 else "box")
            if box.summary.non_finite:
                drawn.add("non-finite")
        if node.captured:
            drawn.add("captured")
    for cluster in view.clusters.values():
        drawn.add(cluster.summary.node_status)
        drawn.add("stack" if cluster.stack is not None else "frame")
        if cluster.summary.non_finite:
            drawn.add("non-finite")
    for edge in view.edges:
        if edge.delivered:
            drawn.add("delivered")
        if edge.grad is not None and not edge.grad.finite:
            drawn.add("non-finite")
    return drawn


def _summary(summary: TensorSummary) -> str:
    """A gradient in a few characters: its values when small, else its norm and range."""
    if not summary.finite:
        parts = [f"NaN×{summary.nan_count}" if summary.nan_count else ""]
        parts.append(f"Inf×{summary.inf_count}" if summary.inf_count else "")
        return " ".join(p for p in parts if p)
    if summary.values is not None and len(summary.values) <= 4:
        return "[" + ", ".join(f"{v:.4g}" for v in summary.values) + "]"
    if summary.norm is None:
        return "×".join(str(d) for d in summary.shape) or "scalar"
    return f"‖g‖={summary.norm:.4g}"


def _shorten(text: str, width: int) -> str:
    first = text.splitlines()[0] if text else ""
    return first if len(first) <= width else first[: width - 1] + "…"


__all__ = ["FAR_RANKS", "QUICK_LAYOUT", "QUICK_SETTINGS", "far_edges", "render"]
