"""The drawn DAG's module frames: each open module call laid out alone, then drawn as one
tall label of the call around it.

Note [A frame is laid out alone]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
An open call is drawn as a rectangle around its nodes, closed calls and
folds, with its name on the top edge, as the clusters of the Graphviz
picture. A rectangle holds only what is inside the call when the call's
labels are laid out on their own: so the innermost frames are laid out first
(:func:`~autograd_viz.tui.routing.layout_places`, every edge drawn alone), and
each then stands in its parent's layout as one label as tall and wide as its
rectangle, up to the picture, which is the outermost level with no frame.

Note [Lines across a frame]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
An edge is drawn at the level of the innermost frame holding both its ends,
between the labels or frames there that hold them. Inside a frame, what comes
from outside comes from the top edge (a line leaves it at ``┬``) and what goes
out goes to the bottom edge (a line ends in it at ``┴``, with no arrow); outside, lines
leave a frame at ``┬`` on its bottom edge and arrive at ``▼`` over its top.
Edges that would be drawn along the same line at a level are drawn once, and
the line stands for all of them (its colour is that of any gradient that went
along one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from rich.cells import cell_len

from autograd_viz.tui.routing import (
    NAME_ROOM,
    Frame,
    Layout,
    Place,
    Route,
    layout_places,
)
from autograd_viz.tui.styled import cut_front

PAD = 1
"""Blank columns between a frame's side and what it holds."""


@dataclass(frozen=True, slots=True)
class Call:
    """An open module call, as the layout needs it."""

    parent: str | None
    """The enclosing call's key, or ``None`` at the top."""
    title: str
    """Its name and module class, shown as written."""
    scope: int
    """The call (:attr:`ModuleTree.scopes` index)."""


TOP_EDGE, BOTTOM_EDGE = -1, -2
"""A frame's top and bottom edges, as the ends of the lines inside it (Note [Lines across a
frame]): a route's sender or receiver."""

FRAMES = -3
"""A frame standing as one label in its parent's layout has an id from this one down; in the
drawing, a route's end below ``0`` is a frame or an edge of one (:func:`frame_end`)."""

WHOLE = 0
"""A route's end that is a frame, seen from outside (:func:`frame_end`)."""


def frame_title(title: str) -> str:
    """A frame's title as drawn: cut at its start to :data:`NAME_ROOM`, its end kept."""
    return cut_front(title, NAME_ROOM)


def layout_framed(
    places: Mapping[int, Place],
    edges: set[tuple[int, int]],
    rank: Mapping[int, int],
    inside: Mapping[int, str],
    calls: Mapping[str, Call],
) -> tuple[Layout, int]:
    """Lay out labels ``places`` (their layers are worked out here) with ``edges`` between
    them, each inside the open call ``inside`` names (none: at the top), calls drawn as
    frames (Notes [A frame is laid out alone] and [Lines across a frame]).

    ``rank`` orders labels where edges between boxes make a cycle (the highest first: see
    :func:`layers`). Returns the layout and how many edges are not drawn (they lead back up).
    """
    if not places:
        return Layout({}, {}, (0, 0)), 0
    chain = {label: _chain(inside.get(label), calls) for label in places}  # outermost first
    used = {key for keys in chain.values() for key in keys}
    # What each level holds: labels, and the frames of the calls just inside it.
    held: dict[str | None, list[int | str]] = {None: []}
    for key in calls:
        if key in used:
            held.setdefault(key, [])
            held.setdefault(calls[key].parent, []).append(key)
    for label in places:
        held[chain[label][-1] if chain[label] else None].append(label)
    # The edges of each level, between what holds each end there (Note [Lines across a frame]).
    level_edges: dict[str | None, dict[tuple[int | str, int | str], list[tuple[int, int]]]] = {}

    def add(level: str | None, tail: int | str, head: int | str, pair: tuple[int, int]) -> None:
        level_edges.setdefault(level, {}).setdefault((tail, head), []).append(pair)

    for tail, head in edges:
        up, down = chain[tail], chain[head]
        shared = 0
        while shared < min(len(up), len(down)) and up[shared] == down[shared]:
            shared += 1
        level = up[shared - 1] if shared else None
        add(level, _holder(up, shared, tail), _holder(down, shared, head), (tail, head))
        for i in range(shared, len(up)):
            add(up[i], _holder(up, i + 1, tail), BOTTOM_EDGE, (tail, head))
        for i in range(shared, len(down)):
            add(down[i], TOP_EDGE, _holder(down, i + 1, head), (tail, head))

    def rank_of(block: int | str) -> int:
        if isinstance(block, int):
            return rank[block]
        return max(rank[label] for label in places if block in chain[label])

    def order_of(block: int | str) -> int:
        if isinstance(block, int):
            return places[block].order
        return max(places[label].order for label in places if block in chain[label])

    # Innermost first: a frame's size is known before its parent is laid out.
    levels: list[str | None] = sorted(
        (key for key in held if key is not None), key=lambda k: -len(_chain(k, calls))
    )
    done: dict[str | None, tuple[Layout, dict[int, int | str]]] = {}
    dropped = 0
    for level in [*levels, None]:
        block_of: dict[int, int | str] = {}  # a label is its own id, a frame FRAMES - n
        local: dict[int | str, int] = {}
        for block in held[level]:
            index = block if isinstance(block, int) else FRAMES - len(block_of)
            block_of[index] = block
            local[block] = index
        lines = level_edges.get(level, {})
        inner = {
            (local[t], local[h]): pairs
            for (t, h), pairs in lines.items()
            if t in local and h in local and t != h
        }
        ranks = {index: rank_of(block) for index, block in block_of.items()}
        layer, drawn, cut = layers(list(block_of), set(inner), ranks.__getitem__)
        dropped += cut
        sized: dict[int, Place] = {}
        for index, block in block_of.items():
            if isinstance(block, str):
                width, height = _frame_size(done[block][0], calls[block].title)
            else:
                width, height = places[block].width, places[block].height
            sized[index] = Place(layer[index], order_of(block), width, height)
        pairs_of = {pair: inner[pair] for pair in drawn}
        if level is not None:  # lines from the top edge and to the bottom one
            entering = {
                (TOP_EDGE, local[h]): pairs
                for (t, h), pairs in lines.items()
                if t == TOP_EDGE and h in local
            }
            leaving = {
                (local[t], BOTTOM_EDGE): pairs
                for (t, h), pairs in lines.items()
                if h == BOTTOM_EDGE and t in local
            }
            if entering:
                sized = {i: replace(p, layer=p.layer + 1) for i, p in sized.items()}
                sized[TOP_EDGE] = Place(0, 0, 1)
            if leaving:
                sized[BOTTOM_EDGE] = Place(max(p.layer for p in sized.values()) + 1, 0, 1)
            pairs_of.update(entering)
            pairs_of.update(leaving)
        shape = layout_places(sized, sorted(pairs_of))
        routes = tuple(
            replace(route, pairs=tuple(pairs_of[(route.sender, route.receiver)]))
            for route in shape.routes
        )
        shape = replace(shape, routes=routes)
        if BOTTOM_EDGE in shape.position:
            shape = _lifted(shape)
        done[level] = (shape, block_of)
    return _flatten(done, calls, chain), dropped


