"""What a picture shows of a model at one step: open modules as clusters, closed ones as boxes.

The second part of the view model (:mod:`autograd_viz.draw.model.tree` has the
tree). Every view goes through here:

1. :func:`~autograd_viz.draw.model.choosing.choose` says which module calls are open
   (drawn as a cluster around what they hold) and which folds are opened into their calls: a
   level, ``expand`` (a module opened all the way down, or ``"all"``: every
   node, as without modules), calls and folds opened on request (the TUI's
   Enter), and a focus (the running or failing nodes: their modules open by
   themselves, one level each, so the node is drawn and its neighbours stay
   boxes).
2. :func:`apply` turns a :class:`~autograd_viz.draw.model.graph_view.GraphView` and
   a :class:`~autograd_viz.draw.model.choosing.Choice` into the picture: a
   :class:`ModuleBox` node per closed call or fold (a :class:`BoxSummary` of
   what it holds at the step), a :class:`Cluster` per open call, edges between
   boxes merged (``count``).
3. :func:`module_view` does both for a view, with the focus the step gives;
   :func:`show` is what every view calls: a neighbourhood of any name, folded
   chains (graphs without modules), the module view, and a node budget.

Box summaries are sums over the nodes inside, so a box says what its nodes
would: how many, their sequence and topological ranges, dependencies still
to come, and one :class:`BoxStatus`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from autograd_viz.draw.model import chains, select
from autograd_viz.draw.model.choosing import MAX_NESTING, Choice, choose, focus_of
from autograd_viz.draw.model.drawn import NOT_SUMMED, BoxStatus, BoxSummary, Cluster, ModuleBox
from autograd_viz.draw.model.graph_view import GraphView, reach_bits
from autograd_viz.draw.model.module_picture import (
    BY_MODULE,
    Layout,
    StepPictures,
    apply,
    by_module_line,
    layout,
)
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.model.stacks import route
from autograd_viz.draw.model.targets import Names
from autograd_viz.draw.model.totals import box_status, call_sums, status_of_calls, summarize
from autograd_viz.draw.model.tree import MAX_BOXES, ModuleTree
from autograd_viz.trace import paused_gc

EXPAND_ALL = "all"
"""``expand=["all"]``: every node, no module boxes (the drawing without modules)."""


# -- drawing the choice ----------------------------------------------------------------


DEFAULTS = ViewOptions()
"""What a picture shows when nobody chose otherwise."""


def show(
    view: GraphView,
    options: ViewOptions = DEFAULTS,
    *,
    focus: Iterable[str] = (),
    max_boxes: int = MAX_BOXES,
    follow: bool = True,
    pictures: StepPictures | None = None,
    represent: bool = False,
) -> GraphView:
    """What a view draws of ``view``, in order: neighbourhood, folded chains, modules, budget.

    Args:
        view: the graph at a step (every node).
        options: the reader's choices (:class:`~autograd_viz.draw.model.options.ViewOptions`):
            ``around`` draws only what is within ``depth`` edges of a name (a module named
            there is drawn whole, a node with its modules open); ``collapse`` folds repeated
            chains and the steps of loops that no module encloses into one box with a count
            (:func:`~autograd_viz.draw.model.chains.collapse`), a chain fold named in
            ``expand`` drawn whole; ``level`` (see :func:`choose`; by default the deepest with
            at most ``max_boxes`` boxes); ``expand`` (modules or nodes drawn whole, ``"all"``:
            every node); ``max_nodes`` (at most this many nodes, boxes included, nearest the
            root). Its labelling choices are the renderer's.
        focus: more node keys to draw with their modules open, besides the
            step's running and failing nodes (:func:`focus_of`).
        max_boxes: the budget of the default level.
        follow: open the modules of the step's running and failing nodes
            (:func:`focus_of`), and draw a fold's calls as one box per status (Note [A
            box is one status] in :mod:`~autograd_viz.draw.model.choosing`); an animation,
            whose boxes stay where they are from frame to frame, does neither.
        pictures: what the caller keeps from step to step of one graph (see
            :func:`module_view`).
        represent: open one call of each fold drawn, its other calls one box (Note [A fold
            shows its inside once] in :mod:`~autograd_viz.draw.model.choosing`).

    Raises:
        GraphViewError: a name names nothing (or a node name several nodes have).
        ValueError: ``depth`` or ``max_nodes`` is out of range.
    """
    with paused_gc():  # Note [Building a big view skips the collector]
        return _show(view, options, focus, max_boxes, follow, pictures, represent)


def _show(
    view: GraphView,
    options: ViewOptions,
    focus: Iterable[str],
    max_boxes: int,
    follow: bool,
    pictures: StepPictures | None,
    represent: bool,
) -> GraphView:
    around, depth, collapse = options.around, options.depth, options.collapse
    level, expand, max_nodes = options.level, options.expand, options.max_nodes
    focused = [*(focus_of(view) if follow else ()), *focus]
    expanded = list(expand)
    kept: list[str] = []  # nodes of chain folds named in expand: drawn whole
    if collapse and expand and EXPAND_ALL not in expand:
        names = select.names_of_view(view)
        for name in expand:
            target = names.resolve(name)
            if target.kind == "chain":
                kept.extend(target.nodes)
                expanded.remove(name)
    whole: ModuleTree | None = None  # the whole graph's, for a neighbourhood
    carried: frozenset[str] = frozenset()  # its nodes kept as part of an alike call
    if around is not None:
        names = select.names_of_view(view)
        target = names.resolve(around)
        whole = names.tree
        view, carried = select.around_carrying(
            view, target, depth, together=select.other_repetitions(whole, target)
        )
        if target.scopes:
            expanded.append(target.text)
        else:
            focused.extend(target.nodes)
    if collapse:
        view = chains.collapse(view, keep=kept)
    drawn = [k for k in focused if k in view.nodes]
    view = module_view(
        view,
        level=level,
        expand=expanded,
        focus=drawn,
        max_boxes=max_boxes,
        pictures=pictures,
        split=True,  # Note [Opening is one model] in choosing.py
        by_status=follow,
        # See Note [A neighbourhood keeps the whole graph's folds] in select.py.
        tree=None if whole is None else select.restricted(whole, view.nodes),
        budget=max_nodes is None,
        # A neighbourhood draws what is near its name; the rest of a fold stays one box.
        represent=represent and around is None,
    )
    if max_nodes is not None:
        view = select.limit(view, max_nodes)
    return select.say_carried(view, carried)  # once drawn: Note [Captions say what is drawn]


def module_view(
    view: GraphView,
    *,
    level: int | None = None,
    expand: Sequence[str] = (),
    focus: Iterable[str] | None = None,
    max_boxes: int = MAX_BOXES,
    pictures: StepPictures | None = None,
    split: bool = False,
    by_status: bool = True,
    tree: ModuleTree | None = None,
    budget: bool = True,
    represent: bool = False,
) -> GraphView:
    """``view`` drawn at module level: the usual entry point of every view.

    Args:
        view: the graph at a step (every node).
        level: see :func:`choose`.
        expand: names of modules (or nodes) to show whole (any name
            :class:`~autograd_viz.draw.model.targets.Names` reads); ``"all"`` draws every
            node, as without modules.
        focus: node keys whose modules open; by default the step's
            (:func:`focus_of`).
        max_boxes: the budget of the default level.
        pictures: kept by a caller drawing one graph step after step (an animation's
            frames): the tree of each graph drawn (it does not change with the step, and
            building it walks every node), and the last step's picture, which the next
            one is made from (Note [A picture from the step before] in
            :mod:`~autograd_viz.draw.model.module_picture`).
        split: draw a fold holding a module or node opened as the repetitions holding
            it and one box for the others, not as all its calls (see :func:`choose`).
        by_status: draw a fold whose calls stand at different statuses as one box per
            status (Note [A box is one status] in :mod:`~autograd_viz.draw.model.choosing`).
        tree: the tree of ``view``'s nodes, made by the caller (``pictures``' trees are
            then not read).
        budget: keep a picture over ``max_boxes`` with every call closed, or one whose
            ``expand`` met more sibling calls than that, to the ``max_boxes`` boxes and
            nodes nearest the root (Note [Siblings count in the budget] in
            :mod:`~autograd_viz.draw.model.choosing`); ``False`` where the caller keeps it to a
            size of its own.
        represent: open one call of each fold drawn (see :func:`choose`); the default
            level is then chosen with those calls open.

    Raises:
        GraphViewError: a name in ``expand`` names nothing.
    """
    if EXPAND_ALL in expand:
        return view
    known = (tuple(t.id for t in view.tasks), tuple(view.nodes))
    if tree is None and pictures is not None:
        tree = pictures.trees.get(known)
    if tree is None:
        tree = ModuleTree.of_view(view)
        if pictures is not None:
            pictures.trees[known] = tree
    if not tree.scopes:
        return view
    targets = []
    if expand:
        names = Names(
            ((k, n.info) for k, n in view.nodes.items()),
            tree,
            chains=lambda: {c.name: c.members for c in chains.chain_folds(view)},
        )
        targets = [names.resolve(name) for name in expand]
    sums = None
    if tree.groups and by_status and any(t.status is not None for t in view.tasks):
        sums = call_sums(view, tree)  # read for each call's status, then for the boxes
    fitted = level
    if level is None and not expand:
        fitted = fitting_level(view, tree, max_boxes, represent=represent)
    chosen = choose(
        tree,
        level=fitted,
        expand=targets,
        focus=focus_of(view) if focus is None else focus,
        max_boxes=max_boxes,
        split=split,
        status=None if sums is None else status_of_calls(view, tree, sums),
        represent=represent,
    )
    if pictures is not None:
        picture = pictures.apply(view, tree, chosen)
    else:
        picture = apply(view, tree, chosen, sums=sums)
    if tree.max_depth > MAX_NESTING and any(
        n.box is not None and n.box.scopes and tree.scopes[n.box.scopes[0]].depth > MAX_NESTING
        for n in picture.nodes.values()
    ):  # Note [Frames nest at most MAX_NESTING deep] in choosing.py
        deepest = f"{tree.max_depth:,}"
        line = (
            f"module frames nest at most {MAX_NESTING} deep: the calls below that "
            f"(down to depth {deepest}) are drawn closed"
        )
        picture = replace(picture, notices=(*picture.notices, line))
    if not budget or len(picture.nodes) <= max_boxes:
        return picture
    # See Note [Siblings count in the budget] in choosing.py.
    if chosen.crowded:
        crowded = ", ".join(tree.scopes[i].name for i in chosen.crowded[:3])
        more = f" and {len(chosen.crowded) - 3:,} more" if len(chosen.crowded) > 3 else ""
        hold = "holds" if len(chosen.crowded) == 1 else "hold"
        why = (
            f"first ({crowded}{more} {hold} more than {max_boxes:,} calls side by side, drawn "
            "closed; --max-nodes N draws N)"
        )
    elif level is None and not expand and chosen.level == 0:
        why = (
            f"first: more than {max_boxes:,} side by side with every module closed "
            "(--max-nodes N draws N)"
        )
    else:
        return picture
    return _recounted(select.limit(picture, max_boxes, why), chosen.level, len(view.nodes))


MAX_HEIGHT = 3000
"""How tall, in points, the default picture is meant to be at most (Note [A picture a page
tall])."""
ROW_POINTS = 100
"""Points one row of boxes takes in a drawing, edges between rows included (measured)."""
FRAME_POINTS = 40
"""Points an open module's frame adds to a drawing's height: its label and margins."""

# Note [A picture a page tall]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The box budget alone lets a chain-shaped model (MobileNetV3's sixteen
# blocks, ConvNeXt's four stages) open five or seven levels deep: 80 boxes in
# one column, 12,000 points tall and 26 times as tall as wide, which nobody
# reads. So the default level is also the deepest whose picture is estimated
# at most MAX_HEIGHT points tall: its rows (the longest path of gradient flow
# through the drawn boxes and nodes, a leaf's tensor one row more) times
# ROW_POINTS, plus FRAME_POINTS per open frame (each adds its label above what
# it holds, and frames in a chain stack, though not those side by side; a stack
# is two frames). The drawing stacks a frame above everything its gradient
# reaches outside it (Note [Stacking module clusters] in dot_clusters.py), not
# only above the node it reaches: BART's decoder, whose layers send gradients
# to the encoder's output from halfway down, stands whole above the encoder. So
# the path goes through a bottom of each frame as well, below everything in
# the frame and a row above what it sends to. The calls a stack does not draw
# are their drawn call's (Note [A fold is drawn as a stack] in stacks.py), and
# parameters counted in a label are not rows. The constants were measured on
# Graphviz 2.43 drawings of six real models (docs/pictures.md) at the level
# chosen and the one deeper: estimates within 16% (a small picture is
# underestimated more: an LSTM's 916 points at 640). A leaf drawn inside a box
# adds no row for its tensor. A level asked for, ``expand`` and the TUI (which
# has its own screen) are not changed by it.


def fitting_level(
    view: GraphView, tree: ModuleTree, max_boxes: int = MAX_BOXES, *, represent: bool = False
) -> int:
    """The default level: the deepest within ``max_boxes`` boxes (:meth:`ModuleTree.
    default_level`) whose picture is estimated at most :data:`MAX_HEIGHT` points tall (Note
    [A picture a page tall]); at least 1 where the tree has calls. With ``represent`` (Note
    [A fold shows its inside once] in :mod:`~autograd_viz.draw.model.choosing`) the boxes and the
    height are those of the picture with each fold's representative open."""
    known = _fitted.setdefault(tree, {})
    if (max_boxes, represent) in known:  # an animation asks at every frame of one graph
        return known[max_boxes, represent]
    level = min(tree.max_depth if represent else tree.default_level(max_boxes), MAX_NESTING)
    heads: dict[str, list[str]] = {}
    for edge in view.edges:
        heads.setdefault(edge.tail, []).append(edge.head)
    while level > 1:
        chosen = choose(tree, level=level, max_boxes=max_boxes, represent=represent)
        laid = layout(tree, chosen, view)
        gone = laid.hidden | laid.tucked.keys()
        drawn = len(laid.boxes) + sum(
            1 for k in view.nodes if k not in laid.drawn and k not in gone
        )
        if (not represent or drawn <= max_boxes) and _height(view, laid, heads) <= MAX_HEIGHT:
            break
        level -= 1
    known[max_boxes, represent] = level
    return level


