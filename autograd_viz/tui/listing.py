"""What the node list shows: a graph task's rows in each view, and how a row is written.

A :class:`Listing` is one view's rows of one graph task (a tuple per row, with
the row of each node and the rows' column format), made once: it only reads
the graph task, so a thread can make it (see Note [A big listing is made in a
thread] in :mod:`autograd_viz.tui.nodes`). What a row says about its node
(status, dependencies left) is read from the current state when it is drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import groupby

from rich.text import Text

from autograd_viz.draw.model.folds import FoldGroup
from autograd_viz.draw.model.graph_view import from_graph
from autograd_viz.draw.model.tree import ModuleTree, Scope, kind_shown
from autograd_viz.trace import GraphTaskInfo, NodeInfo, paused_gc
from autograd_viz.trace.records import UnrunGraph
from autograd_viz.trace.replay import NodeState
from autograd_viz.trace.text import printable
from autograd_viz.tui.styled import (
    NON_FINITE_STYLE,
    PATH_STYLE,
    cut_dotted,
    non_finite,
    sequence_nr,
    short_name,
    shown_name,
    status_text,
)

MAX_INDENT = 16
"""Tree rows deeper than this are drawn at this depth with their depth written out."""


@dataclass(frozen=True, slots=True)
class Row:
    """One row of the node list: a node, or a heading over a group of nodes."""

    node_id: int | None
    """The node shown; ``None`` for a heading."""
    depth: int = 0
    """Depth in the tree view."""
    heading: str = ""
    """A heading's text."""
    prefix: str = ""
    """Tree guides drawn before the node."""
    repeat: bool = False
    """The node already appears above (the tree view shows a DAG's shared nodes once)."""
    scope: int | None = None
    """The module call a heading stands for (a :attr:`ModuleTree.scopes` index)."""
    group: int | None = None
    """The fold a heading stands for (a :attr:`ModuleTree.groups` index)."""
    is_open: bool = False
    """A call's or fold's heading: what it holds is listed below it."""


def topo_rows(task: GraphTaskInfo) -> list[Row]:
    """Nodes grouped by topological number, the root's group first; by sequence number inside."""
    order = sorted(task.nodes.values(), key=lambda n: (-n.topological_nr, -n.sequence_nr, n.id))
    rows: list[Row] = []
    for topo, group in groupby(order, key=lambda n: n.topological_nr):
        members = list(group)
        count = f"{len(members)} node{'s' if len(members) != 1 else ''}"
        rows.append(Row(None, heading=f"topological_nr {topo} · {count}"))
        rows.extend(Row(node.id) for node in members)
    return rows


def tree_rows(task: GraphTaskInfo) -> list[Row]:
    """The graph depth-first from the root; a node reached again is a one-line reference."""
    nodes = task.nodes
    rows: list[Row] = []
    seen: set[int] = set()
    # (node id, depth, guides above, is last child)
    stack: list[tuple[int, int, str, bool]] = [(task.root, 0, "", True)]
    while stack:
        node_id, depth, guides, last = stack.pop()
        branch = "" if depth == 0 else ("└─" if last else "├─")
        shown = guides if depth <= MAX_INDENT else guides[: 2 * MAX_INDENT]
        if node_id in seen:
            rows.append(Row(node_id, depth, prefix=shown + branch, repeat=True))
            continue
        seen.add(node_id)
        rows.append(Row(node_id, depth, prefix=shown + branch))
        info = nodes.get(node_id)
        if info is None:
            continue
        children = [edge[0] for edge in info.next_edges if edge is not None and edge[0] in nodes]
        below = guides + ("" if depth == 0 else ("  " if last else "│ "))
        for i in range(len(children) - 1, -1, -1):
            stack.append((children[i], depth + 1, below, i == len(children) - 1))
    return rows


