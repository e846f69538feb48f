"""The path from the loss to the first NaN: highlighted in DOT and in the TUI after ``a``."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from textual.pilot import Pilot

import autograd_viz
import engine
from autograd_viz.draw.render.dot import PATH_COLOR, PATH_NOTICE
from autograd_viz.nan.report import path_from_root
from autograd_viz.nan.scan import find_nans
from autograd_viz.trace import Trace
from autograd_viz.tui.dag import DagView
from tests.viz.tui.tuiting import (
    export_via_prompt,
    node_list,
    replay_app,
    run_app,
    stepped_trace,
)


def two_branches() -> None:
    """A log of 0 on one branch of the loss; the other branch stays finite."""
    with engine.detect_anomaly(check_inf=True, check_forward=True, mode="collect"):
        x = engine.tensor([0.0, 1.0], requires_grad=True, name="x")
        w = engine.tensor([2.0, 3.0], requires_grad=True, name="w")
        with np.errstate(all="ignore"):
            loss = (x.log() * 2.0).sum() + (w * w).sum()
            loss.backward()


@pytest.fixture
def trace() -> Trace:
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        return stepped_trace(two_branches)


def first_path(trace: Trace) -> tuple[int, ...]:
    report = find_nans(trace)
    assert report.first is not None and report.first.node.name == "LogBackward0"
    return tuple(ref.id for ref in report.path)


def test_to_dot_draws_the_path_in_thick_red_and_nothing_else(trace: Trace) -> None:
    path = first_path(trace)
    source = autograd_viz.to_dot(trace, highlight=path).source
    red_edges = [line for line in source.splitlines() if "->" in line and PATH_COLOR in line]
    assert len(red_edges) == len(path) - 1
    names = [trace.graph_tasks[min(trace.graph_tasks)].nodes[i].name for i in path]
    for line, (tail, head) in zip(red_edges, itertools.pairwise(names), strict=True):
        assert f"of {tail} → input" in line and f"of {head}" in line
    red_nodes = [line for line in source.splitlines() if "->" not in line and PATH_COLOR in line]
    assert len(red_nodes) == len(path)
    assert PATH_NOTICE in source
    plain = autograd_viz.to_dot(trace).source
    assert PATH_COLOR not in plain and PATH_NOTICE not in plain


def test_jump_to_first_anomaly_highlights_the_path_and_the_export_keeps_it(
    trace: Trace, tmp_path: Path
) -> None:
    path = first_path(trace)
    task = trace.graph_tasks[min(trace.graph_tasks)]
    assert path == tuple(ref.id for ref in path_from_root(task, path[-1]))
    app = replay_app(trace)
    exported = tmp_path / "nan.dot"

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("a")
        assert app.path == path
        nodes = node_list(app)
        marked = {
            row.node_id
            for i, row in enumerate(nodes.rows)
            if row.node_id is not None and nodes.row_text(i).plain.startswith("»")
        }
        assert marked == set(path)
        await pilot.press("v", "v")  # the drawn DAG underlines the path's labels
        drawn = app.query_one(DagView)._drawn_rows
        underlined = sum(1 for row in drawn for span in row.spans if "underline" in str(span.style))
        assert underlined == len(path)
        await export_via_prompt(pilot, str(exported))

    run_app(app, actions)
    source = exported.read_text()
    assert sum(1 for line in source.splitlines() if "->" in line and PATH_COLOR in line) == (
        len(path) - 1
    )
