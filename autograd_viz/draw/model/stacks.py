"""Stacks: a fold drawn as one frame, one of its calls inside, the others stacked behind it.

Part of the view model (:mod:`autograd_viz.draw.model.module_picture` lays the picture
out). The default picture of ``dot`` draws a fold whose representative call is open as a
*stack* (Note [A fold is drawn as a stack]): the representative call's inside, drawn once,
in a frame that names the whole fold (``blocks.{0..11} × 12``) and says where each of its
calls stands. The fold's other calls are not drawn: each of their nodes stands in for its
counterpart in the drawn call (:class:`StackPlan`), so that edges into and out of the fold
attach to the stack, and the edges by which one call hands its gradient to the next are
one edge, the loop rolled (:func:`route`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autograd_viz.draw.model.drawn import BoxStatus
from autograd_viz.draw.model.folds import FoldGroup
from autograd_viz.draw.model.tree import ModuleTree
from autograd_viz.trace import NodeInfo

# Note [A fold is drawn as a stack]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A reader of a twelve-block model wants one block's inside and the fact that
# there are twelve, as one thing. Drawn as an open call beside a box of the
# eleven others, a fold reads as two things (and the box costs a row). So in
# the default picture a fold whose representative call is open is drawn as a
# stack: one frame, labelled with the fold's name and count (the name reads
# back to the fold) and the status of every call (``5 done · 1 running · 6 not
# started``), holding the representative's frame, the inside drawn once. At a
# step the representative is the call being worked on (Note [A step opens one
# call of a fold] in choosing.py), so the stack shows where in the block the
# backward stands. The other calls' nodes are not drawn: each stands in for its
# counterpart in the drawn call (the same place among the call's ops in forward
# order, or the same parameter name), so an edge from outside into the last
# block attaches to the drawn block where it would have entered; edges inside
# an undrawn call are the drawn call's edges, drawn once; and the edges from one
# call to the next (block 11 to 10, 10 to 9, ...) are one edge from the drawn
# call's exit to its entry, ``loop × 11``: the loop rolled, as torchview and
# torchlens draw an RNN and as a closed fold's edge to itself does (Note [Rolled
# loops] in module_picture.py). A fold whose representative stays closed (a
# fold of calls that hold no calls) is one fold box, not a call and a box.


class StackPlan:
    """Where the nodes of a stacked fold go: the drawn call's as themselves, each other
    call's node onto its counterpart in the drawn call (Note [A fold is drawn as a stack])."""

    __slots__ = ("counterpart", "drawn", "group", "key", "repetition")

    def __init__(
        self,
        key: str,
        group: FoldGroup,
        drawn: int,
        tree: ModuleTree,
        infos: Mapping[str, NodeInfo],
    ) -> None:
        self.key = key
        """The key of the drawn call's cluster."""
        self.group = group
        self.drawn = drawn
        """The repetition drawn (its position in the fold)."""
        self.repetition: dict[str, int] = {}
        """Each node of the fold -> the repetition (position) of the call holding it."""
        self.counterpart: dict[str, str] = {}
        """Each node of a call not drawn -> its counterpart in the drawn call."""
        shown = group.scopes[drawn]
        shown_calls = tree.descendants(shown)
        shown_nodes = [
            _ordered(tree.scopes[c].nodes, tree.scopes[c].path, infos) for c in shown_calls
        ]
        anywhere = next(n for nodes in shown_nodes for n in (*nodes[0], *nodes[1]))
        for r, index in enumerate(group.scopes):
            calls = tree.descendants(index)
            for c in calls:
                self.repetition.update(dict.fromkeys(tree.scopes[c].nodes, r))
            if r == drawn:
                continue
            for place, c in enumerate(calls):
                ops, leaves = _ordered(tree.scopes[c].nodes, tree.scopes[c].path, infos)
                there = shown_nodes[place] if place < len(shown_nodes) else ((), ())
                fallback = next(iter((*there[0], *there[1])), anywhere)
                for mine, theirs in ((ops, there[0]), (leaves, there[1])):
                    for n, node in enumerate(mine):
                        self.counterpart[node] = theirs[n] if n < len(theirs) else fallback


def _ordered(
    nodes: Sequence[str], path: str, infos: Mapping[str, NodeInfo]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A call's own nodes as alike calls order them: its ops in forward order (by
    ``sequence_nr``), then its parameters by their names below the call."""
    ops = sorted((k for k in nodes if infos[k].leaf is None), key=lambda k: infos[k].sequence_nr)
    cut = len(path) + 1 if path else 0

    def below(key: str) -> str:
        leaf = infos[key].leaf
        name = "" if leaf is None or not leaf.name else leaf.name
        return name[cut:] if name.startswith(path + ".") else name

    leaves = sorted((k for k in nodes if infos[k].leaf is not None), key=below)
    return tuple(ops), tuple(leaves)


def route(
    stacks: Sequence[StackPlan], tail: str, head: str
) -> tuple[str, str, StackPlan | None] | None:
    """Where an edge from ``tail`` to ``head`` is drawn, ``stacks`` outermost first.

    Returns:
        ``None`` for an edge inside a call not drawn (the drawn call has it); else the ends
        it is drawn between, and the stack whose loop it is part of (``None`` for an edge
        drawn as it is, or moved onto the drawn call where an end was not drawn).
    """
    loop: StackPlan | None = None
    for stack in stacks:
        at = stack.repetition.get(tail)
        to = stack.repetition.get(head)
        if at is None and to is None:
            continue
        if loop is None and at is not None and to is not None:
            if at != to:
                loop = stack
            elif at != stack.drawn:
                return None  # inside one call not drawn: drawn once, by the drawn call
        counterpart = stack.counterpart.get
        tail, head = counterpart(tail, tail), counterpart(head, head)
    return tail, head, loop


def call_statuses(statuses: Sequence[BoxStatus]) -> tuple[tuple[BoxStatus, int], ...]:
    """How many calls stand at each status, in :class:`BoxStatus` order, none left out."""
    return tuple((s, n) for s in BoxStatus if (n := sum(1 for x in statuses if x is s)))


def statuses_text(statuses: Sequence[tuple[BoxStatus, int]]) -> str:
    """``5 done · 1 running · 6 not started``."""
    return " · ".join(f"{n:,} {s.value}" for s, n in statuses)


__all__ = ["StackPlan", "call_statuses", "route", "statuses_text"]
