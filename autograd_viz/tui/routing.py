"""Where the drawn DAG puts its labels, and the path each edge takes between them.

Note [Every edge is drawn alone]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A reader follows a line from an arrow back to the node it leaves; that only
works if no two edges ever share a piece of line. So each edge gets its own
port under its sender and its own port over its receiver, its own columns
and its own horizontal track; lines never merge and never branch, and the
only place two edges meet is a crossing of one edge's vertical with
another's horizontal, where the vertical is drawn on top (``──│──``).

- In the band between two layers no line arrives in a column another line
  leaves from: ports under a label avoid the columns where other lines pass
  through the layer below, ports over a label avoid the columns lines leave
  from above, and a pass-through moves aside from another edge's
  pass-through just above it. Where a label has too few columns for that,
  the line that leaves the shared column gets a track above the one that
  arrives in it, so the two vertical pieces never overlap.
- An edge that skips layers passes through each one in a column of its own,
  placed with that layer's nodes (a Sugiyama "dummy" node), never through a
  label.
- Two horizontals share a track only with a blank column between them.

Layer order: a node's topological number is the longest path from it to a
leaf, so every edge goes from a higher layer to a lower one and layers are
drawn top (the root) to bottom (the leaves). Inside a layer, nodes and
pass-throughs sit in the order of the mean position of what sends them a
gradient (one barycentre sweep), which keeps most edges short.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len

from autograd_viz.trace import GraphTaskInfo, NodeInfo
from autograd_viz.tui.styled import cut_front, short_name

GAP = 2
"""Columns between two neighbours (labels or pass-throughs) of a layer."""

UP, DOWN, LEFT, RIGHT = 1, 2, 4, 8
"""The four directions a piece of line leaves its cell in, as bits."""


@dataclass(frozen=True, slots=True)
class Route:
    """The line of one edge: its pieces, and the arrow into the receiver."""

    sender: int
    """The node the gradient leaves."""
    receiver: int
    """The node it goes to."""
    pieces: tuple[tuple[int, int, int], ...]
    """``(row, column, directions)`` of every cell the line goes through."""
    arrow: tuple[int, int]
    """``(row, column)`` of the ``▼`` just above the receiver's label."""
    pairs: tuple[tuple[int, int], ...] = ()
    """The (sender, receiver) pairs of labels the line stands for, where its ends are not
    labels (a module frame, or a frame's border: Note [Lines across a frame] in
    :mod:`~autograd_viz.tui.framing`); empty: just its own ends."""

    @property
    def stands_for(self) -> tuple[tuple[int, int], ...]:
        """The (sender, receiver) pairs of labels the line draws."""
        return self.pairs or ((self.sender, self.receiver),)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each node of a graph task is drawn, and how its edges run."""

    position: dict[int, tuple[int, int]]
    """Node id → (row, first column) of its label."""
    width: dict[int, int]
    """Node id → label width."""
    size: tuple[int, int]
    """(columns, rows) of the drawing."""
    routes: tuple[Route, ...] = ()
    """One line per (sender, receiver) pair, see Note [Every edge is drawn alone]."""
    frames: tuple[Frame, ...] = ()
    """Open module calls drawn around what they hold, outermost first."""
    height: dict[int, int] = field(default_factory=dict)
    """Rows of a label taller than one (a module frame, while it is laid out)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """An open module call: a rectangle of box-drawing lines with its name on the top edge."""

    title: str
    """What the top edge says (the call's name and its module's class), shown as written."""
    row: int
    """The top edge's row."""
    column: int
    """The left edge's column."""
    width: int
    """Columns, both edges included."""
    height: int
    """Rows, both edges included."""
    members: tuple[int, ...]
    """The labels drawn inside it (nested frames' included)."""
    scope: int
    """The module call (:attr:`ModuleTree.scopes` index)."""
    title_column: int
    """Where the title starts on the top edge: right of the lines that leave it inside."""


NAME_ROOM = 40
"""The most characters of a name drawn in a label or on a frame (the inspector shows it whole)."""