# A tree is made once per graph and never changed, and the height depends only on the graph.
_fitted: weakref.WeakKeyDictionary[ModuleTree, dict[tuple[int, bool], int]] = (
    weakref.WeakKeyDictionary()
)


def _height(view: GraphView, laid: Layout, heads: dict[str, list[str]]) -> int:
    """The estimated height in points of ``view`` drawn as ``laid`` (Note [A picture a page
    tall])."""
    where = laid.drawn.get
    gone = laid.hidden | laid.tucked.keys()
    if gone:  # each call a stack does not draw is its drawn call's (stacks.py)
        heads = {}
        for edge in view.edges:
            routed = route(laid.stacks, edge.tail, edge.head)
            if routed is not None and routed[2] is None and routed[1] not in laid.tucked:
                heads.setdefault(routed[0], []).append(routed[1])
    # The drawn items (nodes, boxes) and the edges between them, one row each; an item
    # whose tensor hangs below it (a leaf drawn as itself) one row more.
    below: dict[str, dict[str, int]] = {}
    for key in view.nodes:
        if key in gone:
            continue
        item = where(key, key)
        steps = below.setdefault(item, {})
        for head in heads.get(key, ()):
            other = where(head, head)
            if other != item:
                steps[other] = 1
    tensors = {k for k, n in view.nodes.items() if n.info.leaf is not None and k not in laid.drawn}
    _stacking_steps(laid, below)
    rows: dict[str, int] = {}
    # The longest path, walked depth first without recursion: every item's rows below.
    for start in below:
        if start in rows:
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        while stack:
            key, at = stack.pop()
            if at == 0:
                if key in rows:
                    continue
                rows[key] = -1  # on the walk
                stack.append((key, 1))
                stack.extend((h, 0) for h in below.get(key, ()) if h not in rows)
                continue
            deepest = max(
                (rows.get(h, 0) + step for h, step in below.get(key, {}).items()), default=0
            )
            rows[key] = max(deepest, 1 if key in tensors else 0)
    tallest = max(rows.values(), default=0) + 1
    # A stack is two frames: the fold's around the drawn call's.
    return tallest * ROW_POINTS + (len(laid.clusters) + len(laid.stacks)) * FRAME_POINTS


