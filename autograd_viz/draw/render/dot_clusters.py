"""Graphviz for the module view: open module calls as nested clusters, closed ones as boxes.

:func:`autograd_viz.draw.render.dot.render` draws a view through here when
:func:`autograd_viz.draw.model.showing.apply` gave it clusters or boxes. Every name
(module paths, class names) is data and goes through the exporter's escaping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import graphviz

from autograd_viz.draw.model.drawn import (
    BoxStatus,
    BoxSummary,
    Cluster,
    ModuleBox,
    Stack,
    TensorBox,
)
from autograd_viz.draw.model.graph_view import GraphView, ViewEdge, ViewNode, reach_bits
from autograd_viz.draw.model.stacks import statuses_text
from autograd_viz.draw.model.tree import kind_shown
from autograd_viz.draw.render import dot_quote
from autograd_viz.draw.render.escape import html_label, html_text, plain_text
from autograd_viz.draw.render.styles import (
    BORDER,
    DELIVERED,
    NON_FINITE,
    PENDING,
    PRUNED_EDGE,
    STATUS_STYLES,
)
from autograd_viz.trace.text import count_words

CLUSTER_COLORS = {
    BoxStatus.NOT_STARTED: "#9ca3af",
    BoxStatus.RUNNING: "#ea580c",
    BoxStatus.DONE: "#16a34a",
    BoxStatus.FAILED: "#b91c1c",
}
"""A module cluster's border colour by the status of what it holds."""
MODULE_FONT = "#1f2937"
OPS_ONLY = "alike by ops (shapes not recorded)"
"""What a fold says whose calls were compared without their tensors' shapes."""

WRAP = 4
"""How many sinks of one node stand side by side in the module view before the row wraps."""

STACK_LIMIT = 5_000
"""The most nodes a picture is stacked for. Finding the stacking edges keeps a bit set per node
of what it reaches (quadratic memory), and Graphviz's layout of a stacked picture grows faster
than the picture: a 12-layer GPT-2 opened whole (858 nodes, 1,006 with its tensors) takes 10 s."""

BIG_PICTURE = 600
"""Past this many nodes a stacked picture is laid out with :data:`STACKED_QUICKLY`."""

STACKED_QUICKLY = {"nslimit": "0.3", "concentrate": "false"}
"""Graphviz's settings for a big stacked picture, after Note [Laying out big pictures quickly] in
dot_render.py. The stacking edges' virtual nodes made placing a 12-layer GPT-2 opened whole 30 s;
stopped after 0.3 steps a node, a T5 of 9 + 9 layers stacked (2,013 nodes) lays out in 6 s of
dot instead of 9-11, the widths the same. Concentrated, its edges took longer (11-13 s): dot
merges their virtual nodes one by one, and inside nested clusters each costs a walk over them."""

NodeDrawer = Callable[[graphviz.Digraph, ViewNode], None]


def draw_nested(
    graph: graphviz.Digraph,
    nodes: Sequence[ViewNode],
    view: GraphView,
    prefix: str,
    draw_node: NodeDrawer,
) -> None:
    """Draw ``nodes`` inside the clusters of the module calls they belong to, nested.

    Args:
        graph: the graph or cluster to draw into.
        nodes: the nodes to draw (one device of one graph task).
        view: the view (its ``clusters`` and ``cluster_of``).
        prefix: makes this place's cluster names unique.
        draw_node: draws one node (and what hangs from it) into a (sub)graph.
    """
    held: dict[str | None, list[ViewNode]] = {}
    children: dict[str | None, dict[str, None]] = {}
    for node in nodes:
        cluster = view.cluster_of.get(node.key)
        held.setdefault(cluster, []).append(node)
        # Every enclosing cluster is drawn, from the outermost down.
        while cluster is not None:
            parent = view.clusters[cluster].parent
            children.setdefault(parent, {})[cluster] = None
            cluster = parent
    for node in held.get(None, ()):
        draw_node(graph, node)
    # Clusters nest as deep as the modules do (tens of levels at most), one stack frame each.
    _draw_children(graph, None, held, children, view.clusters, prefix, draw_node)