def drawn_name(info: NodeInfo) -> str:
    """A node's name as its label in the drawing shows it: :func:`short_name` in at most
    :data:`NAME_ROOM` characters, the leaf's name cut at its start inside ``Acc(…)``."""
    name = short_name(info)
    if len(name) <= NAME_ROOM:
        return name
    if name.startswith("Acc(") and name.endswith(")"):
        return f"Acc({cut_front(name[4:-1], NAME_ROOM - 5)})"
    return cut_front(name, NAME_ROOM)


def label_width(info: NodeInfo) -> int:
    """A node's label width, fixed for the whole pass: ``○ Mul#7 2/2``."""
    deps = len(str(info.dependencies))
    return 2 + cell_len(drawn_name(info)) + 1 + len(str(info.id)) + 1 + 2 * deps + 1


@dataclass(slots=True)
class _Item:
    """A label, or a column an edge passes a layer in, while the layout is worked out."""

    node: int | None
    """The node labelled; ``None`` for a pass-through."""
    edge: int = -1
    """A pass-through's edge (index into the edge list)."""
    width: int = 1
    height: int = 1
    """Rows it takes (a pass-through takes its whole layer's)."""
    x: int = 0
    ups: tuple[int, ...] = ()
    """Ids (``id()``) of the items one layer up that send into this one."""


def layout(task: GraphTaskInfo) -> Layout:
    """Place ``task``'s nodes and route its edges (see Note [Every edge is drawn alone])."""
    nodes = task.nodes
    top = max(info.topological_nr for info in nodes.values())
    edges = sorted(
        {
            (info.id, edge[0])
            for info in nodes.values()
            for edge in info.next_edges
            if edge is not None and edge[0] in nodes
        }
    )
    places = {
        info.id: Place(top - info.topological_nr, info.sequence_nr, label_width(info))
        for info in nodes.values()
    }
    return layout_places(places, edges)


@dataclass(frozen=True, slots=True)
class Place:
    """What the layout needs of one label: its layer, its order in the layer, its width."""

    layer: int
    """0 for the top layer; every edge goes to a deeper layer."""
    order: int
    """Within a layer, of two labels fed from the same place the higher order comes first."""
    width: int
    """Columns of the label."""
    height: int = 1
    """Rows of the label (a module frame is taller); it is drawn at the top of its layer."""


def layout_places(places: Mapping[int, Place], edges: Sequence[tuple[int, int]]) -> Layout:
    """Place labels in their layers and route ``edges`` (sender, receiver) between them.

    Every edge must go from a layer to a deeper one.
    """
    depth = {n: place.layer for n, place in places.items()}
    ins: dict[int, int] = {}
    outs: dict[int, int] = {}
    for sender, receiver in edges:
        outs[sender] = outs.get(sender, 0) + 1
        ins[receiver] = ins.get(receiver, 0) + 1
    # The items of every layer: labels, then a pass-through per layer an edge skips.
    layers: dict[int, list[_Item]] = {}
    label: dict[int, _Item] = {}
    for n, place in places.items():
        ports = max(ins.get(n, 0), outs.get(n, 0))
        corners = 2 if place.height > 1 else 0  # see _ports
        item = _Item(n, width=max(place.width, 2 * ports + corners), height=place.height)
        label[n] = item
        layers.setdefault(depth[n], []).append(item)
    # chain[e]: the items edge e goes through, sender first, receiver last
    chain: list[list[_Item]] = []
    for e, (sender, receiver) in enumerate(edges):
        hops = [label[sender]]
        for d in range(depth[sender] + 1, depth[receiver]):
            through = _Item(None, edge=e)
            layers.setdefault(d, []).append(through)
            hops.append(through)
        hops.append(label[receiver])
        for upper, lower in itertools.pairwise(hops):
            lower.ups = (*lower.ups, id(upper))
        chain.append(hops)
    sinks = frozenset(n for n in places if n not in outs)
    _order(layers, {n: place.order for n, place in places.items()}, sinks)
    # Rows: a layer's labels, then its band of tracks, then the arrows into the next layer.
    bands = {d: _band(d, layers, chain) for d in layers}
    tall = {d: max(item.height for item in items) for d, items in layers.items()}
    row_of: dict[int, int] = {}
    row = 0
    for d in sorted(layers):
        row_of[d] = row
        row += tall[d] + _band_height(bands[d]) + 1
    routes = tuple(
        _route(edges[e], e, hops, depth, row_of, tall, bands) for e, hops in enumerate(chain)
    )
    position = {n: (row_of[depth[n]], item.x) for n, item in label.items()}
    width = {n: item.width for n, item in label.items()}
    height = {n: item.height for n, item in label.items() if item.height > 1}
    columns = max(item.x + item.width for items in layers.values() for item in items)
    last = max(layers)
    return Layout(position, width, (columns, row_of[last] + tall[last]), routes, height=height)