def _stacking_steps(laid: Layout, below: dict[str, dict[str, int]]) -> None:
    """Add to ``below`` what stacking adds to a drawing (Note [Stacking module clusters] in
    dot_clusters.py): a frame stands above every item its gradient reaches outside it, whole,
    not only the item the gradient leaves from. Each frame gets a bottom, which every item in
    it is above (no row) and which is a row above each such item."""
    frames: dict[str, list[str]] = {}  # each frame's items, nested frames' included
    for item in below:
        frame = laid.inside.get(item)
        while frame is not None:
            frames.setdefault(frame, []).append(item)
            frame = laid.clusters[frame][1]
    if not frames:
        return
    bit = {item: 1 << i for i, item in enumerate(below)}
    reach = _reach(below, bit)
    for frame, items in frames.items():
        inside = set(items)
        mask = sum(bit[item] for item in inside)
        bottom = f"bottom of {frame}"  # not a node key: keys have no spaces
        reached = {
            h: 1
            for item in items
            for h in below.get(item, ())
            # An end (a leaf) hangs below what feeds it; what leads back in is not below.
            if h in bit and h not in inside and below.get(h) and not reach[h] & mask
        }
        if not reached:
            continue
        below[bottom] = reached
        for item in items:
            below[item][bottom] = 0


