"""Every string field of a trace is untrusted: listed once, and escaped in every output.

:data:`autograd_viz.trace.fields.TEXT_PATHS` lists a trace's free-text fields
(Note [Every string is untrusted]). These tests fail when a trace holds a
string field that is neither listed nor checked against a fixed set (a new
field added without thought), when the seeds leave a listed field out, and
when any listed field, made hostile, reaches an output unescaped: the NaN
report (the CLI, through Rich), the TUI (Textual), DOT and its HTML-like
labels, SVG, the HTML animation and its script, and the Perfetto timeline.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from autograd_viz import to_dot
from autograd_viz.draw.model.graph_view import GraphViewError
from autograd_viz.draw.render.animate import animate
from autograd_viz.nan.scan import find_nans
from autograd_viz.nan.text import print_report
from autograd_viz.timeline import to_chrome_trace
from autograd_viz.trace import Trace, TraceFormatError
from autograd_viz.trace.fields import TEXT_PATHS
from autograd_viz.tui import ReplayDriver, VizApp
from autograd_viz.tui.panels import inspect_node
from tests.fuzz.fields import Record, encode, replace_strings, seed_records, string_fields
from tests.hostile.names import ACTING
from tests.viz.dotting import needs_dot, svg_tree

PAYLOAD = "\x1b]0;owned\x07\x1b[5m[/bold][@click=app.quit]x[/]</script><b a=\"'&amp;\\N\u202e\x9b"
"""Terminal escapes, Rich and Textual markup, HTML, a DOT escape, a bidi override, a C1 CSI."""


def hostile(text: str) -> str:
    """``text`` wrapped in :data:`PAYLOAD`: the same text always becomes the same string,
    so names that must agree across records (a node's name in its events) still do."""
    return f"{PAYLOAD}{text}{PAYLOAD}"


def acting(text: str) -> list[str]:
    return sorted({hex(ord(c)) for c in ACTING if c in text})


@pytest.fixture(scope="module")
def seeds() -> dict[str, list[Record]]:
    return seed_records()


def _load(items: list[Record], tmp_path: Path, name: str = "t.jsonl") -> Trace:
    path = tmp_path / name
    path.write_bytes(encode(items))
    return Trace.load(path)


def test_every_string_field_is_listed_or_checked(
    seeds: dict[str, list[Record]], tmp_path: Path
) -> None:
    unlisted: dict[str, str] = {}
    for seed, items in seeds.items():
        for record in items:
            for field, _ in string_fields(record):
                if field not in TEXT_PATHS:
                    unlisted.setdefault(field, seed)
    accepted = []
    for field, seed in sorted(unlisted.items()):
        changed = [replace_strings(r, field, hostile) for r in seeds[seed]]
        try:
            _load(changed, tmp_path)
        except TraceFormatError:
            continue  # checked against a fixed set: a status, a kind, "nan" for a float
        accepted.append(field)
    assert accepted == [], (
        "string fields a trace may hold free text in, missing from "
        "autograd_viz.trace.fields.TEXT_PATHS (list them, and escape them in every output)"
    )


def test_the_seeds_hold_every_listed_field(seeds: dict[str, list[Record]]) -> None:
    found = {field for items in seeds.values() for r in items for field, _ in string_fields(r)}
    if "torch" not in seeds:
        pytest.skip("PyTorch is not installed: its fields have no seed")
    assert sorted(TEXT_PATHS - found) == []


def _all_hostile(items: list[Record]) -> list[Record]:
    return [
        replace_strings(r, None, lambda text: text)  # a copy
        if not any(f in TEXT_PATHS for f, _ in string_fields(r))
        else _replace_listed(r)
        for r in items
    ]


def _replace_listed(record: Record) -> Record:
    for field in {f for f, _ in string_fields(record) if f in TEXT_PATHS}:
        record = replace_strings(record, field, hostile)
    return record


@pytest.fixture(scope="module")
def hostile_traces(seeds: dict[str, list[Record]], tmp_path_factory: Any) -> dict[str, Trace]:
    tmp = tmp_path_factory.mktemp("hostile")
    return {name: _load(_all_hostile(items), tmp, f"{name}.jsonl") for name, items in seeds.items()}


SEEDS = [
    "hostile",
    "plain",
    "devices",
    "reentrant",
    "error",
    "grad_and_hooks",
    "nan",
    "torch",
    "rare",
]


def _trace(hostile_traces: dict[str, Trace], seed: str) -> Trace:
    if seed not in hostile_traces:
        pytest.skip(f"no {seed} seed (PyTorch is not installed)")
    return hostile_traces[seed]


def _steps(trace: Trace) -> list[int]:
    n = len(trace)
    return sorted({0, 1, n // 2, n})


@pytest.mark.parametrize("seed", SEEDS)
def test_the_nan_report_shows_every_field_as_text(
    seed: str, hostile_traces: dict[str, Trace]
) -> None:
    trace = _trace(hostile_traces, seed)
    out = io.StringIO()
    print_report(find_nans(trace), Console(file=out, width=200, color_system=None))
    assert acting(out.getvalue()) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_dot_keeps_every_field_inside_its_label(
    seed: str, hostile_traces: dict[str, Trace]
) -> None:
    trace = _trace(hostile_traces, seed)
    # level 1: a module's calls drawn as one box each; by default, modules open as clusters.
    for step, level in itertools.product(_steps(trace), (None, 1)):
        for gid in trace.graph_tasks:
            try:
                graph = to_dot(trace, step, graph_task=gid, values=True, saved=True, level=level)
            except GraphViewError:
                continue
            source = graph.source
            assert acting(source) == [], (step, gid)
            statements = [line.lstrip() for line in source.splitlines()]
            assert [s for s in statements if s.startswith("digraph")] == ["digraph backward {"]
            assert not [s for s in statements if s.startswith(("<", "x [", "b a="))]


@needs_dot
@pytest.mark.parametrize("seed", SEEDS)
def test_svg_shows_every_field_as_text(seed: str, hostile_traces: dict[str, Trace]) -> None:
    trace = _trace(hostile_traces, seed)
    for gid in trace.graph_tasks:
        root = svg_tree(to_dot(trace, len(trace), graph_task=gid, values=True, saved=True))
        assert acting("".join(root.itertext())) == []
        assert not [el for el in root.iter() if any("href" in k for k in el.attrib)]
        assert not [el for el in root.iter() if el.tag.split("}")[-1] in ("script", "b")]


@needs_dot
@pytest.mark.parametrize("seed", ["hostile", "torch", "rare"])
def test_the_animation_page_shows_every_field_as_text(
    seed: str, hostile_traces: dict[str, Trace], tmp_path: Path
) -> None:
    trace = _trace(hostile_traces, seed)
    out = tmp_path / "run.html"
    animate(trace, out, max_frames=3, title=trace.events[0].thread)
    page = out.read_text(encoding="utf-8")
    assert acting(page) == []
    assert "innerHTML" not in page
    head, rest = page.split('id="animation-data">', 1)
    data, tail = rest.split("</script>", 1)
    assert len(re.findall(r"<script\b", head + tail)) == 2  # a field cannot add or end one
    json.loads(data)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_timeline_shows_every_field_as_text(
    seed: str, hostile_traces: dict[str, Trace]
) -> None:
    document = to_chrome_trace(_trace(hostile_traces, seed))
    text = json.dumps(document, ensure_ascii=False, allow_nan=False)
    assert json.loads(text) == document
    assert acting(text) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_the_inspector_shows_every_field_of_every_node_as_text(
    seed: str, hostile_traces: dict[str, Trace]
) -> None:
    trace = _trace(hostile_traces, seed)
    console = Console(file=io.StringIO(), width=160, color_system=None)
    for step in _steps(trace):
        state = trace.state_at(step)
        for task in trace.graph_tasks.values():
            for node_id, info in task.nodes.items():
                try:
                    node_state = state.node(node_id, task.id)
                except KeyError:
                    node_state = None
                console.print(inspect_node(info, node_state, task, True))
    assert acting(console.file.getvalue()) == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", ["hostile", "devices", "reentrant", "torch", "rare"])
def test_the_tui_shows_every_field_as_text(seed: str, hostile_traces: dict[str, Trace]) -> None:
    trace = _trace(hostile_traces, seed)
    screens: list[str] = []

    async def run() -> None:
        app = VizApp(ReplayDriver(trace), source=trace.events[0].thread)
        async with app.run_test(size=(140, 44)) as pilot:
            for keys in ("s", "n", "a", "e", "down", "down", "v", "v", "t", "escape", "?"):
                await pilot.press(*keys.split())
                await pilot.pause()
                screens.append(app.export_screenshot())
            assert app.is_running  # no name quit it ([@click=app.quit])

    asyncio.run(run())
    for svg in screens:
        assert acting(svg) == []
        ET.fromstring(svg)  # well-formed: no control character, no markup from a field