def _order(
    layers: dict[int, list[_Item]], orders: Mapping[int, int], sinks: frozenset[int]
) -> None:
    """Order each layer by barycentre and place every item under what feeds it.

    Of the labels fed from one place, those that send nothing on (``sinks``: a parameter's
    AccumulateGrad) go right of the others, so the chain that goes on stays under what
    feeds it instead of stepping right at every layer a leaf hangs off.
    """
    centre: dict[int, float] = {}
    through: set[int] = set()  # pass-through columns of the layer above
    for d in sorted(layers):
        members = layers[d]

        def wanted(item: _Item) -> float:
            placed = [centre[u] for u in item.ups if u in centre]
            return sum(placed) / len(placed) if placed else 0.0

        def key(item: _Item) -> tuple[float, bool, int, int]:
            order = orders.get(item.node, 0) if item.node is not None else 0
            return (wanted(item), item.node in sinks, -order, item.edge)

        members.sort(key=key)
        x = 0
        for item in members:
            x = max(x, round(wanted(item) - item.width / 2))
            if item.node is None:
                while x in through and x not in {round(centre[u]) for u in item.ups}:
                    x += 1  # see Note [Every edge is drawn alone]
            item.x = x
            x += item.width + GAP
        for item in members:
            centre[id(item)] = item.x + (item.width // 2 if item.node is not None else 0)
        through = {item.x for item in members if item.node is None}


def _ports(item: _Item, targets: list[int], avoid: set[int]) -> list[int]:
    """Columns under (or over) ``item`` for lines going to ``targets`` (sorted), in order.

    Each line gets the column nearest its target that keeps the order and is
    not in ``avoid``; when the label has too few such columns, ``avoid`` is
    ignored (see Note [Every edge is drawn alone]).
    """
    if item.node is None:
        return [item.x] * len(targets)
    span = list(range(item.x, item.x + item.width))
    if item.height > 1 and item.width > 2:  # a frame: lines meet its edges, not its corners
        span = span[1:-1]
    free = [c for c in span if c not in avoid]
    if len(free) < len(targets):
        free = span
    chosen: list[int] = []
    low = 0
    for i, target in enumerate(targets):
        high = len(free) - (len(targets) - i)  # leave a column for each line after this one
        pick = min(range(low, high + 1), key=lambda j: (abs(free[j] - target), j))
        chosen.append(free[pick])
        low = pick + 1
    return chosen


def _band(
    d: int, layers: dict[int, list[_Item]], chain: list[list[_Item]]
) -> dict[int, tuple[int, int, int]]:
    """Edge index → (column leaving layer ``d``, column arriving at ``d+1``, track or -1)."""
    here = {id(item) for item in layers[d]}
    crossing = [
        (e, hops[i], hops[i + 1])
        for e, hops in enumerate(chain)
        for i in range(len(hops) - 1)
        if id(hops[i]) in here
    ]
    items: dict[int, _Item] = {}
    leaving: dict[int, list[tuple[int, int]]] = {}
    below: dict[int, _Item] = {}
    for e, upper, lower in crossing:
        items[id(upper)] = upper
        below[e] = lower
        target = lower.x if lower.node is None else lower.x + lower.width // 2
        leaving.setdefault(id(upper), []).append((target, e))
    passing = {item.x for item in layers.get(d + 1, ()) if item.node is None}
    top: dict[int, int] = {}
    for key, lines in leaving.items():
        lines.sort()
        own = {below[e].x for _, e in lines if below[e].node is None}
        columns = _ports(items[key], [t for t, _ in lines], passing - own)
        for (_, e), column in zip(lines, columns, strict=True):
            top[e] = column
    arriving: dict[int, list[tuple[int, int]]] = {}
    for e, _, lower in crossing:
        items[id(lower)] = lower
        arriving.setdefault(id(lower), []).append((top[e], e))
    bottom: dict[int, int] = {}
    for key, coming in arriving.items():
        coming.sort()
        avoid = set(top.values()) - {top[e] for _, e in coming}
        columns = _ports(items[key], [t for t, _ in coming], avoid)
        for (_, e), column in zip(coming, columns, strict=True):
            bottom[e] = column
    return _tracks({e: (top[e], bottom[e]) for e in top})


def _tracks(ends: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int, int]]:
    """Give every line that turns a track (see Note [Every edge is drawn alone])."""
    band = {e: (a, b, -1) for e, (a, b) in ends.items()}
    turning = sorted((min(a, b), max(a, b), e) for e, (a, b) in ends.items() if a != b)
    leaves_at = {a: e for e, (a, b) in ends.items() if a != b}
    # A line leaving the column another arrives in must be on a higher track.
    after = {e: leaves_at[b] for e, (a, b) in ends.items() if b in leaves_at and leaves_at[b] != e}
    if after:  # rare: one track per turning line, in an order that keeps them apart
        order = _above_first(after, [e for _, _, e in turning])
        for t, e in enumerate(order):
            band[e] = (*ends[e], t)
        return band
    right_ends: list[int] = []  # per track, the last column a line on it uses
    for left, right, e in turning:
        for t, last in enumerate(right_ends):
            if left > last + 1:  # a blank column between two lines on one track
                right_ends[t] = right
                break
        else:
            t = len(right_ends)
            right_ends.append(right)
        band[e] = (*ends[e], t)
    return band