def _draw_children(
    graph: graphviz.Digraph,
    parent: str | None,
    held: Mapping[str | None, Sequence[ViewNode]],
    children: Mapping[str | None, Mapping[str, None]],
    clusters: Mapping[str, Cluster],
    prefix: str,
    draw_node: NodeDrawer,
) -> None:
    for key in children.get(parent, ()):
        cluster = clusters[key]
        stack = cluster.stack
        if stack is None:
            with graph.subgraph(name=f"cluster_{prefix}_{key}") as sub:
                _draw_cluster(sub, cluster, prefix, held, children, clusters, draw_node)
            continue
        # Note [A fold is drawn as a stack] in draw/model/stacks.py: the fold's frame, shaded,
        # around the drawn call's, white: a card on a stack of cards.
        with graph.subgraph(name=f"cluster_{prefix}_{key}_stack") as outer:
            outer.attr(
                label=stack_label(stack, cluster),
                style="rounded,filled",
                fillcolor=STACK_FILL,
                penwidth="2",
                color=CLUSTER_COLORS[stack.summary.status],
                fontcolor=MODULE_FONT,
                labelloc="t",
                margin="6",
                id=f"{prefix}_{key}_stack",
                tooltip=plain_text(stack_tooltip(stack)),
                **{"class": "stack"},
            )
            with outer.subgraph(name=f"cluster_{prefix}_{key}") as sub:
                _draw_cluster(sub, cluster, prefix, held, children, clusters, draw_node)


def _draw_cluster(
    sub: graphviz.Digraph,
    cluster: Cluster,
    prefix: str,
    held: Mapping[str | None, Sequence[ViewNode]],
    children: Mapping[str | None, Mapping[str, None]],
    clusters: Mapping[str, Cluster],
    draw_node: NodeDrawer,
) -> None:
    """One open call's frame and what it holds."""
    key = cluster.key
    label = cluster_label(cluster)
    attrs = {
        "label": label,
        "style": "rounded",
        "color": CLUSTER_COLORS[cluster.summary.status],
        "fontcolor": MODULE_FONT,
        "labelloc": "t",
        "id": f"{prefix}_{key}",
        "tooltip": plain_text(_plain_tooltip(cluster.name, cluster.kind, cluster.summary)),
    }
    if cluster.stack is not None:  # a white card on the stack, labelled by the stack
        attrs.update(style="rounded,filled", fillcolor="#ffffff", margin="4")
    sub.attr(**attrs)
    for node in held.get(key, ()):
        draw_node(sub, node)
    _draw_children(sub, key, held, children, clusters, prefix, draw_node)


# Note [Stacking module clusters]
# Graphviz draws a cluster as one rectangle over every rank its nodes take, and two clusters whose
# rank ranges overlap must stand side by side. A module's parameters hang below the node that uses
# them (AccumulateGrad, then the leaf tensor), so a module's rectangle reaches well below the node
# its gradient leaves from; the next module, fed by that node, starts inside that range and is put
# beside it. Module after module this draws a model as a diagonal staircase (a resnet18's stages,
# 7,000 points wide). An invisible edge from each bottom node of the module the gradient leaves to
# the node it reaches puts the next module below the whole rectangle: modules stack down the page
# in the order gradients flow, and only branches that run side by side in the model (a block's
# shortcut) stand side by side. The edges never join a cycle: one is added only where nothing below
# its head leads back into the module.
#
# An invisible edge never doubles an edge already drawn. Graphviz 2.43's dot merges edges between
# the same two nodes into one chain of virtual nodes, and a merged chain of a weight-0 edge and a
# weighted one that runs past the module boxes (a tied weight: GPT-2's lm_head feeds the token
# embedding's AccumulateGrad, 500 ranks below) crashes its spline router (a segmentation fault, or
# "in checkpath, start port not in first box" first). Every crash seen came from such a pair; the
# drawing is made from the view before it is stacked, so a crash of another kind falls back to it
# (:func:`unstacked`).