def _reach(below: Mapping[str, Mapping[str, int]], bit: Mapping[str, int]) -> dict[str, int]:
    """What each item reaches (itself included), as a bit set, children before parents."""
    return reach_bits(below, below, bit)


def _recounted(picture: GraphView, level: int, nodes: int) -> GraphView:
    """``picture`` with its line of boxes counting the boxes it still draws (Note [Captions
    say what is drawn] in select.py)."""
    boxes = [n.box for n in picture.nodes.values() if n.box is not None]
    stacks = [c.stack for c in picture.clusters.values() if c.stack is not None]
    stacked = (len(stacks), sum(s.count - 1 for s in stacks), sum(s.hidden for s in stacks))
    counted = sum(len(c.parameters) for c in picture.clusters.values())
    folded = sum(len(b.members) for b in boxes)
    line = by_module_line(level, len(boxes), folded, nodes, stacked, counted)
    return replace(
        picture,
        notices=tuple(
            line if n.startswith(BY_MODULE) else n
            for n in picture.notices
            if boxes or not n.startswith(BY_MODULE)
        ),
    )


__all__ = [
    "EXPAND_ALL",
    "NOT_SUMMED",
    "BoxStatus",
    "BoxSummary",
    "Choice",
    "Cluster",
    "ModuleBox",
    "StepPictures",
    "apply",
    "box_status",
    "choose",
    "fitting_level",
    "focus_of",
    "module_view",
    "show",
    "summarize",
]
