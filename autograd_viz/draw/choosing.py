"""Which module calls a picture opens: a level, expansion, requests, and a focus.

The first step of the module view (:mod:`autograd_viz.draw.showing` draws
the choice): :func:`choose` says which calls of a
:class:`~autograd_viz.draw.modules.ModuleTree` are open (drawn as a cluster
around what they hold) and which folds are opened into their calls;
:func:`focus_of` says which nodes a step is about.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from autograd_viz.draw.graph_view import GraphView
from autograd_viz.draw.modules import MAX_BOXES, ModuleTree
from autograd_viz.draw.names import Target
from autograd_viz.trace.replay import NodeStatus


@dataclass(frozen=True, slots=True)
class Choice:
    """Which module calls a picture opens; made by :func:`choose`."""

    level: int
    """Calls this deep or shallower are open unless folded."""
    open: frozenset[int]
    """Calls drawn as clusters (when every enclosing call is open and unfolded)."""
    unfolded: frozenset[int]
    """Fold groups drawn as their calls."""
    held: Mapping[int, frozenset[int]] = field(default_factory=dict)
    """Fold groups drawn as some of their repetitions (by position), the others as one box
    (Note [Around a fold] in :mod:`~autograd_viz.draw.select`)."""


def choose(
    tree: ModuleTree,
    *,
    level: int | None = None,
    expand: Iterable[Target] = (),
    open: Iterable[int] = (),
    unfold: Iterable[int] = (),
    focus: Iterable[str] = (),
    max_boxes: int = MAX_BOXES,
    split: bool = False,
) -> Choice:
    """Which calls to open and which folds to unfold.

    Args:
        tree: the graph's module tree.
        level: calls at this depth or shallower are open, except the calls
            of folds (Note [What a level opens]); by default the deepest level
            with at most ``max_boxes`` boxes (:meth:`ModuleTree.default_level`).
        expand: modules (or nodes) to show whole: a module is opened with
            every call inside it and every fold inside unfolded; a node's
            modules are opened so that it is drawn.
        open: calls opened one level (what they hold is drawn; their own
            calls stay boxes unless the level opens them).
        unfold: fold groups drawn as their calls, one box each.
        focus: node keys to draw (the step's running or failing nodes): the calls
            enclosing them are opened, one level each, and a fold holding one is drawn
            as the repetition holding it and one box for the others (Note [A step opens
            one call of a fold]).
        max_boxes: the budget of the default level.
        split: a fold holding something opened is drawn as the repetitions holding it,
            the others as one box, instead of as all its calls (Note [Around a fold] in
            :mod:`~autograd_viz.draw.select`).
    """
    opened: set[int] = set()
    unfolded = set(unfold)
    held: dict[int, set[int]] = {}
    visible: set[int] = set(open)  # calls whose enclosing calls must all be open
    for target in expand:
        scopes = target.scopes
        if split and target.group is not None:  # a fold: its first repetition, whole
            group = tree.groups[target.group]
            scopes = group.repetitions()[0]
            held.setdefault(group.index, set()).add(0)
        for index in scopes:
            inside = tree.descendants(index)
            opened.update(inside)
            # Split, the fold the module is a call of stays folded but for it.
            unfolded.update(
                tree.group_of[i] for i in inside[1 if split else 0 :] if i in tree.group_of
            )
            visible.add(index)
        if not target.scopes:  # a node: its modules open so that it is drawn
            visible.update(tree.scope_of[k] for k in target.nodes if k in tree.scope_of)
    stepped = {tree.scope_of[k] for k in focus if k in tree.scope_of}
    for index, hold in [*((i, split) for i in visible), *((i, True) for i in stepped)]:
        for ancestor in tree.ancestors(index):
            opened.add(ancestor)
            group_index = tree.group_of.get(ancestor)
            if group_index is None:
                continue
            if hold:  # See Note [A step opens one call of a fold].
                group = tree.groups[group_index]
                held.setdefault(group_index, set()).add(
                    group.scopes.index(ancestor) // group.period
                )
            else:
                unfolded.add(group_index)
    frozen = frozenset(unfolded)
    if level is None:
        level = tree.default_level(max_boxes, frozen)
    # See Note [What a level opens].
    opened.update(s.index for s in tree.scopes if s.depth <= level and s.index not in tree.folded)
    kept = {g: frozenset(r) for g, r in held.items() if g not in frozen}
    return Choice(level, frozenset(opened), frozen, kept)


# Note [What a level opens]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# A level opens the calls that no fold holds. The calls of a fold (and what
# they hold) open only when asked: a fold opened with Enter or ``unfold``
# shows its calls as boxes, one each; the running node's block opens while its
# eleven siblings stay one box; ``expand`` opens the module it names, all the
# way down. So stepping through a 12-layer model draws one layer's inside and
# one box for the eleven others, not twelve insides.

# Note [A step opens one call of a fold]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A focus (the running or failing node, at a step of ``dot`` or the TUI) is
# drawn as ``--around`` draws a name inside a fold: the call holding it open,
# the other calls one box with their count (``layers.{0..5,7..11} × 11``), so
# the picture stays as small at layer 6 as before the backward reached the
# layers. A fold opened by hand (``unfold``,
# Enter, ``expand``) still shows every call.


def focus_of(view: GraphView) -> list[str]:
    """The nodes a step is about: the running and failed ones, and the last event's node."""
    urgent = (NodeStatus.RUNNING, NodeStatus.FAILED)
    event = view.event
    node_id = None if event is None else event.node_id
    task = None if event is None else event.graph_task
    return [
        node.key
        for node in view.nodes.values()
        if node.status in urgent
        or (node_id is not None and node.info.id == node_id and node.graph_task == task)
    ]


__all__ = ["Choice", "choose", "focus_of"]
