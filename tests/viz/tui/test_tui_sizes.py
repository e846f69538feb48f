"""The TUI at the sizes people run it: 80×24, 120×40 (the common one) and 160×48."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from textual.pilot import Pilot

from autograd_viz.trace import GraphTaskInfo, NodeInfo, Trace
from autograd_viz.trace.recording import record
from autograd_viz.trace.text import printable
from autograd_viz.tui import listing as node_rows
from autograd_viz.tui.listing import Row, RowFormat, row_format, row_name
from autograd_viz.tui.nodes import NodeList
from autograd_viz.tui.styled import sequence_nr
from engine import graph, tensor
from tests.viz.tui.tuiting import demo_trace, node_list, replay_app, run_app

SIZES = [(80, 24), (120, 40), (160, 48)]


@pytest.fixture(scope="module")
def trace() -> Trace:
    # Node ids from 1, whatever ran before: rows are cut to the widget's width, and the ids that
    # a long test session reaches (seven digits) would cut the leaf names these tests look for.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graph, "_node_ids", itertools.count(1))
        return demo_trace()


def drawn_row(nodes: NodeList, row: int) -> str:
    """Row ``row`` of the list as it is drawn: cut to the widget's width."""
    text = nodes.row_text(row)
    text.truncate(nodes.row_width, overflow="ellipsis")
    return text.plain


def shows_name(info: NodeInfo, row: str) -> bool:
    """The row names the node: in full, shortened (``Mul``), or cut with an ellipsis."""
    names = [row_name(info, short=False), row_name(info, short=True)]
    if any(re.search(rf"(?<!\S){re.escape(name)} #{info.id}\b", row) for name in names):
        return True
    cut = re.search(rf"(\S*)…(\S*) #{info.id}\b", row)
    return cut is not None and any(
        name.startswith(cut.group(1)) and name.endswith(cut.group(2)) for name in names
    )


def check_rows(nodes: NodeList, task_nodes: dict[int, NodeInfo]) -> None:
    state = nodes.state
    assert state is not None and nodes.shown_task is not None
    for i, entry in enumerate(nodes.rows):
        if entry.node_id is None or entry.repeat:
            continue
        info = task_nodes[entry.node_id]
        row = drawn_row(nodes, i)
        assert "…" not in row[-3:], f"row cut at the end: {row!r}"
        assert shows_name(info, row), row
        remaining = state.node(info.id, nodes.shown_task.id).remaining
        seq = sequence_nr(info.sequence_nr)
        assert re.search(rf"\bs(?:eq )?{re.escape(seq)}(?!\S)", row), row
        assert re.search(rf"\bt(?:opo )?{info.topological_nr}\b", row), row
        assert re.search(rf"\bd(?:eps )?{remaining}/{info.dependencies}\b", row), row
        assert row.rstrip().endswith(info.device), row


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_node_rows_show_name_seq_topo_deps_and_device(trace: Trace, size: tuple[int, int]) -> None:
    app = replay_app(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        nodes = node_list(app)
        for task_id in trace.graph_tasks:
            # halfway through the task, where some dependencies have arrived and some not
            events = [e for e in trace.events if e.graph_task == task_id]
            app.driver.goto(events[len(events) // 2].index + 1)
            app.pinned_task = task_id
            app.refresh_view()
            await pilot.pause()
            check_rows(nodes, trace.graph_tasks[task_id].nodes)
            await pilot.press("v")  # the tree view
            check_rows(nodes, trace.graph_tasks[task_id].nodes)
            await pilot.press("v", "v")  # the drawn DAG, then back to the list

    run_app(app, actions, size=size)


@pytest.mark.parametrize(("view", "size"), [("topo", (120, 40)), ("tree", (160, 48))])
def test_leaf_names_follow_their_accumulate_grad(
    trace: Trace, view: str, size: tuple[int, int]
) -> None:
    app = replay_app(trace)
    task = trace.graph_tasks[min(trace.graph_tasks)]
    leaves = {i.id: i.leaf.name for i in task.nodes.values() if i.leaf and i.leaf.name}
    assert leaves

    async def actions(pilot: Pilot[Any]) -> None:
        app.pinned_task = task.id
        app.refresh_view()
        await pilot.pause()
        nodes = node_list(app)
        if view == "tree":
            await pilot.press("v")
        assert nodes.view == view
        rows = {
            e.node_id: drawn_row(nodes, i)
            for i, e in enumerate(nodes.rows)
            if e.node_id in leaves and not e.repeat
        }
        for node_id, name in leaves.items():
            assert f"({name}) #{node_id}" in rows[node_id]

    run_app(app, actions, size=size)


def widest_fitting_format(task: GraphTaskInfo, rows: list[Row], width: int) -> RowFormat:
    """:func:`row_format` by its definition: each format in turn, every row measured."""
    infos = [task.nodes[row.node_id] for row in rows if row.node_id is not None]
    seq = max((len(sequence_nr(i.sequence_nr)) for i in infos), default=1)
    topo = max((len(str(i.topological_nr)) for i in infos), default=1)
    deps = max((2 * len(str(i.dependencies)) + 1 for i in infos), default=3)
    device = max((len(printable(i.device)) for i in infos), default=3)
    ident = max((len(f" #{i.id}") for i in infos), default=3)
    labels = node_rows._FACTS
    head = node_rows._HEAD
    room = max(
        4,
        min(
            width // 3,
            width - sum(map(len, labels[-1])) - seq - topo - deps - device - head - ident - 10,
        ),
    )
    tail = 0
    for facts, words in enumerate(labels):
        tail = sum(map(len, words)) + seq + topo + deps + device
        for short in (False, True):
            left = max(
                (
                    len(node_rows.guides(row, room))
                    + head
                    + len(row_name(task.nodes[row.node_id], short))
                    + len(f" #{row.node_id}")
                    for row in rows
                    if row.node_id is not None and not row.repeat
                ),
                default=0,
            )
            if left + tail <= width:
                return RowFormat(short, facts, left, (seq, topo, deps), room)
    return RowFormat(True, 2, max(head + 4, width - tail), (seq, topo, deps), room)


def engine_tensor_chain() -> Trace:
    """A chain deeper than the tree view's indent, with named leaves of different lengths."""
    x = tensor([1.0], requires_grad=True, name="x")
    w = tensor([2.0], requires_grad=True, name="a much longer leaf name")
    h = x
    for _ in range(node_rows.MAX_INDENT + 4):
        h = h * w + x
    with record() as chain:
        h.sum().backward()
    return chain


def test_the_row_format_is_the_widest_whose_every_row_fits(trace: Trace) -> None:
    # row_format measures each distinct name once; every row must still be counted.
    chain = engine_tensor_chain()
    tasks = [*trace.graph_tasks.values(), *chain.graph_tasks.values()]
    for task in tasks:
        for rows in (node_rows.topo_rows(task), node_rows.tree_rows(task)):
            for width in range(8, 200, 3):
                assert row_format(task, rows, width) == widest_fitting_format(task, rows, width)