def _above_first(after: dict[int, int], lines: list[int]) -> list[int]:
    """``lines`` ordered so that ``after[e]`` (which must be above ``e``) comes before ``e``."""
    order: list[int] = []
    placed: set[int] = set()

    def place(e: int, seen: frozenset[int]) -> None:
        if e in placed or e in seen:
            return  # placed, or a cycle (two lines trading columns): nothing keeps it
        above = after.get(e)
        if above is not None:
            place(above, seen | {e})
        placed.add(e)
        order.append(e)

    for e in lines:
        place(e, frozenset())
    return order


def _band_height(band: dict[int, tuple[int, int, int]]) -> int:
    """Rows of tracks in a band (at least one)."""
    return max(1, max((t for _, _, t in band.values()), default=-1) + 1)


def _route(
    edge: tuple[int, int],
    e: int,
    hops: list[_Item],
    depth: dict[int, int],
    row_of: dict[int, int],
    tall: dict[int, int],
    bands: dict[int, dict[int, tuple[int, int, int]]],
) -> Route:
    """The pieces of edge ``e``'s line, band by band (a label shorter than its layer has the
    line run down beside the taller ones to the band)."""
    pieces: list[tuple[int, int, int]] = []
    arrow = (0, 0)
    first = depth[edge[0]]
    for i in range(len(hops) - 1):
        d = first + i
        a, b, t = bands[d][e]
        sender = hops[i]
        below = row_of[d] + (sender.height if sender.node is not None else tall[d])
        arrow_row = row_of[d + 1] - 1
        last = arrow_row if hops[i + 1].node is None else arrow_row - 1
        if t < 0:
            pieces += [(r, a, UP | DOWN) for r in range(below, last + 1)]
        else:
            turn = row_of[d] + tall[d] + t
            step = 1 if b > a else -1
            pieces += [(r, a, UP | DOWN) for r in range(below, turn)]
            pieces.append((turn, a, UP | (RIGHT if step > 0 else LEFT)))
            pieces += [(turn, c, LEFT | RIGHT) for c in range(a + step, b, step)]
            pieces.append((turn, b, DOWN | (LEFT if step > 0 else RIGHT)))
            pieces += [(r, b, UP | DOWN) for r in range(turn + 1, last + 1)]
        if hops[i + 1].node is None:  # through the next layer, all its rows
            pieces += [(r, b, UP | DOWN) for r in range(row_of[d + 1], row_of[d + 1] + tall[d + 1])]
        else:
            arrow = (arrow_row, b)
    return Route(edge[0], edge[1], tuple(pieces), arrow)
