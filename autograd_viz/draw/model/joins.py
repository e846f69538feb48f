"""Joins: a call that is one step of gradient (an activation, a norm) drawn in its
neighbour's box.

Part of the view model (:mod:`autograd_viz.draw.model.module_picture` lays the picture
out; Note [A small call joins its neighbour]).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from autograd_viz.draw.model.tree import ModuleTree, Scope
from autograd_viz.trace import NodeInfo

MAX_JOINED_NODES = 3
"""The most ops a call joined to its neighbour holds (timm's ``LayerNorm2d``: a permute, the
norm and a permute back)."""

# Note [A small call joins its neighbour]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# In a CNN every conv is followed by a norm and an activation, each a module
# of its own and each one op in the backward: drawn as boxes, they triple the
# rows of the picture (MobileNetV3-small: 109 boxes, 23 times as tall as wide)
# and say nothing a reader does not know from the conv's box. So in the
# default picture a closed call that is a straight pass of gradient (at most
# MAX_JOINED_NODES ops, one after the other, the gradient entering the first
# and leaving the last) and holds no weight matrix (its parameters, if any,
# are vectors: a norm's scale and shift, a layer scale) is drawn in the box of
# its neighbour in the same parent: the sibling call before it in the forward,
# when the gradient goes from it straight into that call (``conv · + bn,
# act``), else the one after it, when the gradient comes straight from there
# (a ViT block's ``norm1`` into ``attn``). The box keeps its call's name, says
# what joined it in a line of its own, and sums every node of them all; every
# name still reads back (``--around features.3.block.0.2`` draws the
# activation itself). Calls with a weight matrix (a Linear, a conv) are never
# joined to another: they are what a reader looks for. ``--level``, ``--expand``,
# ``--around``, ``--leaves``, the TUI and ``animate`` draw every call as before.


def joinable(
    scope: Scope, infos: Mapping[str, NodeInfo], heads: Mapping[str, Sequence[str]]
) -> bool:
    """Whether the call ``scope`` is one straight pass of gradient with no weight matrix
    (Note [A small call joins its neighbour])."""
    if scope.children:
        return False
    ops = [k for k in scope.nodes if infos[k].leaf is None]
    if not ops or len(ops) > MAX_JOINED_NODES:
        return False
    for key in scope.nodes:
        leaf = infos[key].leaf
        if leaf is not None and len(leaf.shape) > 1:
            return False
    if len(ops) == 1:
        return True
    mine = set(ops)
    into = {h: k for k in ops for h in heads.get(k, ()) if h in mine}
    # A straight pass: each op but the first is fed by exactly one other, in a single line.
    fed = [k for k in ops if k in into]
    if len(fed) != len(ops) - 1 or len(set(into.values())) != len(ops) - 1:
        return False
    # The gradient leaves from the last op only (edges to parameters aside).
    last = next(k for k in ops if not any(h in mine for h in heads.get(k, ())))
    return all(
        infos[h].leaf is not None or k == last
        for k in ops
        for h in heads.get(k, ())
        if h not in mine and h in infos
    )


def joins(
    tree: ModuleTree,
    siblings: Sequence[int | None],
    box_of: Mapping[int, str],
    infos: Mapping[str, NodeInfo],
    heads: Mapping[str, Sequence[str]],
    pairs: set[tuple[str, str]],
) -> dict[str, list[int]]:
    """Which sibling calls join which box (Note [A small call joins its neighbour]).

    Args:
        tree: the module tree.
        siblings: the items of one parent in forward order: a call drawn as a box (its scope
            index), or ``None`` for anything else (a frame, a fold), which no join crosses.
        box_of: the box key of each call drawn as one.
        infos: each node's info.
        heads: each node's heads (the edges of the graph).
        pairs: ``(tail box, head box)`` of every edge between two boxes.

    Returns:
        The calls each box takes in, by the box's key (its own call not included), in
        forward order; boxes taking none are left out.
    """
    group: dict[int, list[int]] = {}  # anchor call -> its calls, anchor first
    anchor_of: dict[int, int] = {}
    small = {i: joinable(tree.scopes[i], infos, heads) for i in siblings if i is not None}
    for i in siblings:
        if i is not None:
            group[i], anchor_of[i] = [i], i

    def feeds(tails: list[int], into: list[int]) -> bool:
        return any((box_of[t], box_of[h]) in pairs for t in tails for h in into)

    # First, into the call before (the gradient goes there next), left to right.
    for before, i in itertools.pairwise(siblings):
        if i is None or before is None or not small[i]:
            continue
        anchor = anchor_of[before]
        if feeds([i], group[anchor]):
            group[anchor].append(i)
            del group[i]
            anchor_of[i] = anchor
    # Then a run of small calls at the front of its neighbours into the call after it.
    for n, i in enumerate(siblings):
        if i is None or i not in group or not small[i] or n + len(group[i]) >= len(siblings):
            continue
        after = siblings[n + len(group[i])]
        if after is None or after not in group:
            continue
        if feeds(group[after], group[i]):
            moved = group.pop(i)
            for call in moved:
                anchor_of[call] = after
            group[after] = [after, *sorted(moved + group[after][1:], key=siblings.index)]
    return {box_of[a]: calls[1:] for a, calls in group.items() if len(calls) > 1}


def joined_name(joined: Scope, parent: Scope | None) -> str:
    """How a box names a call joined to it: its path below their parent (``norm1``, ``2``)."""
    if parent is not None and parent.path and joined.path.startswith(parent.path + "."):
        return joined.path[len(parent.path) + 1 :]
    return joined.name


__all__ = ["MAX_JOINED_NODES", "joinable", "joined_name", "joins"]