def _lifted(shape: Layout) -> Layout:
    """``shape`` with its bottom edge one row up, on the row of the arrows into it: a line
    ends in the edge (``┴``), with no arrow (the last layer holds the edge alone, so the
    row holds nothing else)."""
    row, column = shape.position[BOTTOM_EDGE]
    position = {**shape.position, BOTTOM_EDGE: (row - 1, column)}
    columns, rows = shape.size
    return replace(shape, position=position, size=(columns, rows - 1))


def _frame_size(shape: Layout, title: str) -> tuple[int, int]:
    """Columns and rows of the frame around ``shape`` (its edges on the rows of the lines in
    and out, when there are some; its title right of the lines in)."""
    columns, rows = shape.size
    top = 0 if TOP_EDGE in shape.position else 1
    bottom = 0 if BOTTOM_EDGE in shape.position else 1
    width = max(columns + 2 * (1 + PAD), _title_offset(shape) + cell_len(frame_title(title)) + 4)
    return width, top + rows + bottom


def _title_offset(shape: Layout) -> int:
    """Where a frame's title starts, from its left edge: right of the ``┬`` the lines in
    leave from, so that no title hides one (Note [Lines across a frame])."""
    if TOP_EDGE not in shape.position:
        return 2
    return 1 + PAD + shape.position[TOP_EDGE][1] + shape.width[TOP_EDGE] + 1


def frame_end(end: int) -> tuple[int, int] | None:
    """What a route's ``end`` (its sender or receiver) is when not a label: ``(frame, part)``
    with the frame's index in :attr:`Layout.frames`, ``part`` one of :data:`WHOLE` (the frame,
    seen from outside), :data:`TOP_EDGE` or :data:`BOTTOM_EDGE` (seen from inside)."""
    if end >= 0:
        return None
    frame, part = divmod(FRAMES - end, 3)
    return frame, (WHOLE, TOP_EDGE, BOTTOM_EDGE)[part]


def frame_end_id(frame: int, part: int) -> int:
    """The route end :func:`frame_end` reads as ``(frame, part)``."""
    return FRAMES - 3 * frame - (WHOLE, TOP_EDGE, BOTTOM_EDGE).index(part)