class Opened:
    """Which module calls and folds of a tree listing are open (Note [Tree rows open and close]).

    Args:
        tree: the graph task's module tree.
    """

    def __init__(self, tree: ModuleTree) -> None:
        self.tree = tree
        """The module tree listed."""
        self.opened: set[int] = set()
        """Calls opened with Enter (by scope index) that are closed by default (a fold's)."""
        self.shut: set[int] = set()
        """Calls closed with Enter that are open by default."""
        self.unfolded: set[int] = set()
        """Fold groups opened with Enter: their calls listed, one row each."""
        self.revealed: frozenset[int] = frozenset()
        """The calls around the node selected last, open whatever Enter said."""
        self.revealed_folds: frozenset[int] = frozenset()
        """The fold groups holding those calls, listed as their calls."""

    def is_open(self, scope: int) -> bool:
        """Whether call ``scope`` lists what it holds."""
        if scope in self.revealed:
            return True
        if scope in self.shut:
            return False
        return scope in self.opened or scope not in self.tree.folded

    def is_unfolded(self, group: int) -> bool:
        """Whether fold ``group`` lists its calls."""
        return group in self.unfolded or group in self.revealed_folds

    def toggle_scope(self, scope: int) -> None:
        """Close call ``scope`` if it is open, else open it (its own nodes and calls)."""
        if self.is_open(scope):
            self.opened.discard(scope)
            self.shut.add(scope)
            self.revealed -= {scope}
        else:
            self.shut.discard(scope)
            self.opened.add(scope)

    def toggle_fold(self, group: int) -> None:
        """Close fold ``group`` if it lists its calls, else list them."""
        if self.is_unfolded(group):
            self.unfolded.discard(group)
            self.revealed_folds -= {group}
            self.revealed -= set(self.tree.groups[group].scopes)
        else:
            self.unfolded.add(group)

    def reveal(self, key: str) -> bool:
        """Open the calls around node ``key`` (closing those the last reveal opened); ``False``
        when the node is made outside every call."""
        scope = self.tree.scope_of.get(key)
        if scope is None:
            return False
        around = self.tree.ancestors(scope)
        self.revealed = frozenset(around)
        group_of = self.tree.group_of
        self.revealed_folds = frozenset(group_of[i] for i in around if i in group_of)
        return True


# Note [Tree rows open and close]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The tree view lists the module calls as the pictures draw them: a run of
# alike calls (the folds of :mod:`~autograd_viz.draw.model.folds`, found with the
# graph's edges, so the list folds what the drawn DAG folds) is one row,
# ``layers.{0..11} · TransformerEncoderLayer × 12``, closed; the calls no fold
# holds are open. Enter on a call's or fold's row opens or closes it, and Enter
# on a node closes the call it was made in. A node the app selects (the step's,
# a found one) has the calls around it opened for as long as it is the last one
# selected that was hidden, as the drawn DAG opens the step's modules, so
# stepping through twelve layers lists one layer's nodes at a time.


def module_rows(
    tree: ModuleTree, ids: Mapping[str, int], opened: Opened | None = None
) -> list[Row]:
    """The model's module calls as a tree, each with the nodes made in it (see Note [Tree rows
    open and close]; with ``opened`` left out, everything is open).

    Nodes made outside every module (the loss, for one) come first; each call is a
    heading (its name as every view writes it, its class, how many nodes it holds)
    over its own nodes, then the calls made inside it, in forward order; a fold is
    one heading over its calls.
    """
    rows = [Row(ids[key]) for key in tree.outside]
    # (scope or fold, depth, guides above, is last among its siblings)
    top = tree.items.get(None, ())
    stack: list[tuple[Scope | FoldGroup, int, str, bool]] = [
        (item, 0, "", i == 0) for i, item in enumerate(reversed(top))
    ]
    sizes = {g.index: sum(tree.scopes[i].size for i in g.scopes) for g in tree.groups}
    while stack:
        item, depth, above, last = stack.pop()
        prefix = above[: 2 * MAX_INDENT] + ("└─" if last else "├─")
        below = above + ("  " if last else "│ ")
        if isinstance(item, FoldGroup):
            unfolded = opened is None or opened.is_unfolded(item.index)
            shown_kind = kind_shown(item.name, item.kind)
            kind = f" · {printable(shown_kind)}" if shown_kind else ""
            count = _nodes(sizes[item.index])
            heading = f"{printable(item.name)} × {item.count}{kind} · {count}"
            rows.append(Row(None, depth, heading, prefix, group=item.index, is_open=unfolded))
            if unfolded:
                calls = [tree.scopes[i] for i in item.scopes]
                for i, call in enumerate(reversed(calls)):
                    stack.append((call, depth + 1, below, i == 0))
            continue
        scope = item
        is_open = opened is None or opened.is_open(scope.index)
        shown_kind = kind_shown(scope.name, scope.kind)
        kind = f" · {printable(shown_kind)}" if shown_kind else ""
        heading = f"{printable(scope.name)}{kind} · {_nodes(scope.size)}"
        rows.append(Row(None, depth, heading, prefix, scope=scope.index, is_open=is_open))
        if not is_open:
            continue
        inside = tree.items.get(scope.index, ())
        for position, key in enumerate(scope.nodes):
            end = position == len(scope.nodes) - 1 and not inside
            rows.append(Row(ids[key], depth + 1, prefix=below + ("└─" if end else "├─")))
        for i, child in enumerate(reversed(inside)):
            stack.append((child, depth + 1, below, i == 0))
    return rows