def stacking_edges(view: GraphView, hanging: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
    """Invisible edges that put each module call's cluster below the one its gradients leave.

    Args:
        view: a view drawn with module clusters.
        hanging: the keys of the boxes drawn under a node (its leaf or saved tensors).

    Returns:
        ``(tail, head)`` pairs: tail is a bottom node of a cluster, head a node outside it that an
        edge from inside reaches (Note [Stacking module clusters]); none doubles an edge of the
        view.
    """
    clusters = view.clusters
    if not clusters:
        return []
    # A stack's loop goes back up its drawn call: no gradient flows down along it.
    edges = [edge for edge in view.edges if not edge.rolled]
    inside: dict[str, set[str]] = {}  # a cluster's nodes, nested ones included
    for key in view.cluster_of:
        for cluster in _path(view, key):
            inside.setdefault(cluster, set()).add(key)
    out: dict[str, list[str]] = {}
    for edge in edges:
        out.setdefault(edge.tail, []).append(edge.head)
    drawn = {(edge.tail, edge.head) for edge in edges}
    pairs: dict[tuple[str, str], None] = dict.fromkeys(_wrapped_rows(view, out, hanging))
    # The outermost module call each edge leaves, and the heads it reaches from there.
    leaving: dict[str, dict[str, None]] = {}
    for edge in edges:
        left = None
        for cluster in _path(view, edge.tail):
            if edge.head in inside[cluster]:
                break
            left = cluster
        # A gradient that ends in a parameter of another module (a tied weight: GPT-2's lm_head
        # and its token embedding) needs no stacking, the parameter hangs below what feeds it;
        # edges to it from the bottoms of a call at the top of the picture went round the whole
        # drawing (an opened BERT layer 460 points wider for them).
        if left is not None and edge.head in out:
            leaving.setdefault(left, {})[edge.head] = None
    # What each node reaches, as a bit set over the nodes, to keep the added edges acyclic.
    bit = {key: 1 << i for i, key in enumerate(view.nodes)}
    reach = _reach(view, out, bit)
    stacked: dict[str, set[str]] = {}  # tail -> heads of the pairs so far
    for tail, head in pairs:
        stacked.setdefault(tail, set()).add(head)
    # Innermost calls first: a bottom of an inner call already stacked above another node of the
    # outer one is not a bottom of the outer one, so an outer call's edges leave only from its
    # lowest nodes. Edges from every bottom, however high, cost Graphviz a virtual node per rank
    # they cross: a 12-layer GPT-2 opened whole took 30,000 of them and half a minute to lay out.
    for left in sorted(leaving, key=lambda c: -len(_path(view, c))):
        members = inside[left]
        mask = sum(bit[k] for k in members)
        bottoms = [
            b
            for k in members
            if not any(h in members for h in out.get(k, ()))
            for b in (hanging.get(k) or [k])
            if not any(h in members for h in stacked.get(b, ()))
        ]
        for head in leaving[left]:
            if reach[head] & mask:
                continue
            for bottom in bottoms:
                if (bottom, head) not in drawn:  # never doubled (Note [Stacking module clusters])
                    pairs[(bottom, head)] = None
                    stacked.setdefault(bottom, set()).add(head)
    return _fewest(pairs, reach, bit)


def _fewest(
    pairs: Iterable[tuple[str, str]], reach: Mapping[str, int], bit: Mapping[str, int]
) -> list[tuple[str, str]]:
    """``pairs`` without those whose head another head of the same tail reaches by drawn edges:
    that head is ranked below the other one, so below the tail, already.

    A T5 decoder layer's gradients reach the layer below, the shared position bias in the first
    layer and the encoder's output. Edges from every bottom of every layer to the last two
    crossed hundreds of ranks each, and dot spends a virtual node on each rank crossed (and time
    quadratic in them): 9 + 9 layers stacked took 40 s of ``dot``, 8 s without them.
    """
    heads: dict[str, list[str]] = {}
    for tail, head in pairs:
        heads.setdefault(tail, []).append(head)
    kept: list[tuple[str, str]] = []
    for tail, below in heads.items():
        beyond = 0  # what some head reaches, other than itself
        for head in below:
            beyond |= reach[head] & ~bit[head]
        kept.extend(
            (tail, head)
            for head in below
            if not beyond & bit[head]
            # Kept when the only heads reaching it are ones it reaches back (a cycle through
            # closed boxes), so that one of them stays.
            or not any(
                other != head and reach[other] & bit[head] and not reach[head] & bit[other]
                for other in below
            )
        )
    return kept


def _wrapped_rows(
    view: GraphView, out: Mapping[str, Sequence[str]], hanging: Mapping[str, Sequence[str]]
) -> list[tuple[str, str]]:
    """Invisible edges that wrap a row of sinks under one node into rows of at most WRAP.

    A compiled model's parameters are all fed by one node; the row breaks between modules as far
    apart in the tree as can be, so that a module's parameters stay in one row.
    """
    pairs: list[tuple[str, str]] = []
    for heads in out.values():
        sinks = [h for h in dict.fromkeys(heads) if h not in out]
        if len(sinks) <= WRAP:
            continue
        paths = [_path(view, h) for h in sinks]
        start, previous = 0, None
        while start < len(sinks):
            end = len(sinks)
            if end - start > WRAP:
                # The break with the shortest shared path, the later one among equals.
                end = min(
                    range(start + 1, start + WRAP + 1),
                    key=lambda b: (_shared(paths[b - 1], paths[b]), -b),
                )
            row = sinks[start:end]
            if previous is not None:
                for before in previous:
                    for bottom in hanging.get(before) or [before]:
                        for after in row:
                            pairs.append((bottom, after))
            previous, start = row, end
    return pairs


def draw_stacking(
    graph: graphviz.Digraph, view: GraphView, boxes: Sequence[TensorBox], legend: bool
) -> None:
    """Add :func:`stacking_edges` to ``graph``, and put the legend above a stacked picture.

    Args:
        graph: the drawing, its nodes, boxes and legend already in.
        view: the view drawn.
        boxes: the tensor boxes drawn (leaf, saved and output tensors).
        legend: whether the legend was drawn.
    """
    if not view.clusters or len(view.nodes) > STACK_LIMIT:
        return
    hanging: dict[str, list[str]] = {}
    for box in boxes:
        if box.kind != "output":  # an output stands above its node, not below
            hanging.setdefault(box.node, []).append(box.key)
    stacking = stacking_edges(view, hanging)
    if not stacking:
        return
    if isinstance(graph, dot_quote.Digraph):
        graph.stacked_from = len(graph.body)  # what unstacked() keeps
    # Ranked the old way, dot ranks each cluster apart and edges between clusters lose their
    # hold; newrank ranks every node at once.
    graph.attr(newrank="true")
    if len(view.nodes) > BIG_PICTURE:
        graph.attr(**STACKED_QUICKLY)  # after the picture's own settings: these win
    for tail, head in stacking:
        graph.edge(tail, head, style="invis", weight="0")
    if legend:
        # Stacked module clusters make a tall, narrow picture: the legend goes above it, not
        # beside it, held there by invisible edges to the nodes where the gradients start.
        fed = {edge.head for edge in view.edges}
        for key in view.nodes:
            if key not in fed:
                graph.edge("legend", key, style="invis", weight="0")


def unstacked(graph: graphviz.Digraph) -> graphviz.Digraph | None:
    """``graph`` as drawn before :func:`draw_stacking`, or None when it was not stacked.

    The same DOT source as :func:`autograd_viz.draw.render.dot_render.render` with
    ``stacking=False``:
    the stacking edges and ``newrank`` are the last lines of the drawing's body.
    """
    lines = getattr(graph, "stacked_from", None)
    if lines is None:
        return None
    flat = graph.copy()
    flat.body = flat.body[:lines]
    return flat


def _reach(
    view: GraphView, out: Mapping[str, Sequence[str]], bit: Mapping[str, int]
) -> dict[str, int]:
    """What each node reaches (itself included), as a bit set over the view's nodes."""
    return reach_bits(view.nodes, out, bit)


def _path(view: GraphView, key: str) -> list[str]:
    """The clusters holding ``key``, innermost first."""
    path: list[str] = []
    cluster = view.cluster_of.get(key)
    while cluster is not None:
        path.append(cluster)
        cluster = view.clusters[cluster].parent
    return path


def _shared(left: Sequence[str], right: Sequence[str]) -> int:
    """How many clusters two paths (innermost first) share; a whole shared path counts most."""
    if left and right and left[0] == right[0]:
        return 1 << 30  # the same module: never broken there unless it must be
    return len(set(left) & set(right))


def cluster_label(cluster: Cluster) -> str:
    """An open module's label: its name, its class and what it holds."""
    shown_kind = kind_shown(cluster.name, cluster.kind)
    kind = f" <I>{html_text(shown_kind)}</I>" if shown_kind else ""
    summary = cluster.summary
    if cluster.stack is not None:  # the stack's label says which call is drawn
        return ""
    rows = [f"<B>{html_text(cluster.name)}</B>{kind}", _small(html_text(_counts_line(summary)))]
    if cluster.parameters:  # Note [Parameters in a frame's label] in draw/model/compact.py
        rows.append(_small(html_text(frame_parameters_line(cluster.parameters))))
    if cluster.stands_for:  # Note [A fold shows its inside once] in choosing.py
        rows.append(_small(html_text(cluster.stands_for)))
    return html_label(rows)


def frame_parameters_line(names: Sequence[str], shown: int = 3) -> str:
    """``2 parameters: pos_embed, cls_token`` (the first ``shown`` names)."""
    some = ", ".join(names[:shown]) + (", …" if len(names) > shown else "")
    word = "parameter" if len(names) == 1 else "parameters"
    return f"{len(names):,} {word}: {some}"


STACK_FILL = "#e5e7eb"
"""A stack's shade around the white frame of the call it draws."""


def stack_label(stack: Stack, drawn: Cluster) -> str:
    """A stack's label: the fold's name and count, its class, where its calls stand, and the
    call ``drawn`` in it."""
    shown_kind = kind_shown(stack.name, stack.kind)
    kind = f" <I>{html_text(shown_kind)}</I>" if shown_kind else ""
    rows = [f"<B>{html_text(stack.name)}</B> × {stack.count:,}{kind}"]
    if not stack.shapes:
        rows.append(_small(html_text(OPS_ONLY)))
    counts = f"{_counts_line(stack.summary, calls=False)} · {statuses_text(stack.statuses)}"
    rows.append(_small(html_text(counts)))
    line = f"drawn: {drawn.name} · {_counts_line(drawn.summary)}"
    if drawn.parameters:  # Note [Parameters in a frame's label] in draw/model/compact.py
        line += f" · {frame_parameters_line(drawn.parameters)}"
    rows.append(_small(html_text(line)))
    if stack.summary.non_finite:
        flag = html_text(f"⚠ {stack.summary.non_finite:,} with NaN/Inf")
        rows.append(f'<FONT COLOR="#dc2626"><B>{flag}</B></FONT>')
    return html_label(rows)


def stack_tooltip(stack: Stack) -> str:
    """A stack's tooltip (plain text; the caller escapes it)."""
    shown_kind = kind_shown(stack.name, stack.kind)
    what = f"{stack.name} ({shown_kind})" if shown_kind else stack.name
    return (
        f"{what}, {stack.count:,} alike calls drawn once ({stack.drawn}): "
        f"{count_words(stack.summary.nodes, 'node')}; calls {statuses_text(stack.statuses)}"
    )


def box_rows(box: ModuleBox) -> list[str]:
    """The rows of a closed module's (or a fold's) label, already escaped."""
    summary = box.summary
    count = f" × {box.count:,}" if box.count > 1 else ""
    rows = [f"<B>{html_text(box.name)}</B>{count}"]
    if kind_shown(box.name, box.kind):
        rows.append(_small(f"<I>{html_text(box.kind)}</I>"))
    if box.pattern:
        rows.append(_small(html_text(" → ".join(box.pattern))))
    if box.joined:  # Note [A small call joins its neighbour] in draw/model/joins.py
        joined = ", ".join(
            html_text(name) + (f" <I>{html_text(kind)}</I>" if kind else "")
            for name, kind in box.joined
        )
        rows.append(_small(f"+ {joined}"))
    if not box.shapes:
        rows.append(_small(html_text(OPS_ONLY)))
    rows.append(_small(html_text(_counts_line(summary))))
    if box.parameters:
        rows.append(_small(html_text(parameters_line(box.parameters, box.count))))
    rows.append(
        _small(
            html_text(
                f"deps {summary.remaining:,}/{summary.dependencies:,} · "
                f"inputs {summary.waiting_inputs:,}/{summary.inputs:,} to come"
            )
        )
    )
    if len([n for n in summary.statuses.values() if n]) > 1:
        statuses = ", ".join(f"{n:,} {s}" for s, n in summary.statuses.items() if n)
        rows.append(_small(html_text(statuses)))
    if summary.non_finite:
        flag = html_text(f"⚠ {summary.non_finite:,} with NaN/Inf")
        rows.append(f'<FONT COLOR="#dc2626"><B>{flag}</B></FONT>')
    return rows


def parameters_line(parameters: int, count: int = 1) -> str:
    """How many leaf tensors a box's nodes take in (``4 parameters``; a fold's per call)."""
    each = parameters // count if count > 1 and parameters % count == 0 else parameters
    word = "parameter" if each == 1 else "parameters"
    return f"{each:,} {word}" + (" each" if each != parameters else "")


def box_tooltip(box: ModuleBox) -> str:
    """A closed module's tooltip (plain text; the caller escapes it)."""
    what = "repetitions" if box.pattern else "calls"
    tip = _plain_tooltip(box.name, box.kind, box.summary, box.count, what, box.shapes)
    if box.joined:
        tip += "; with " + ", ".join(name for name, _ in box.joined) + " drawn in it"
    return tip


def _plain_tooltip(
    name: str,
    kind: str,
    summary: BoxSummary,
    count: int = 1,
    what_folds: str = "calls",
    shapes: bool = True,
) -> str:
    what = f"{name} ({kind})" if kind else name
    calls = f", {count:,} {what_folds} folded" if count > 1 else ""
    ops = f" ({OPS_ONLY})" if not shapes else ""
    return f"{what}{calls}{ops}: {count_words(summary.nodes, 'node')}, {summary.status.value}"


def _counts_line(summary: BoxSummary, *, calls: bool = True) -> str:
    """``N nodes · topo a…b · status`` (``calls=False``: without the status, which a stack
    says call by call)."""
    low, high = summary.topological_nrs
    topo = f"topo {low}" if low == high else f"topo {low}…{high}"
    nodes = "1 node" if summary.nodes == 1 else f"{summary.nodes:,} nodes"
    return f"{nodes} · {topo}" + (f" · {summary.status.value}" if calls else "")


def _small(text: str) -> str:
    return f'<FONT POINT-SIZE="9">{text}</FONT>'


MODULE_LEGEND = (
    ("#ffffff", "square box: a module call, closed (its nodes summed; + calls drawn in it)"),
    ("#ffffff", "3D box: alike calls or chain links one after another, folded (× count)"),
    ("#ffffff", "frame: an open module call; its colour is its status"),
    (STACK_FILL, "shaded frame: alike calls (× count), one of them drawn inside"),
)
"""The legend's rows for a drawing by module (the fill follows the nodes' status)."""


def module_attrs(box: ModuleBox) -> dict[str, str]:
    """The DOT attributes of a closed module call's or a fold's node."""
    status = box.summary.node_status
    style = STATUS_STYLES["not run" if status is None else status]
    attrs = {
        "label": html_label(box_rows(box)),
        "id": box.key,
        "class": ("fold " if box.count > 1 else "module ")
        + ("not-run" if status is None else status.value),
        "fillcolor": style.fill,
        "tooltip": plain_text(box_tooltip(box)),
        "shape": "box3d" if box.count > 1 else "box",
        "style": "filled",
        "penwidth": str(max(style.penwidth, 1.5)),
    }
    if box.summary.non_finite:
        attrs.update(color=NON_FINITE.border, penwidth=str(NON_FINITE.penwidth))
    elif style.border != BORDER:
        attrs["color"] = style.border
    return attrs


def loop_edge_attrs(edge: ViewEdge, tail: ViewNode, head: ViewNode) -> dict[str, str]:
    """The edge that draws a stack's loop rolled: from its drawn call's exit back to its
    entry, once for every call that hands its gradient to the next (Note [A fold is drawn as
    a stack] in draw/model/stacks.py). It does not rank what it joins."""
    names = [
        n.box.name if n.box is not None else f"{n.info.name} #{n.info.id}" for n in (tail, head)
    ]
    edges = "1 edge" if edge.count == 1 else f"{edge.count:,} edges"
    hands = edge.rolled - 1
    return {
        "xlabel": f"loop × {hands:,}",  # placed once laid out: no rank of its own
        "constraint": "false",
        "style": "dashed",
        "color": DELIVERED if edge.delivered else PENDING,
        "class": "loop",
        "tooltip": plain_text(
            f"{names[0]} → {names[1]}: each of {edge.rolled:,} alike calls hands its gradient "
            f"to the next, {hands:,} times ({edges}; the loop, rolled)"
        ),
    }


def module_edge_attrs(edge: ViewEdge, tail: ViewNode, head: ViewNode) -> dict[str, str]:
    """An edge into or out of a module box: how many edges it stands for, and if all went."""
    attrs: dict[str, str] = {}
    if edge.pruned:
        attrs = {"color": PRUNED_EDGE, "style": "dashed"}
    elif edge.delivered:
        attrs = {"color": DELIVERED, "style": "bold", "penwidth": "2"}
    if edge.count > 1:
        attrs["label"] = f"×{edge.count:,}"
    names = [
        n.box.name if n.box is not None else f"{n.info.name} #{n.info.id}" for n in (tail, head)
    ]
    edges = "1 edge" if edge.count == 1 else f"{edge.count:,} edges"
    if tail is head:  # a rolled loop (Note [Rolled loops] in module_picture.py)
        attrs["tooltip"] = plain_text(
            f"{names[0]}: {edges} from one repetition to the next (the loop, rolled)"
        )
        attrs["class"] = "loop"
        return attrs
    attrs["tooltip"] = plain_text(f"{names[0]} → {names[1]}: {edges}")
    return attrs


__all__ = [
    "CLUSTER_COLORS",
    "MODULE_LEGEND",
    "box_rows",
    "box_tooltip",
    "cluster_label",
    "draw_nested",
    "draw_stacking",
    "loop_edge_attrs",
    "module_attrs",
    "module_edge_attrs",
    "stack_label",
    "stack_tooltip",
    "stacking_edges",
    "unstacked",
]
