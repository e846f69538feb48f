"""What the drawn DAG shows of a graph task: the module view, as every picture draws it.

The terminal draws the picture :mod:`autograd_viz.draw.model.showing` makes (module
calls as boxes, repeated siblings folded, chains folded where no module
encloses them, a node budget), never a folding of its own. See Note [A picture
per choice].

Note [A picture per choice]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
Which boxes a picture has depends only on which module calls are open: the
level, the boxes opened or closed with Enter, and the modules of the node the
step is about (they open by themselves). That choice changes rarely while
stepping, so a picture (its boxes, edges and layout) is made once per choice
and kept; a step only recolours it. A box's colour at a step comes from when
each of its nodes started, ended or failed, found once per graph task in the
events and counted with a binary search, so a step costs the boxes drawn, not
the nodes inside them.

The pictures of a big graph task are made in a thread (Note [Drawing a new
picture later] in :mod:`autograd_viz.tui.later`) while the UI reads those made
before: what is kept is read and added under a lock, and a picture is made
outside it.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from rich.cells import cell_len

from autograd_viz.draw.model import chains, select, showing
from autograd_viz.draw.model.drawn import BoxStatus
from autograd_viz.draw.model.graph_view import GraphView, ViewNode, from_graph
from autograd_viz.draw.model.showing import Choice
from autograd_viz.draw.model.targets import Names, Target
from autograd_viz.draw.model.tree import MAX_BOXES, ModuleTree, kind_shown
from autograd_viz.trace import GraphTaskInfo, NodeInfo, Trace
from autograd_viz.trace.records import UnrunGraph
from autograd_viz.trace.replay import NodeStatus
from autograd_viz.trace.text import printable
from autograd_viz.tui.framing import Call, layout_framed
from autograd_viz.tui.routing import NAME_ROOM, Layout, Place, label_width
from autograd_viz.tui.styled import cut_front

_NEVER = 1 << 62

KEPT_VIEWS = 16
"""The most module views (choices of open modules) kept per graph task; the least
recently drawn goes first."""


@dataclass(frozen=True, slots=True)
class Item:
    """One label of the picture: a node drawn as itself, a closed module, or a folded chain."""

    index: int
    """Its id in the layout."""
    node: NodeInfo | None
    """The node, when it is drawn as itself."""
    name: str
    """A box's or fold's name, shown escaped (empty for a node)."""
    count: int
    """How many calls (or chain links) a box stands for."""
    members: tuple[int, ...]
    """Ids of the nodes it holds (one for a node)."""
    runs: int
    """Of those, how many run (the pruned ones never do)."""
    scopes: tuple[int, ...] = ()
    """The module calls a box stands for (:attr:`ModuleTree.scopes` indices)."""
    group: int | None = None
    """The fold group a box of folded calls stands for."""

    @property
    def is_box(self) -> bool:
        """Whether it stands for several nodes."""
        return self.node is None


@dataclass(frozen=True, slots=True)
class Picture:
    """The drawn DAG for one choice of open modules (Note [A picture per choice])."""

    items: Mapping[int, Item]
    """Every label, by id."""
    layout: Layout
    """Where each label goes and how each edge runs."""
    item_of: Mapping[int, int]
    """The item each node is drawn in, by node id."""
    notices: tuple[str, ...]
    """What the picture folds or leaves out, in words."""
    times: dict[int, tuple[int, tuple[list[int], ...]]] = field(
        default_factory=dict, compare=False, repr=False
    )
    """Each box's nodes' start, end and failure steps, sorted, by item id, once read
    (with the count of events read then: a live trace grows)."""


# Note [Enter is --expand]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# Opening a box in the terminal is ``dot --expand`` of the box's name: the
# name the box shows is read back (:class:`~autograd_viz.draw.model.targets.Names`,
# as ``--expand`` and ``/`` read it) and handed to
# :func:`~autograd_viz.draw.model.choosing.choose` as a target, so both open the
# same calls. A call of a fold opens alone, its alike siblings staying one box
# (``layers.{0..2,4..11}`` × 11), and a fold opens its representative, the
# first repetition, whole, beside one box for the others (``split``, as
# ``--around`` draws a fold), so a 12-layer model opened is one layer's inside
# and one box, not twelve insides. Enter on a node drawn inside an open call
# closes that call (the name that opened it is forgotten, or the call is shut).


class Pictures:
    """The pictures of one graph task: its module tree, and a picture per choice, kept."""

    def __init__(self, trace: Trace, task: GraphTaskInfo) -> None:
        self.task = task
        self.view: GraphView = from_graph(UnrunGraph(tuple(task.nodes.values()), (), task.modules))
        """Every node of the task, without a step: what the pictures are made from."""
        self.tree = ModuleTree.of_view(self.view)
        """The task's module calls (empty when the trace has none)."""
        self.key_of = {node.info.id: key for key, node in self.view.nodes.items()}
        self._names: Names | None = None
        self._lock = threading.Lock()
        self._kept: dict[tuple[object, ...], Picture] = {}
        self._views: OrderedDict[tuple[object, ...], GraphView] = OrderedDict()
        self.trace = trace
        self._times: tuple[dict[int, int], ...] = ({}, {}, {})
        self._timed = _times(trace, task, self._times, 0)
        self._spans: tuple[int, list[tuple[int, int, int, int]]] | None = None
        """Each module call's steps (:func:`_spans`), with the count of events read then."""
        self.made = 0
        """How many pictures were made (a module view laid out), for tests and benchmarks."""

    @property
    def names(self) -> Names:
        """Every name the pictures show, read back (node ids, parameters, modules, folds)."""
        if self._names is None:
            view = self.view
            self._names = Names(
                ((k, n.info) for k, n in view.nodes.items()),
                self.tree,
                chains=lambda: {c.name: c.members for c in chains.chain_folds(view)},
            )
        return self._names

    def choice(
        self,
        opened: Iterable[int],
        closed: Iterable[int],
        unfolded: Iterable[int],
        focus: int | None,
        step: int | None = None,
        expanded: Iterable[str] = (),
    ) -> Choice | None:
        """Which calls are open: the default level, ``expanded`` names (as ``--expand`` opens
        them: Note [Enter is --expand]), ``opened`` and ``closed`` by the user (scope indices),
        ``unfolded`` fold groups, and ``focus``'s modules; after ``step`` events, a fold's
        calls are one box per status (Note [A box is one status] in
        :mod:`~autograd_viz.draw.model.choosing`).

        Raises:
            GraphViewError: a name in ``expanded`` names nothing.
        """
        if not self.tree.scopes:
            return None
        targets = [self.names.resolve(name) for name in expanded]
        key = self.key_of.get(focus) if focus is not None else None
        status = None
        if step is not None and self.tree.groups:
            status = self._statuses_at(step)
        chosen = showing.choose(
            self.tree,
            expand=targets,
            split=True,  # see Note [Enter is --expand]
            open=opened,
            unfold=unfolded,
            focus=[key] if key is not None else [],
            status=status,
        )
        shut = set(closed)
        if key is not None and key in self.tree.scope_of:  # the step's node is never shut away
            shut -= set(self.tree.ancestors(self.tree.scope_of[key]))
        return Choice(chosen.level, chosen.open - shut, chosen.unfolded, chosen.held, chosen.parts)

    def _call_status(self, index: int, step: int) -> BoxStatus:
        """Module call ``index``'s status after ``step`` events, as :meth:`status` says a box's."""
        return self._statuses_at(step)(index)

    def _statuses_at(self, step: int) -> Callable[[int], BoxStatus]:
        """Each module call's status after ``step`` events, by scope index (one call a fold's
        repetition, at each step: kept cheap)."""
        if self._timed != len(self.trace.events):  # a live trace grew: read what is new
            self._timed = _times(self.trace, self.task, self._times, self._timed)
        if self._spans is None or self._spans[0] != self._timed:
            self._spans = (self._timed, _spans(self, self._times))
        spans = self._spans[1]
        failed, done = BoxStatus.FAILED, BoxStatus.DONE
        waiting, running = BoxStatus.NOT_STARTED, BoxStatus.RUNNING

        def status(index: int) -> BoxStatus:
            first_start, last_end, first_fail, runs = spans[index]
            if first_fail <= step:
                return failed
            if runs and last_end <= step:
                return done
            return waiting if first_start > step else running

        return status

    def picture(self, choice: Choice | None, focus: int | None = None) -> Picture:
        """The picture for ``choice`` (made once, then kept).

        When the picture would hold more than :data:`MAX_BOXES` labels (a fold of
        thousands of calls opened), it keeps the part around ``focus`` (a node id),
        else the part nearest the root.
        """
        known = ("all",) if choice is None else _known(choice)
        with self._lock:
            view = self._views.get(known)
        if view is None:
            view = self._shown(choice)  # the long part, outside the lock
            with self._lock:
                self._views[known] = view
                while len(self._views) > KEPT_VIEWS:
                    old, _ = self._views.popitem(last=False)
                    for key in [k for k in self._kept if k[0] == old]:
                        del self._kept[key]
        centre = self._holding(view, focus) if len(view.nodes) > MAX_BOXES else None
        with self._lock:
            found = self._kept.get((known, centre))
        if found is None:
            found = self._make(_cut(view, centre))
            # Each box's times, sorted here (in the thread that makes a big task's pictures)
            # rather than on the UI thread at the picture's first drawing; stamped with the
            # events read before, so a live trace that grew meanwhile has them read again.
            timed = self._timed
            for item in found.items.values():
                if item.is_box:
                    self._box_times(found, item, timed)
            with self._lock:
                self.made += 1
                if known in self._views:
                    self._kept[(known, centre)] = found
        return found

    def kept(self, choice: Choice | None, focus: int | None = None) -> Picture | None:
        """The picture :meth:`picture` would give, if it is made already; else ``None``."""
        known = ("all",) if choice is None else _known(choice)
        with self._lock:
            view = self._views.get(known)
            if view is None:
                return None
            self._views.move_to_end(known)  # drawn again: the last to go
        centre = self._holding(view, focus) if len(view.nodes) > MAX_BOXES else None
        with self._lock:
            return self._kept.get((known, centre))

    def _shown(self, choice: Choice | None) -> GraphView:
        if choice is not None:
            # The boxes' state is read from the trace's times (status), never summed.
            return showing.apply(self.view, self.tree, choice, summed=False)
        if len(self.view.nodes) > MAX_BOXES:
            return chains.collapse(self.view)
        return self.view

    def _holding(self, view: GraphView, focus: int | None) -> str | None:
        """The drawn key of what holds node ``focus`` in ``view``."""
        key = self.key_of.get(focus) if focus is not None else None
        if key is None or key in view.nodes:
            return key
        for drawn, node in view.nodes.items():
            inside = node.box.members if node.box else ()
            if key in inside:
                return drawn
        return None

    def _make(self, view: GraphView) -> Picture:
        items: dict[int, Item] = {}
        index_of: dict[str, int] = {}
        for key, node in view.nodes.items():
            index_of[key] = len(items)
            items[len(items)] = self._item(len(items), node)
        edges = {
            (index_of[e.tail], index_of[e.head])
            for e in view.edges
            if e.tail in index_of and e.head in index_of and e.tail != e.head
        }
        places = {i: Place(0, _order(item), *_size(item)) for i, item in items.items()}
        # Open calls as frames around what they hold (Note [A frame is laid out alone]).
        calls = {
            key: Call(
                cluster.parent if cluster.parent in view.clusters else None,
                printable(
                    f"{cluster.name} · {cluster.kind}"
                    if kind_shown(cluster.name, cluster.kind)
                    else cluster.name
                ),
                cluster.scope,
            )
            for key, cluster in view.clusters.items()
        }
        inside = {
            index_of[key]: cluster
            for key, cluster in view.cluster_of.items()
            if key in index_of and cluster in calls
        }
        ranks = {i: self._depth(item) for i, item in items.items()}
        layout, dropped = layout_framed(places, edges, ranks, inside, calls)
        notices = list(view.notices)
        if dropped:
            notices.append(f"{dropped} edges between boxes that lead back up are not drawn")
        item_of = {m: i for i, item in items.items() for m in item.members}
        return Picture(items, layout, item_of, tuple(notices))

    def _item(self, index: int, node: ViewNode) -> Item:
        box = node.box
        if box is None:
            return Item(index, node.info, "", 1, (node.info.id,), 1)
        keys, name, count = box.members, box.name, box.count
        scopes, group = box.scopes, box.group
        members = tuple(self.view.nodes[k].info.id for k in keys if k in self.view.nodes)
        nodes = self.task.nodes
        runs = sum(1 for m in members if nodes[m].status == "needed")  # pruned ones never run
        return Item(index, None, printable(name), count, members, runs, scopes, group)

    def _depth(self, item: Item) -> int:
        nodes = self.task.nodes
        return max(nodes[m].topological_nr for m in item.members)

    def status(self, picture: Picture, item: Item, step: int) -> tuple[BoxStatus, int]:
        """A box of ``picture``: its status after ``step`` events, and how many of its nodes
        have run."""
        if self._timed != len(self.trace.events):  # a live trace grew: read what is new
            self._timed = _times(self.trace, self.task, self._times, self._timed)
        cached = picture.times.get(item.index)
        if cached is None or cached[0] != self._timed:
            cached = self._box_times(picture, item, self._timed)
        starts, ends, fails = cached[1]
        failed = bisect.bisect_right(fails, step)
        ended = bisect.bisect_right(ends, step)
        started = bisect.bisect_right(starts, step)
        if failed:
            return BoxStatus.FAILED, ended
        if item.runs and ended >= item.runs:
            return BoxStatus.DONE, ended
        if not started:
            return BoxStatus.NOT_STARTED, ended
        return BoxStatus.RUNNING, ended

    def _box_times(
        self, picture: Picture, item: Item, timed: int
    ) -> tuple[int, tuple[list[int], ...]]:
        """Keep in ``picture`` the sorted steps at which ``item``'s nodes started, ended and
        failed, read from the first ``timed`` events."""
        sort = tuple(sorted(t.get(m, _NEVER) for m in item.members) for t in self._times)
        picture.times[item.index] = (timed, sort)
        return timed, sort

    def resolve(self, text: str) -> Target:
        """What ``text`` names in the task (see :class:`~autograd_viz.draw.model.targets.Names`).

        Raises:
            GraphViewError: it names nothing.
        """
        return self.names.resolve(text)


