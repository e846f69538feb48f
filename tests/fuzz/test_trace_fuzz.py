"""Trace files are untrusted input: mutated files load or are rejected, and every view copes.

A short campaign of :mod:`tests.fuzz.fuzzer` with a fixed seed, and the defects
longer campaigns found, each as a file of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autograd_viz.trace import Trace, TraceFormatError
from tests.fuzz.fuzzer import Tally, campaign, seed_files, views


def test_a_short_campaign_finds_nothing() -> None:
    tally: Tally = campaign(1000, seed=20261124, tui_every=500)
    assert tally.crashes == []
    assert tally.tried == 1000 and tally.loaded + tally.rejected == 1000
    assert tally.loaded > 50 and tally.rejected > 300  # it explores both sides


@pytest.fixture(scope="module")
def reentrant_records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in seed_files()["reentrant"].decode().splitlines()]


def _write(records: list[dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _nested(records: list[dict[str, Any]]) -> dict[str, Any]:
    return next(r for r in records if r["type"] == "graph_task" and r["parent"] is not None)


def test_a_graph_task_that_is_its_own_parent_is_rejected(
    reentrant_records: list[dict[str, Any]], tmp_path: Path
) -> None:
    # Drawing it walked up the parents forever.
    task = _nested(reentrant_records)
    task["parent"] = task["id"]
    with pytest.raises(TraceFormatError, match=r"names parent \d+, which did not start before"):
        Trace.load(_write(reentrant_records, tmp_path / "t.jsonl"))


def test_a_cycle_in_a_graph_tasks_edges_is_rejected(
    reentrant_records: list[dict[str, Any]], tmp_path: Path
) -> None:
    # The TUI's drawn graph looked up nodes along the cycle and crashed.
    nodes = [r for r in reentrant_records if r["type"] == "node"]
    leaf = next(n for n in nodes if not n["next_edges"])
    root = next(n for n in nodes if n["graph_task"] == leaf["graph_task"])
    leaf["next_edges"] = [[root["id"], 0]]
    with pytest.raises(TraceFormatError, match="close a cycle"):
        Trace.load(_write(reentrant_records, tmp_path / "t.jsonl"))


def test_a_graph_task_rooted_outside_its_nodes_is_rejected(
    reentrant_records: list[dict[str, Any]], tmp_path: Path
) -> None:
    # The TUI's node list started from the root and crashed with KeyError.
    next(r for r in reentrant_records if r["type"] == "graph_task")["root"] = 10**6
    with pytest.raises(TraceFormatError, match="starts from node 1000000, which is not among"):
        Trace.load(_write(reentrant_records, tmp_path / "t.jsonl"))


def test_the_seeds_load_and_go_through_every_view(tmp_path: Path) -> None:
    for name, data in seed_files().items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(data)
        views(Trace.load(path), tui=name == "reentrant")


def _with_shapes_one_too_long(value: Any) -> None:
    """Make every summary that keeps its values claim one element more than it holds."""
    if isinstance(value, dict):
        if isinstance(value.get("values"), list) and "shape" in value:
            value["shape"] = [len(value["values"]) + 1]
        for item in value.values():
            _with_shapes_one_too_long(item)
    elif isinstance(value, list):
        for item in value:
            _with_shapes_one_too_long(item)


def test_a_summary_whose_values_do_not_fill_its_shape_is_rejected(tmp_path: Path) -> None:
    # The NaN report reshaped the values to the shape and raised ValueError.
    records = [json.loads(line) for line in seed_files()["nan"].decode().splitlines()]
    for record in records:
        if record["type"] == "event":
            _with_shapes_one_too_long(record["data"])
    with pytest.raises(
        TraceFormatError, match=r"3 values for a tensor of shape \[4\], which has 4"
    ):
        Trace.load(_write(records, tmp_path / "t.jsonl"))


def test_an_edge_to_a_node_of_no_smaller_topological_nr_is_rejected(tmp_path: Path) -> None:
    # The TUI's drawn graph lays nodes out in layers by topological_nr, and an edge
    # from a leaf's AccumulateGrad up to a node above it crashed its routing.
    records = [json.loads(line) for line in seed_files()["plain"].decode().splitlines()]
    nodes = [r for r in records if r["type"] == "node"]
    leaf = next(n for n in nodes if n["name"] == "AccumulateGrad")
    above = next(  # on the other leaf's branch: no cycle, only the order is wrong
        n for n in nodes if n["topological_nr"] == 1 and [leaf["id"], 0] not in n["next_edges"]
    )
    leaf["next_edges"] = [[above["id"], 0]]
    with pytest.raises(TraceFormatError, match="an edge always goes to a smaller one"):
        Trace.load(_write(records, tmp_path / "t.jsonl"))