def _flatten(
    done: Mapping[str | None, tuple[Layout, dict[int, int | str]]],
    calls: Mapping[str, Call],
    chain: Mapping[int, tuple[str, ...]],
) -> Layout:
    """Every level's layout put where its frame is drawn: one layout of labels, routes and
    frames (outermost first), routes' ends that are not labels named by :func:`frame_end`."""
    origin: dict[str | None, tuple[int, int]] = {}  # where each level's layout starts
    found: list[tuple[str, Frame]] = []

    def place(key: str | None, row: int, column: int) -> None:
        origin[key] = (row, column)
        shape, block_of = done[key]
        for index, block in block_of.items():
            if isinstance(block, int):
                continue
            r, c = shape.position[index]
            inner = done[block][0]
            w, h = _frame_size(inner, calls[block].title)
            members = tuple(label for label, keys in chain.items() if block in keys)
            call = calls[block]
            at = c + column + _title_offset(inner)
            found.append(
                (block, Frame(call.title, r + row, c + column, w, h, members, call.scope, at))
            )
            top = 0 if TOP_EDGE in inner.position else 1
            place(block, r + row + top, c + column + 1 + PAD)

    place(None, 0, 0)
    found.sort(key=lambda f: (f[1].row, f[1].column))
    number = {key: i for i, (key, _) in enumerate(found)}
    position: dict[int, tuple[int, int]] = {}
    width: dict[int, int] = {}
    height: dict[int, int] = {}
    routes: list[Route] = []
    for key, (row, column) in origin.items():
        shape, block_of = done[key]

        ends = {
            index: block if isinstance(block, int) else frame_end_id(number[block], WHOLE)
            for index, block in block_of.items()
        }
        if key is not None:
            ends[TOP_EDGE] = frame_end_id(number[key], TOP_EDGE)
            ends[BOTTOM_EDGE] = frame_end_id(number[key], BOTTOM_EDGE)
        for route in shape.routes:
            routes.append(
                replace(
                    route,
                    sender=ends[route.sender],
                    receiver=ends[route.receiver],
                    pieces=tuple((r + row, c + column, d) for r, c, d in route.pieces),
                    arrow=(route.arrow[0] + row, route.arrow[1] + column),
                )
            )
        for index, block in block_of.items():
            if isinstance(block, int):
                r, c = shape.position[index]
                position[block] = (r + row, c + column)
                width[block] = shape.width[index]
                if index in shape.height:
                    height[block] = shape.height[index]
    frames = tuple(frame for _, frame in found)
    return Layout(position, width, done[None][0].size, tuple(routes), frames, height)


def _chain(key: str | None, calls: Mapping[str, Call]) -> tuple[str, ...]:
    """The open calls around ``key``'s call, outermost first, ending with it."""
    keys: list[str] = []
    while key is not None:
        keys.append(key)
        key = calls[key].parent
    return tuple(reversed(keys))


def _holder(keys: tuple[str, ...], at: int, label: int) -> int | str:
    """What holds ``label`` one level inside ``keys[at - 1]``: the frame ``keys[at]``, or the
    label itself."""
    return keys[at] if at < len(keys) else label


def layers(
    items: list[int], edges: set[tuple[int, int]], rank: Callable[[int], int]
) -> tuple[dict[int, int], set[tuple[int, int]], int]:
    """Each item's layer (longest path from the top), the edges drawn, how many are not.

    Boxes hold nodes at many depths, so edges between them can form a cycle: the
    items are taken in dependency order, and when none is free the one of the highest
    ``rank`` (the highest topological number it holds) is taken, its edges from items
    not yet placed left out (they would lead back up).
    """
    ranks = {i: rank(i) for i in items}
    incoming: dict[int, set[int]] = {i: set() for i in items}
    outgoing: dict[int, set[int]] = {i: set() for i in items}
    for tail, head in edges:
        incoming[head].add(tail)
        outgoing[tail].add(head)
    layer: dict[int, int] = {}
    drawn: set[tuple[int, int]] = set()
    waiting = {i: len(incoming[i]) for i in items}
    free = sorted((i for i in items if not waiting[i]), key=lambda i: -ranks[i])
    left = set(items)
    while left:
        if not free:  # a cycle: take the highest item, cut what still leads into it
            pick = max(left, key=lambda i: (ranks[i], -i))
            free = [pick]
        current = free.pop(0)
        if current not in left:
            continue
        left.discard(current)
        placed = [t for t in incoming[current] if t in layer]
        drawn.update((t, current) for t in placed)
        layer[current] = max((layer[t] + 1 for t in placed), default=0)
        for head in outgoing[current]:
            waiting[head] -= 1
            if waiting[head] == 0 and head in left:
                free.append(head)
        free.sort(key=lambda i: -ranks[i])
    return layer, drawn, len(edges) - len(drawn)


__all__ = [
    "BOTTOM_EDGE",
    "FRAMES",
    "TOP_EDGE",
    "WHOLE",
    "Call",
    "frame_end",
    "frame_end_id",
    "frame_title",
    "layers",
    "layout_framed",
]