def _known(choice: Choice) -> tuple[object, ...]:
    """What a drawn view is kept by: its open calls, unfolded folds, held repetitions and the
    parts of folds drawn by status."""
    return (
        choice.open,
        choice.unfolded,
        frozenset(choice.held.items()),
        frozenset(choice.parts.items()),
    )


def _spans(
    pictures: Pictures, times: tuple[dict[int, int], ...]
) -> list[tuple[int, int, int, int]]:
    """For each module call of ``pictures``' tree: the step its first node started, the step
    its last node that runs ended, the step its first node failed (:data:`_NEVER` for
    none), and how many of its nodes run (pruned ones never do)."""
    starts, ends, fails = times
    tree, view, nodes = pictures.tree, pictures.view, pictures.task.nodes
    spans = [[_NEVER, -1, _NEVER, 0] for _ in tree.scopes]
    for scope in tree.scopes:
        span = spans[scope.index]
        for key in scope.nodes:
            node = view.nodes[key].info.id
            span[0] = min(span[0], starts.get(node, _NEVER))
            span[2] = min(span[2], fails.get(node, _NEVER))
            if nodes[node].status == "needed":
                span[1] = max(span[1], ends.get(node, _NEVER))
                span[3] += 1
    for scope in reversed(tree.scopes):  # children after their parents
        if scope.parent is not None:
            inner, outer = spans[scope.index], spans[scope.parent]
            outer[0], outer[2] = min(outer[0], inner[0]), min(outer[2], inner[2])
            outer[1], outer[3] = max(outer[1], inner[1]), outer[3] + inner[3]
    return [(a, b, c, d) for a, b, c, d in spans]