def _nodes(count: int) -> str:
    return "1 node" if count == 1 else f"{count:,} nodes"


def module_tree(task: GraphTaskInfo) -> tuple[ModuleTree, dict[str, int]]:
    """``task``'s module tree as the pictures make it (with the graph's edges, so the same
    calls fold), and each node's id by its key there."""
    view = from_graph(UnrunGraph(tuple(task.nodes.values()), (), task.modules))
    return ModuleTree.of_view(view), {key: node.info.id for key, node in view.nodes.items()}


def _row_of_node(rows: list[Row]) -> dict[int, int]:
    row_of_node: dict[int, int] = {}
    for i, row in enumerate(rows):
        if row.node_id is not None and not row.repeat:
            row_of_node.setdefault(row.node_id, i)
    return row_of_node


class Listing:
    """One view's rows of one graph task, made once, in any thread (it only reads the task).

    Args:
        task: the graph task listed.
        view: ``"topo"`` (grouped by topological_nr) or ``"tree"`` (the module tree; for
            a graph recorded without modules, the graph from the root).
    """

    def __init__(self, task: GraphTaskInfo, view: str) -> None:
        self.task = task
        """The graph task listed."""
        self.view = view
        """Which view's rows these are."""
        self.opened: Opened | None = None
        """Which calls and folds are open, in the module tree view (Note [Tree rows open and
        close]); ``None`` in the other views."""
        self._ids: dict[str, int] = {}
        self._key_of: dict[int, str] = {}
        with paused_gc():  # a row per node of a task that may hold 100,000 of them
            measured: list[Row]
            if view != "tree":
                rows = measured = topo_rows(task)
            else:
                tree, self._ids = module_tree(task)
                if tree.scopes:
                    self._key_of = {i: key for key, i in self._ids.items()}
                    self.opened = Opened(tree)
                    rows = module_rows(tree, self._ids, self.opened)
                    measured = module_rows(tree, self._ids)  # columns that stay put
                else:
                    rows = measured = tree_rows(task)
            # The columns fit every row a tree may list, so opening one moves none.
            measures = RowMeasures.of(task, measured)
        self.rows: list[Row] = rows
        """The rows, in order."""
        self.row_of_node: Mapping[int, int] = _row_of_node(rows)
        """Each node's first row (a tree lists a shared node again, as a reference)."""
        self._measures = measures
        self._format: tuple[int, RowFormat] | None = None
        self.width = max(
            measures.width(),
            max((len(r.prefix) + 3 + len(r.heading) for r in measured if r.heading), default=0),
        )
        """Columns the widest row takes written whole (every call open), guides included."""

    def toggle(self, row: int) -> int | None:
        """Enter on ``row`` of the module tree: open or close its call or fold, or close the
        call its node was made in; the row of what was opened or closed, ``None`` when the
        row has nothing to open or close."""
        opened = self.opened
        if opened is None or not 0 <= row < len(self.rows):
            return None
        entry = self.rows[row]
        if entry.group is not None:
            opened.toggle_fold(entry.group)
            return self._relist(lambda r: r.group == entry.group)
        if entry.scope is not None:
            opened.toggle_scope(entry.scope)
            return self._relist(lambda r: r.scope == entry.scope)
        key = self._key_of.get(entry.node_id) if entry.node_id is not None else None
        scope = opened.tree.scope_of.get(key) if key is not None else None
        if scope is None:
            return None
        opened.toggle_scope(scope)  # open: its node is listed in it
        return self._relist(lambda r: r.scope == scope)

    def reveal(self, node_id: int) -> bool:
        """List node ``node_id`` (opening the calls around it); ``False`` when it cannot be."""
        key = self._key_of.get(node_id)
        if self.opened is None or key is None or not self.opened.reveal(key):
            return False
        self._relist(lambda _: False)
        return node_id in self.row_of_node

    def _relist(self, found: Callable[[Row], bool]) -> int | None:
        assert self.opened is not None
        self.rows = module_rows(self.opened.tree, self._ids, self.opened)
        self.row_of_node = _row_of_node(self.rows)
        return next((i for i, row in enumerate(self.rows) if found(row)), None)

    def format(self, width: int) -> RowFormat:
        """The rows' format at ``width`` columns (kept for the last width asked)."""
        if self._format is None or self._format[0] != width:
            self._format = (width, self._measures.format(width))
        return self._format[1]


