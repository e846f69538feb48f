"""``dot`` of a trace recorded with ``grads -o``: leaves without gradient marked, the cut drawn as
a dashed edge labelled with its line (Note [Leaves without gradient in a picture])."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from grads_programs import marked_line, write

from autograd_viz import to_dot
from autograd_viz.cli.main import main
from autograd_viz.trace import Trace
from tests.viz.dotting import drawn_edges, needs_dot, svg_groups, svg_text, svg_tree

pytestmark = pytest.mark.oracle


@pytest.fixture
def all_reasons(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[Path, Path]:
    script = write(tmp_path, "all")
    trace = tmp_path / "all.jsonl"
    assert main(["grads", "-o", str(trace), str(script), "-"]) == 1
    capsys.readouterr()
    return script, trace


def _boxes(source: str) -> dict[str, str]:
    """Every box line of the DOT source, by key."""
    out = {}
    for line in source.splitlines():
        match = re.match(r"^\s*(\w+) \[label=(.*)\]$", line)
        if match:
            out[match.group(1)] = match.group(2)
    return out


def test_dot_marks_leaves_without_gradient_and_draws_the_cut(
    all_reasons: tuple[Path, Path],
) -> None:
    script, path = all_reasons
    trace = Trace.load(path)
    dot = to_dot(trace, expand="all")
    boxes = _boxes(dot.source)
    marked = {key: line for key, line in boxes.items() if 'class="leaf no-gradient"' in line}
    titles = {key: re.search(r"<B>(.*?)</B>", line).group(1) for key, line in marked.items()}
    # On the graph: the leaf whose gradient was all zeros keeps its box, marked.
    (dead,) = [k for k, t in titles.items() if t == "dead.weight"]
    assert "gradient all zeros" in marked[dead] and "ReluBackward0" in marked[dead]
    assert 'style="filled,dashed"' in marked[dead]
    healthy = [line for line in boxes.values() if "<B>head.weight</B>" in line]
    assert healthy and "no-gradient" not in healthy[0]
    # Off the graph: one box per reason and line, hung from the root on a dashed edge.
    (cutter,) = [k for k, t in titles.items() if t.startswith("cutter.weight")]
    assert titles[cutter] == "cutter.weight, cutter.bias"
    assert "no gradient (cut)" in marked[cutter] and "cut by .detach()" in marked[cutter]
    edges = {head: attrs for _, head, attrs in drawn_edges(dot)}
    cut_line = marked_line(script, "cut")
    assert f"cut at {script.name}:{cut_line}" in edges[cutter]
    assert "style=dashed" in edges[cutter] and "class=cut" in edges[cutter]
    (teacher,) = [k for k, t in titles.items() if t.startswith("teacher.")]
    assert f"used without grad at {script.name}:{marked_line(script, 'use')}" in edges[teacher]
    (aux,) = [k for k, t in titles.items() if t.startswith("aux.")]
    assert "never reaches the loss" in edges[aux]
    root = {tail for tail, head, _ in drawn_edges(dot) if head == cutter}
    (info,) = [i for i in trace.graph_tasks.values() if i.call == 2]
    assert root == {"n0"} and next(iter(info.nodes)) == info.root  # the root's key is n0
    assert "leaf that got no gradient" in dot.source  # the legend says what the mark is


def test_a_trace_without_findings_draws_no_mark(
    torch: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plain.jsonl"
    assert main(["record", "-o", str(path), str(write(tmp_path, "all")), "-"]) == 0
    capsys.readouterr()
    source = to_dot(Trace.load(path), expand="all").source
    assert "no-gradient" not in source and "class=cut" not in source


@needs_dot
def test_marks_in_the_svg_show_names_as_written(all_reasons: tuple[Path, Path]) -> None:
    _, path = all_reasons
    name = 'cut"<b>&\\N{x}'
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        item = json.loads(line)
        if item.get("kind") == "grads":
            for finding in item["data"]["findings"]:
                if finding["parameter"] == "cutter.weight":
                    finding["parameter"] = name
                    finding["where"]["file"] = f"/tmp/{name}.py"
            lines[i] = json.dumps(item)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    root = svg_tree(to_dot(Trace.load(path), expand="all"))
    nodes = [g for g in svg_groups(root, "no-gradient") if name in svg_text(g)]
    assert nodes, "the renamed parameter's box shows its name as written"
    (edge,) = [g for g in svg_groups(root, "cut") if name in svg_text(g)]
    assert f"cut at {name}.py:" in svg_text(edge)