def _cut(view: GraphView, centre: str | None) -> GraphView:
    """At most :data:`MAX_BOXES` labels of ``view``: the nearest ``centre``, else the root's."""
    if len(view.nodes) <= MAX_BOXES:
        return view
    if centre is not None:
        target = Target(centre, "node", (centre,))
        for depth in (24, 12, 6, 3, 1):
            near = select.around(view, target, depth)
            if len(near.nodes) <= MAX_BOXES:
                return near
    return select.limit(view, MAX_BOXES)


BOX_GLYPHS = {
    BoxStatus.NOT_STARTED: NodeStatus.WAITING,
    BoxStatus.RUNNING: NodeStatus.RUNNING,
    BoxStatus.DONE: NodeStatus.DONE,
    BoxStatus.FAILED: NodeStatus.FAILED,
}
"""The node status whose glyph and colour a box takes."""


def box_text(item: Item) -> str:
    """A box's name as drawn: cut at its start to :data:`NAME_ROOM` (a module path's last
    parts say the most: ``…h.3.attn.c_attn``), with its count."""
    name = cut_front(item.name, NAME_ROOM)
    return f"{name} ×{item.count}" if item.count > 1 else name


def _size(item: Item) -> tuple[int, int]:
    """Columns and rows of an item: a node's label, or a box's label in its rectangle
    (Note [Boxes and frames] in :mod:`~autograd_viz.tui.canvas`)."""
    if item.node is not None:
        return label_width(item.node), 1
    digits = len(str(item.runs))
    line = 2 + cell_len(box_text(item)) + 1 + 2 * digits + 1 + 1  # "○ name 3/40 ", see canvas
    return 2 + line + 1, 3  # "│ " before it, "│" after


def _order(item: Item) -> int:
    return item.node.sequence_nr if item.node is not None else 0


def _times(trace: Trace, task: GraphTaskInfo, times: tuple[dict[int, int], ...], start: int) -> int:
    """Add to ``times`` (started, ended, failed) the step at which each node of ``task`` did it,
    from the events from ``start`` on; returns how many events have been read."""
    starts, ends, fails = times
    events = trace.events
    end = len(events)
    for index in range(start, end):
        event = events[index]
        if event.graph_task != task.id or event.node_id is None:
            continue
        if event.kind == "node_start":
            starts.setdefault(event.node_id, index + 1)
        elif event.kind == "node_end":
            ends.setdefault(event.node_id, index + 1)
        elif event.kind in ("error", "anomaly"):
            fails.setdefault(event.node_id, index + 1)
    return end


__all__ = ["BOX_GLYPHS", "NAME_ROOM", "Item", "Picture", "Pictures", "box_text"]
