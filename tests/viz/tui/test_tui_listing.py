"""The node list's rows: made once per graph task and view, in a thread for a big task."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from textual.pilot import Pilot

import autograd_viz
from autograd_viz.trace import GraphTaskInfo, Trace
from autograd_viz.tui import nodes as node_list_module
from autograd_viz.tui.listing import MAX_INDENT, Listing, Row, guides
from tests.viz.tui.test_tui_modules import blocks
from tests.viz.tui.tuiting import inspector, node_list, replay_app, run_app


@pytest.fixture(scope="module")
def trace() -> Trace:
    with autograd_viz.record() as recorded:
        blocks(12)
    return recorded


def only_task(trace: Trace) -> GraphTaskInfo:
    (task,) = trace.graph_tasks.values()
    return task


def test_switching_views_back_keeps_the_rows_made_the_first_time(trace: Trace) -> None:
    app = replay_app(trace)
    task = only_task(trace)

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("n", "n")
        nodes = node_list(app)
        topo = nodes.listing
        assert topo is not None and topo.rows == Listing(task, "topo").rows
        await pilot.press("v")
        tree = nodes.listing
        assert tree is not None and tree.rows == Listing(task, "tree").rows
        assert any(row.heading.startswith("model") for row in tree.rows)
        await pilot.press("v", "v")  # the drawn DAG, then the topo list again
        assert nodes.listing is topo
        await pilot.press("v")
        assert nodes.listing is tree

    run_app(app, actions)


def test_a_big_graph_task_is_listed_in_a_thread_and_the_node_chosen_meanwhile_kept(
    trace: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_list_module, "LATER_NODES", 10)
    release = threading.Event()
    made: list[str] = []

    class HeldListing(Listing):
        def __init__(self, task: GraphTaskInfo, view: str) -> None:
            assert threading.current_thread() is not threading.main_thread()
            release.wait(10)
            super().__init__(task, view)
            made.append(view)

    monkeypatch.setattr(node_list_module, "Listing", HeldListing)
    app = replay_app(trace)
    task = only_task(trace)
    chosen = max(task.nodes)

    async def actions(pilot: Pilot[Any]) -> None:
        nodes = node_list(app)
        await pilot.press("s", "j")  # keys are answered while the rows are being made
        assert nodes.listing is None and nodes.selected is None
        assert nodes.row_count == 1
        assert nodes.row_text(0).plain == f"listing {len(task.nodes):,} nodes…"
        assert nodes.select(chosen)
        release.set()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert made == ["topo", "tree"]  # the view shown first, then the other one
        assert nodes.selected == chosen
        assert nodes.rows == Listing(task, "topo").rows
        assert f"#{chosen}" in inspector(app)  # the inspector follows the selection
        await pilot.press("v")  # made already: shown at once, the node still selected
        assert nodes.view == "tree" and nodes.listing is not None
        assert nodes.rows == Listing(task, "tree").rows
        assert nodes.selected == chosen
        assert made == ["topo", "tree"]

    run_app(app, actions)


@pytest.mark.parametrize("room", [8, 12, 32, 40, 60])
def test_a_row_deeper_than_the_indent_keeps_the_end_of_its_guides(room: int) -> None:
    prefix = "│ " * MAX_INDENT + "├─"
    shown = guides(Row(1, MAX_INDENT + 4, prefix=prefix), room)
    tag = f"[{MAX_INDENT + 4}] "
    assert shown.startswith(tag) and shown.endswith("├─")
    assert len(shown) <= max(room, len(tag) + 2)
    assert prefix.endswith(shown[len(tag) :])
    assert len(shown) == len(tag) + min(len(prefix), max(0, room - len(tag)))
