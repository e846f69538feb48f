"""What the default picture leaves out or draws together, so that a model is a page tall.

Part of the view model (:mod:`autograd_viz.draw.model.module_picture` lays the picture
out, and calls these where :attr:`Choice.compact <autograd_viz.draw.model.choosing.Choice>`
asks): a small call drawn in its neighbour's box (Note [A small call joins its neighbour]
in :mod:`~autograd_viz.draw.model.joins`), a frame around one thing left out (Note [A frame
around one thing is a label]), and an open call's parameters counted in its label (Note
[Parameters in a frame's label]). Each changes a layout's maps in place.
"""

from __future__ import annotations

from autograd_viz.draw.model.folds import FoldGroup
from autograd_viz.draw.model.graph_view import GraphView
from autograd_viz.draw.model.joins import joins
from autograd_viz.draw.model.tree import ModuleTree, Scope
from autograd_viz.trace import NodeInfo
from autograd_viz.trace.replay import NodeStatus


def tuck_parameters(
    view: GraphView,
    clusters: dict[str, tuple[Scope, str | None]],
    drawn: dict[str, str],
    inside: dict[str, str],
) -> dict[str, str]:
    """The ``AccumulateGrad`` nodes of each open call's own named parameters, with the key of
    the frame whose label counts them (Note [Parameters in a frame's label]); they are taken
    out of ``inside``."""
    feeding = {e.tail for e in view.edges}  # a leaf that sends gradients on is no end
    asked = _in_sight(view)
    tucked = {
        k: key
        for key, (scope, _) in clusters.items()
        for k in scope.nodes
        if k not in drawn
        and _named_leaf(view.nodes[k].info)
        and k not in feeding
        and k not in asked
    }
    for k in tucked:
        inside.pop(k, None)
    return tucked


# Note [Parameters in a frame's label]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A closed call's box counts its parameters in one line (``2 parameters``);
# an open call drew its own parameters (a ViT's ``pos_embed`` and
# ``cls_token``, a ConvNeXt block's layer scale ``gamma``) as nodes, each an
# ``AccumulateGrad`` and its tensor's box: two rows under the op that feeds it,
# often the longest branch of the frame, and nothing a reader asks of the
# model's structure. So in the default picture an open call's own named
# parameters are counted in its frame's label (``1 parameter: gamma``), not
# drawn; the op feeding each stays, where the gradient branches off. Asking
# for the parameter by name (``--around``), ``--expand``, ``--level``,
# ``--leaves``, the TUI and ``animate`` draw it as before.


def _named_leaf(info: NodeInfo) -> bool:
    return info.leaf is not None and bool(info.leaf.name)


def _in_sight(view: GraphView) -> set[str]:
    """The nodes a picture draws whatever it counts in a label: running or failing, holding a
    NaN or Inf, or a leaf marked as getting no gradient."""
    marked = {b.node for b in view.boxes if b.why is not None or b.cut is not None}
    urgent = (NodeStatus.RUNNING, NodeStatus.FAILED)
    return marked | {k for k, n in view.nodes.items() if n.status in urgent or n.non_finite}


def join_boxes(
    tree: ModuleTree,
    view: GraphView,
    infos: dict[str, NodeInfo],
    clusters: dict[str, tuple[Scope, str | None]],
    drawn: dict[str, str],
    inside: dict[str, str],
    boxes: dict[str, tuple[Scope | FoldGroup, str | None]],
) -> dict[str, FoldGroup]:
    """Draw each small call in its neighbour's box (Note [A small call joins its neighbour]
    in joins.py); ``drawn``, ``inside`` and ``boxes`` are changed. Returns the boxes that took
    calls in, each with its calls as a group of one repetition."""
    heads: dict[str, list[str]] = {}
    pairs: set[tuple[str, str]] = set()
    for edge in view.edges:
        heads.setdefault(edge.tail, []).append(edge.head)
        tail, head = drawn.get(edge.tail), drawn.get(edge.head)
        if tail is not None and head is not None and tail != head:
            pairs.add((tail, head))
    box_of = {item.index: key for key, (item, _) in boxes.items() if isinstance(item, Scope)}
    out: dict[str, FoldGroup] = {}
    parents: list[tuple[Scope | None, str | None]] = [(None, None)]
    parents.extend((scope, key) for key, (scope, _) in clusters.items())
    for parent, _key in parents:
        items = tree.items.get(None if parent is None else parent.index, ())
        siblings = [i.index if isinstance(i, Scope) and i.index in box_of else None for i in items]
        if sum(1 for i in siblings if i is not None) < 2:
            continue
        for box, calls in joins(tree, siblings, box_of, infos, heads, pairs).items():
            anchor = boxes[box][0]
            assert isinstance(anchor, Scope)
            for index in calls:
                gone = box_of[index]
                del boxes[gone]
                inside.pop(gone, None)
                drawn.update(dict.fromkeys(tree.members(index), box))
            scopes = tuple(sorted((anchor.index, *calls), key=siblings.index))
            out[box] = FoldGroup(
                -1, anchor.parent, scopes, anchor.name, anchor.kind, len(scopes), anchor.shapes
            )
    return out


# Note [A frame around one thing is a label]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Models wrap: a ConvNeXt stage holds a ``blocks`` Sequential that holds only
# the fold of blocks; a classifier head holds a pool module that holds only its
# pool. Drawn open, each wrapper is a frame around one thing, a label and a
# margin a reader skips, and a chain of them costs a page its height. So in the
# default picture (where stacks and joins are drawn) an open call below the
# outermost that holds nothing of its own drawn but one box, frame or stack is
# not framed: what it holds is drawn in its parent's frame, and says its full
# name itself (``stages.2.blocks.{0..5} × 6``, ``head.global_pool.pool``).


def unwrap(
    tree: ModuleTree,
    stacks: set[str],
    clusters: dict[str, tuple[Scope, str | None]],
    drawn: dict[str, str],
    inside: dict[str, str],
    boxes: dict[str, tuple[Scope | FoldGroup, str | None]],
) -> None:
    """Leave out the frames around one thing (Note [A frame around one thing is a label]);
    ``clusters``, ``inside`` and ``boxes`` are changed."""
    held: dict[str | None, int] = {}
    for _item, parent in (*boxes.values(), *clusters.values()):
        held[parent] = held.get(parent, 0) + 1
    for key, (scope, _) in clusters.items():
        held[key] = held.get(key, 0) + sum(1 for k in scope.nodes if k not in drawn)
    # Deepest first, so that a wrapper around a wrapper goes too.
    for key in sorted(clusters, key=lambda k: -clusters[k][0].depth):
        scope, parent = clusters[key]
        if scope.depth == 1 or key in stacks or held.get(key, 0) != 1:
            continue
        del clusters[key]
        for other, (call, up) in list(clusters.items()):
            if up == key:
                clusters[other] = (call, parent)
        for other, (closed, up) in list(boxes.items()):
            if up == key:
                boxes[other] = (closed, parent)
        for other in [k for k, c in inside.items() if c == key]:
            if parent is None:
                del inside[other]
            else:
                inside[other] = parent


__all__ = ["join_boxes", "tuck_parameters", "unwrap"]
