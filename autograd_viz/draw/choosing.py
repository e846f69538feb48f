"""Which module calls a picture opens: a level, expansion, requests, and a focus.

The first step of the module view (:mod:`autograd_viz.draw.showing` draws
the choice): :func:`choose` says which calls of a
:class:`~autograd_viz.draw.modules.ModuleTree` are open (drawn as a cluster
around what they hold) and which folds are opened into their calls;
:func:`focus_of` says which nodes a step is about.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from autograd_viz.draw.graph_view import GraphView
from autograd_viz.draw.modules import MAX_BOXES, ModuleTree
from autograd_viz.draw.names import Target
from autograd_viz.draw.summaries import BoxStatus
from autograd_viz.trace.replay import NodeStatus

MAX_NESTING = 64
"""The most module frames a picture draws one inside another (Note [Frames nest at most
MAX_NESTING deep])."""

# Note [Frames nest at most MAX_NESTING deep]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Real models nest modules tens of calls deep; a program may nest them
# thousands deep (a module calling a submodule that calls its own, 2,000 times).
# An open call is a Graphviz cluster inside its parent's, and the DOT writer
# nests a subgraph per frame: thousands of frames one inside another are
# a picture nobody reads, Python's recursion limit for the writer, and minutes
# for Graphviz. So no choice opens a call deeper than MAX_NESTING: the call at
# that depth is drawn open, and each call inside it that would be opened is a
# closed box instead (what a level opens, ``expand`` and a focus alike), and
# the picture says so.


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
    parts: Mapping[int, tuple[frozenset[int], ...]] = field(default_factory=dict)
    """Fold groups whose repetitions (those not held) stand at different statuses: one box
    per part, each part the repetitions (by position) of one status (Note [A box is one
    status])."""
    crowded: tuple[int, ...] = ()
    """Calls an ``expand`` opened without opening the calls they hold: more than the box
    budget of them, side by side (Note [Siblings count in the budget])."""


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
    status: Callable[[int], BoxStatus] | None = None,
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
        status: each call's status at the step (by scope index); with it, a fold whose
            calls differ in status is drawn as one box per status (Note [A box is one
            status]). Without it (no step, or an animation whose boxes stay in place),
            a fold is one box.
    """
    opened: set[int] = set()
    crowded: list[int] = []
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
            inside = _inside(tree, index, max_boxes, crowded)
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
        level = min(tree.default_level(max_boxes, frozen), MAX_NESTING)
    # See Note [What a level opens].
    opened.update(s.index for s in tree.scopes if s.depth <= level and s.index not in tree.folded)
    if tree.max_depth > MAX_NESTING:  # Note [Frames nest at most MAX_NESTING deep]
        opened = {i for i in opened if tree.scopes[i].depth <= MAX_NESTING}
    kept = {g: frozenset(r) for g, r in held.items() if g not in frozen}
    parts = {} if status is None else _parts(tree, opened, frozen, kept, status)
    return Choice(level, frozenset(opened), frozen, kept, parts, tuple(crowded))


# Note [Siblings count in the budget]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A picture's budget (``MAX_BOXES``, 150) is of boxes, and sibling calls that
# do not fold are boxes side by side: 20,000 of them, at the top or inside one
# call, are 20,000 boxes for Graphviz (minutes) and for a reader (nothing to
# read). So the default picture that is over the budget even with every call
# closed (level 0) keeps the boxes nearest the root, as ``--max-nodes`` does,
# and says how many it leaves out and how to draw more; ``--expand`` of a call
# holding more unfolded calls than the budget opens that call, draws those
# calls as boxes rather than opening each (every one a frame), and is kept to
# the budget the same way. ``--max-nodes N`` is the way to draw more: it sets
# the number drawn.


def _inside(tree: ModuleTree, index: int, max_boxes: int, crowded: list[int]) -> list[int]:
    """The call ``index`` and the calls inside it that ``expand`` opens: all of them, but not
    those held by a call holding more than ``max_boxes`` calls (listed in ``crowded``; Note
    [Siblings count in the budget])."""
    out = []
    stack = [index]
    while stack:
        current = stack.pop()
        out.append(current)
        children = tree.scopes[current].children
        if len(children) > max_boxes:
            crowded.append(current)
            continue
        stack.extend(children)
    return out


def _parts(
    tree: ModuleTree,
    opened: set[int],
    unfolded: frozenset[int],
    held: Mapping[int, frozenset[int]],
    status: Callable[[int], BoxStatus],
) -> dict[int, tuple[frozenset[int], ...]]:
    """The parts of each drawn fold whose repetitions differ in status (Note [A box is one
    status]): the repetitions of each status, in the order the first of each comes."""
    parts: dict[int, tuple[frozenset[int], ...]] = {}
    for group in tree.groups:
        if group.index in unfolded or (group.parent is not None and group.parent not in opened):
            continue  # drawn as its calls, or inside a box
        hold = held.get(group.index, frozenset())
        by_status: dict[BoxStatus, set[int]] = {}
        if group.period == 1:  # a fold of thousands of calls, at every step: one call each
            for r, index in enumerate(group.scopes):
                if r not in hold:
                    by_status.setdefault(status(index), set()).add(r)
        else:
            for r, calls in enumerate(group.repetitions()):
                if r not in hold:
                    by_status.setdefault(one_status(status(i) for i in calls), set()).add(r)
        if len(by_status) > 1:
            parts[group.index] = tuple(frozenset(r) for r in by_status.values())
    return parts


def one_status(statuses: Iterable[BoxStatus]) -> BoxStatus:
    """The status of several calls together: theirs if they share one; else failed if one
    failed, and running otherwise (some have run, some not)."""
    found = set(statuses)
    if len(found) == 1:
        return found.pop()
    return BoxStatus.FAILED if BoxStatus.FAILED in found else BoxStatus.RUNNING


# Note [What a level opens]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# A level opens the calls that no fold holds. The calls of a fold (and what
# they hold) open only when asked: a fold opened with Enter or ``unfold``
# shows its calls as boxes, one each; the running node's block opens while its
# eleven siblings stay one box; ``expand`` opens the module it names, all the
# way down. So stepping through a 12-layer model draws one layer's inside and
# one box for the eleven others, not twelve insides.

# Note [A box is one status]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# At a step, a box's status must be true of everything inside it. Alike calls
# that stand at different statuses are not alike for the reader: at layer 6 of
# twelve, ``layers.{0..5,7..11}`` ×11 would read "running" while five layers
# are done and six have not started. So at a step a fold's calls are drawn as
# one box per status: ``layers.{7..11}`` ×5 done, ``layers.{0..5}`` ×6 not
# started, and the call holding the running or failing node open between them
# (Note [A step opens one call of a fold]). Without a step, or where every call
# stands at one status, a fold is one box, as before the backward reached it.

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


__all__ = ["MAX_NESTING", "Choice", "choose", "focus_of", "one_status"]
