"""The TUI at the sizes people run it: 80×24, 120×40 (the common one) and 160×48."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from textual.pilot import Pilot

from autograd_viz.trace import NodeInfo, Trace
from autograd_viz.tui.nodes import NodeList, row_name
from autograd_viz.tui.text import sequence_nr
from engine import graph
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
