"""Which module calls a picture opens: a level, expansion, requests, and a focus.

The first step of the module view (:mod:`autograd_viz.draw.model.showing` draws
the choice): :func:`choose` says which calls of a
:class:`~autograd_viz.draw.model.tree.ModuleTree` are open (drawn as a cluster
around what they hold) and which folds are opened into their calls;
:func:`focus_of` says which nodes a step is about.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from autograd_viz.draw.model.drawn import BoxStatus
from autograd_viz.draw.model.graph_view import GraphView
from autograd_viz.draw.model.targets import Target
from autograd_viz.draw.model.tree import MAX_BOXES, ModuleTree
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
    (Note [Around a fold] in :mod:`~autograd_viz.draw.model.select`)."""
    parts: Mapping[int, tuple[frozenset[int], ...]] = field(default_factory=dict)
    """Fold groups whose repetitions (those not held) stand at different statuses: one box
    per part, each part the repetitions (by position) of one status (Note [A box is one
    status])."""
    crowded: tuple[int, ...] = ()
    """Calls an ``expand`` opened without opening the calls they hold: more than the box
    budget of them, side by side (Note [Siblings count in the budget])."""
    stacked: bool = False
    """Draw a fold with one call open as a stack (Note [A fold is drawn as a stack] in
    :mod:`~autograd_viz.draw.model.stacks`), and small calls in their neighbours' boxes (Note
    [A small call joins its neighbour] in :mod:`~autograd_viz.draw.model.joins`): the default
    picture's way."""
    compact: bool = False
    """Also leave out frames around one thing and count open calls' parameters in their
    labels (Notes [A frame around one thing is a label] and [Parameters in a frame's label]
    in :mod:`~autograd_viz.draw.model.compact`): the default picture, when no call is
    asked to be shown whole."""


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
    represent: bool = False,
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
            :mod:`~autograd_viz.draw.model.select`).
        status: each call's status at the step (by scope index); with it, a fold whose
            calls differ in status is drawn as one box per status (Note [A box is one
            status]). Without it (no step, or an animation whose boxes stay in place),
            a fold is one box.
        represent: each fold drawn inside an open call (or at the top) opens one
            representative call, the first, as deep as the level opens calls that no
            fold holds (Note [A fold shows its inside once]); the picture draws such a fold
            as a stack (Note [A fold is drawn as a stack] in
            :mod:`~autograd_viz.draw.model.stacks`) and, unless ``expand`` asks for calls
            whole, joins small calls to their neighbours (``Choice.compact``).
    """
    opened: set[int] = set()
    crowded: list[int] = []
    unfolded = set(unfold)
    held: dict[int, set[int]] = {}
    visible: set[int] = set(open)  # calls whose enclosing calls must all be open
    expand = list(expand)
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
    asked = set(opened)
    opened.update(s.index for s in tree.scopes if s.depth <= level and s.index not in tree.folded)
    if represent:
        _represent(tree, level, opened, frozen, held)
        # See Note [A fold shows its inside once]: calls holding no calls stay boxes.
        alone = len(tree.items.get(None, ())) == 1  # the model is one call
        opened = {
            i
            for i in opened
            if i in asked or tree.scopes[i].children or (alone and tree.scopes[i].depth == 1)
        }
    if tree.max_depth > MAX_NESTING:  # Note [Frames nest at most MAX_NESTING deep]
        opened = {i for i in opened if tree.scopes[i].depth <= MAX_NESTING}
    kept = {g: frozenset(r) for g, r in held.items() if g not in frozen}
    parts = {} if status is None else _parts(tree, opened, frozen, kept, status)
    compact = represent and not expand
    return Choice(level, frozenset(opened), frozen, kept, parts, tuple(crowded), represent, compact)


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


# Note [Opening is one model]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Every picture opens a call the same way, whoever asks: ``--expand NAME``,
# ``--around NAME``, a step's focus and the TUI's Enter (:func:`open_call`).
# Opening a call of a fold opens exactly that call, whole; the fold's other
# calls stay one box with their count (``h.{0..2,4..11} × 11``), not eleven
# boxes, or, in ``dot``'s default picture, the stack drawn around it
# (``h.{0..11} × 12``, drawn: ``h.3``). Opening a fold by its name
# (``h.{0..11}``) opens its representative, the first call, not all twelve;
# ``unfold`` is the one way to draw every call of a fold as a box of its own.
# So ``--expand h.5`` and ``--around h.5`` keep the same fold closed.


# Note [A fold shows its inside once]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The block a model repeats is the model (a ViT's twelve blocks hold 96% of
# its graph), and a fold closed into one box hides it. The default picture of
# ``dot`` opens one call of each fold, its first, as a level opens a call no
# fold holds (to the same depth), and draws the fold as one stack around it,
# ``blocks.{0..11} × 12``, with the status of every call (Note [A fold is drawn
# as a stack] in stacks.py): the structure is drawn once, the repetitions
# counted. A fold whose first call stays closed (its calls hold no calls) is
# one fold box. A fold inside the opened
# call is drawn the same way, and a fold a step or a name already opens a
# call of keeps that call as its representative. The box budget and the height
# estimate choose the level with the representatives drawn (``fitting_level``
# in showing.py). A call that holds no calls (a Linear, a norm, an activation)
# below the outermost stays a box there unless asked for: opened, it shows
# nodes, not structure (its weights' AccumulateGrad nodes and their tensors, a
# row each), so the budget goes to modules before nodes and the level can go
# deeper. A model that is one Linear (the only call at the top) is drawn open.


def _represent(
    tree: ModuleTree,
    level: int,
    opened: set[int],
    unfolded: frozenset[int],
    held: dict[int, set[int]],
) -> None:
    """Open a representative call of every closed fold drawn in an open call (Note [A fold
    shows its inside once]); ``opened`` and ``held`` are added to."""
    done: set[int] = set()
    changed = True
    while changed:
        changed = False
        for group in tree.groups:
            if group.index in done or group.index in unfolded:
                continue
            if group.parent is not None and group.parent not in opened:
                continue
            done.add(group.index)
            changed = True
            if tree.scopes[group.scopes[0]].depth > level and group.index not in held:
                continue  # closed at this level: one box, not a call and a box
            chosen = held.setdefault(group.index, set())
            if not chosen:
                chosen.add(0)
            for r in chosen:
                for index in group.repetitions()[r]:
                    stack = [index]
                    while stack:
                        current = stack.pop()
                        if tree.scopes[current].depth > level:
                            continue
                        if current != index and current in tree.group_of:
                            continue  # a fold inside: its own representative, next round
                        opened.add(current)
                        stack.extend(tree.scopes[current].children)


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


def open_call(
    tree: ModuleTree,
    names: Iterable[Target],
    *,
    level: int | None = None,
    max_boxes: int = MAX_BOXES,
    status: Callable[[int], BoxStatus] | None = None,
) -> Choice:
    """The choice that opens ``names`` as ``--expand`` does (Note [Opening is one model]):
    a call whole, its fold's other calls one box; a fold by its representative. The TUI's
    Enter on a module row is this with the rows it has opened; the other arguments are
    :func:`choose`'s."""
    return choose(tree, level=level, expand=names, max_boxes=max_boxes, split=True, status=status)


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


__all__ = ["MAX_NESTING", "Choice", "choose", "focus_of", "one_status", "open_call"]