@dataclass(frozen=True, slots=True)
class RowFormat:
    """How the node rows of one list are written at one width, in aligned columns.

    Every row keeps the name, seq, topo, deps (remaining/total) and device at
    any width: when the full rows do not fit, the facts are written shorter
    (``seq 3 topo 2`` without the double spaces, then ``s3 t2 d0/2``), then the
    names (``Mul`` for ``MulBackward0``), and only then are names cut with ``…``.
    """

    short_names: bool
    """Names without ``Backward0`` (``Acc(x)`` for an ``AccumulateGrad``)."""
    facts: int
    """0: ``  seq 3  topo 2  deps 0/2  cpu``; 1: single spaces; 2: ``s3 t2 d0/2 cpu``."""
    left: int
    """Columns for everything before the facts (guides, marks, name, id)."""
    columns: tuple[int, int, int]
    """Widths of the seq, topo and deps values."""
    guides: int = 32
    """Columns for a tree row's guides; deeper rows are cut with their depth written out."""


_FACTS = (
    ("  seq ", "  topo ", "  deps ", "  "),
    (" seq ", " topo ", " deps ", " "),
    (" s", " t", " d", " "),
)
_HEAD = 4
"""Columns before a node's name: a mark (breakpoint, path), the status glyph, a space."""


def guides(row: Row, room: int) -> str:
    """A tree row's guides, cut to ``room`` columns (the depth written out when cut)."""
    deep = row.depth > MAX_INDENT
    if len(row.prefix) <= room and not deep:
        return row.prefix
    tag = f"[{row.depth}] "
    return tag + row.prefix[max(0, len(row.prefix) - max(0, room - len(tag))) :]


def row_name(info: NodeInfo, short: bool) -> str:
    """The name a row gives a node: ``AccumulateGrad(x)`` or ``Acc(x)`` for a named leaf."""
    if short:
        return short_name(info)
    leaf = info.leaf.name if info.leaf is not None and info.leaf.name else ""
    return f"{shown_name(info.name)}({shown_name(leaf)})" if leaf else shown_name(info.name)


def row_format(task: GraphTaskInfo, rows: list[Row], width: int) -> RowFormat:
    """The widest :class:`RowFormat` whose rows fit in ``width`` columns (see there)."""
    return RowMeasures.of(task, rows).format(width)


