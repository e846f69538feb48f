"""Finding a node by id or name, and exporting the step on screen."""

from __future__ import annotations

from collections.abc import Sequence

from autograd_viz.trace import GraphTaskInfo, NodeInfo, Trace
from autograd_viz.trace.replay import ExecutionState
from autograd_viz.trace.text import printable
from autograd_viz.tui.nodes import NodeList

EXPORT_MAX_NODES = 2000
"""Exports of bigger graph tasks keep this many nodes, breadth-first from the root."""


def matches(info: NodeInfo, query: str) -> bool:
    """Whether ``query`` names the node: its id (``12``, ``#12``), or part of its name or
    its leaf's name in any case.

    The text is taken as given, spaces and ``#`` included (a leaf may be called ``" w"``
    or ``"v#"``); ``/`` tries it again without the spaces when it finds nothing.
    """
    text = query.lower()
    number = text[1:] if text.startswith("#") else text
    if number.isdecimal():  # not isdigit: "²" is a digit int() refuses, and part of a name
        return info.id == int(number)
    names = [info.name]
    if info.leaf is not None and info.leaf.name:
        names.append(info.leaf.name)
    # As shown too: a view writes ESC as \x1b, and that is what one types back. A name
    # str.isprintable() passes has nothing printable() escapes: no second form to look in.
    return any(
        text in name.lower() or (not name.isprintable() and text in printable(name).lower())
        for name in names
    )


def find_next(
    trace: Trace, shown: GraphTaskInfo | None, nodes: NodeList, query: str
) -> tuple[int, int] | None:
    """The next node matching ``query``: ``(graph task, node id)``.

    The shown task is searched first, in the list's order, starting after the
    cursor and wrapping around (so repeating a search walks every match);
    then the other graph tasks in the order they started.
    """
    if shown is not None:
        rows = nodes.rows
        start = nodes.cursor + 1
        for offset in range(len(rows)):
            row = rows[(start + offset) % len(rows)]
            node_id = row.node_id
            if node_id is not None and not row.repeat and matches(shown.nodes[node_id], query):
                return shown.id, node_id
    for gid, task in trace.graph_tasks.items():
        if shown is not None and gid == shown.id:
            continue
        for info in task.nodes.values():
            if matches(info, query):
                return gid, info.id
    return None


def export_step(
    state: ExecutionState, graph_task: int | None, path: str, highlight: Sequence[int] = ()
) -> str:
    """Draw the step with Graphviz and write it; returns what was written, for a notice.

    Raises:
        ValueError: the suffix is not a format the exporter writes.
        GraphvizNotFoundError: the format needs ``dot`` and it is missing.
    """
    from autograd_viz.draw.render import dot

    dot.output_format(path)
    task = state.trace.graph_tasks.get(graph_task) if graph_task is not None else None
    size = len(task.nodes) if task is not None else 0
    limit = EXPORT_MAX_NODES if size > EXPORT_MAX_NODES else None
    graph = dot.to_dot(
        state, graph_task=graph_task, values=True, max_nodes=limit, highlight=highlight
    )
    drawn_otherwise: list[str] = []
    fmt = dot.save(graph, path, drawn_otherwise)
    cut = f" (first {EXPORT_MAX_NODES} of {size} nodes)" if limit else ""
    said = "".join(f"; {line}" for line in drawn_otherwise)
    shown = f"'{path}'" if path != path.strip() else path  # " x.svg" is not x.svg
    return f"step {state.step} written to {shown} as {fmt.upper()}{cut}{said}"