@dataclass(frozen=True, slots=True)
class RowMeasures:
    """What the format of a list's rows depends on, measured once over all of them.

    A row's name depends only on its node's name and leaf's name, and its guides'
    width at any width only on its prefix's length and its depth; a graph task of
    100,000 nodes has a few dozen of each. Each is kept once, with the widest id of
    the rows that have it, so that a format at a new width (the list resized, a
    scroll bar come) costs nothing like a pass over the rows.
    """

    columns: tuple[int, int, int, int, int]
    """Widths of the seq, topo, deps and device values and of `` #id``."""
    shapes: tuple[tuple[NodeInfo, Row, int], ...]
    """For each name and shape of guides: a node with that name, a row with those
    guides, and the widest `` #id`` of the rows with both."""

    @classmethod
    def of(cls, task: GraphTaskInfo, rows: list[Row]) -> RowMeasures:
        """Measure ``rows`` of ``task``."""
        nodes = task.nodes
        infos = [nodes[row.node_id] for row in rows if row.node_id is not None]
        seq = max((len(sequence_nr(v)) for v in {i.sequence_nr for i in infos}), default=1)
        topo = max((len(str(v)) for v in {i.topological_nr for i in infos}), default=1)
        deps = max((2 * len(str(v)) + 1 for v in {i.dependencies for i in infos}), default=3)
        device = max((len(printable(d)) for d in {i.device for i in infos}), default=3)
        ident = max((len(f" #{i.id}") for i in infos), default=3)
        shapes: dict[tuple[str, str | None, int, int], tuple[NodeInfo, Row, int]] = {}
        for row in rows:
            if row.node_id is None or row.repeat:
                continue
            info = nodes[row.node_id]
            leaf = info.leaf.name if info.leaf is not None else None
            key = (info.name, leaf, len(row.prefix), row.depth)
            wide = len(f" #{row.node_id}")
            seen = shapes.get(key)
            if seen is None or wide > seen[2]:
                shapes[key] = (info, row, wide)
        return cls((seq, topo, deps, device, ident), tuple(shapes.values()))

    def format(self, width: int) -> RowFormat:
        """The widest :class:`RowFormat` whose rows fit in ``width`` columns."""
        seq, topo, deps, device, ident = self.columns
        shortest = sum(len(label) for label in _FACTS[-1]) + seq + topo + deps + device
        room = max(4, min(width // 3, width - shortest - _HEAD - ident - 10))
        lefts = self._name_columns(room)
        for facts, labels in enumerate(_FACTS):
            tail = sum(len(label) for label in labels) + seq + topo + deps + device
            for short in (False, True):
                left = lefts[short]
                if left + tail <= width:
                    return RowFormat(short, facts, left, (seq, topo, deps), room)
        return RowFormat(True, 2, max(_HEAD + 4, width - tail), (seq, topo, deps), room)

    def width(self) -> int:
        """Columns the widest row takes in the widest format (guides up to their most)."""
        seq, topo, deps, device, _ = self.columns
        tail = sum(len(label) for label in _FACTS[0]) + seq + topo + deps + device
        return self._name_columns(2 * MAX_INDENT)[False] + tail

    def _name_columns(self, room: int) -> dict[bool, int]:
        """Columns for the widest row's guides, marks, name and id, with full and short names."""
        return {
            short: max(
                (
                    len(guides(row, room)) + _HEAD + wide + len(row_name(info, short))
                    for info, row, wide in self.shapes
                ),
                default=0,
            )
            for short in (False, True)
        }


def node_row(
    info: NodeInfo,
    state: NodeState | None,
    breakpoint_: bool,
    *,
    on_path: bool = False,
    fmt: RowFormat | None = None,
    prefix: int = 0,
    flagged: bool = False,
) -> Text:
    """``● MulBackward0 #7  seq 3  topo 2  deps 0/2  cpu``, with a breakpoint dot.

    ``fmt`` says how to write it (the full form without one); ``prefix`` is
    how many columns of tree guides come before the row. ``flagged``: anomaly
    mode reported the node (its forward output or a gradient is NaN or Inf).
    """
    fmt = fmt or RowFormat(False, 0, 0, (1, 1, 1))
    text = Text()
    if breakpoint_:
        text.append("⏺ ", style="bold red")
    else:
        text.append("» " if on_path else "  ", style=f"bold {PATH_STYLE}")
    text.append_text(status_text(state.status if state is not None else "not started"))
    if flagged or (state is not None and non_finite(state)):
        text.append("⚠", style=NON_FINITE_STYLE)
    text.append(" ")
    ident = f" #{info.id}"
    name = row_name(info, fmt.short_names)
    room = fmt.left - prefix - text.cell_len - len(ident)
    if room < len(name):
        base, paren, leaf = name.partition("(")
        if paren and room >= len(leaf) + 2:  # keep a leaf's name whole, cut the node's
            name = base[: room - len(leaf) - 2] + "…(" + leaf
        elif paren and room >= len(base) + 4:  # keep the node's, shorten the leaf's by its parts
            name = f"{base}({cut_dotted(leaf.removesuffix(')'), room - len(base) - 2)})"
        else:
            name = name[: max(1, room - 1)] + "…"
    name_style = "bold" if state is not None and state.status == "running" else ""
    base, paren, leaf = name.partition("(")
    text.append(base, style=name_style)
    if paren:
        text.append(paren + leaf, style="cyan")
    text.append(ident, style="dim")
    text.pad_right(max(0, fmt.left - prefix - text.cell_len))
    remaining = state.remaining if state is not None else info.dependencies
    seq_w, topo_w, deps_w = fmt.columns
    seq_label, topo_label, deps_label, device_label = _FACTS[fmt.facts]
    text.append(f"{seq_label}{sequence_nr(info.sequence_nr):<{seq_w}}")
    text.append(f"{topo_label}{info.topological_nr:<{topo_w}}")
    deps = f"{remaining}/{info.dependencies}"
    text.append(f"{deps_label}{deps:<{deps_w}}", style="yellow" if remaining else "")
    text.append(f"{device_label}{printable(info.device)}", style="dim")
    return text
