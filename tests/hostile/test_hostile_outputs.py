"""Hostile names through every output but the TUI: DOT/SVG, HTML, timeline, NaN report, file.

See Note [Names are text] in ``autograd_viz.trace.text``; the TUI has its own file.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from autograd_viz import to_dot
from autograd_viz.cli.nan import print_report
from autograd_viz.draw.render.animate import animate
from autograd_viz.nan.scan import find_nans
from autograd_viz.timeline import to_chrome_trace
from autograd_viz.trace import Trace
from autograd_viz.trace.recording import record
from autograd_viz.trace.text import printable
from tests.hostile.names import ACTING, HOSTILE
from tests.hostile.program import class_name, hostile_trace, nan_program
from tests.viz.dotting import needs_dot, svg_tree

NAMES = pytest.mark.parametrize("name", HOSTILE.values(), ids=HOSTILE.keys())


def acting(text: str) -> list[str]:
    """The characters of :data:`ACTING` found raw in ``text``."""
    return [hex(ord(c)) for c in ACTING if c in text]


def strings(value: Any) -> list[str]:
    """Every string in a JSON document, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings(v))]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return []


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    return {name: hostile_trace(name) for name in HOSTILE.values()}


@NAMES
def test_a_trace_file_keeps_every_name_exactly(
    name: str, traces: dict[str, Trace], tmp_path: Path
) -> None:
    trace = traces[name]
    trace.save(tmp_path / "t.jsonl")
    loaded = Trace.load(tmp_path / "t.jsonl")
    assert loaded == trace
    assert any(e.thread == name for e in loaded.events)
    assert any(e.data.get("message") == name for e in loaded.events if e.kind == "error")


@NAMES
def test_dot_source_quotes_names_and_escapes_control_characters(
    name: str, traces: dict[str, Trace]
) -> None:
    source = to_dot(traces[name], values=True, saved=True).source
    assert acting(source) == []
    # A name stays inside its quoted or HTML label, on its statement's line: no line
    # starts a graph of its own.
    assert [line for line in source.splitlines() if line.lstrip().startswith("digraph")] == [
        "digraph backward {"
    ]


@needs_dot
@NAMES
def test_svg_is_well_formed_and_shows_the_name_as_text(name: str, traces: dict[str, Trace]) -> None:
    trace = traces[name]
    root = svg_tree(to_dot(trace, graph_task=min(trace.graph_tasks)))
    text = "".join(root.itertext())
    assert acting(text) == []
    shown = printable(name, newlines=True)
    first_line = shown.split("\n")[0].strip()[:40]
    assert first_line in text
    # No element or attribute came from a name: every element is one Graphviz writes.
    assert {el.tag.split("}")[-1] for el in root.iter()} <= {
        "svg",
        "g",
        "title",
        "polygon",
        "path",
        "ellipse",
        "text",
        "a",
        "polyline",
    }


@needs_dot
@pytest.mark.parametrize("key", ["script_end", "html", "osc_title", "surrogate", "rtl"])
def test_the_html_animation_shows_names_as_text(
    key: str, traces: dict[str, Trace], tmp_path: Path
) -> None:
    name = HOSTILE[key]
    out = tmp_path / f"{key}.html"
    animate(traces[name], out, max_frames=3, title=name)
    page = out.read_text(encoding="utf-8")
    assert acting(page) == []
    # The data ends where the page's own script element ends: a name cannot close it.
    head, rest = page.split('id="animation-data">', 1)
    data, tail = rest.split("</script>", 1)
    assert "<!--" not in data
    assert len(re.findall(r"<script\b", head + tail)) == 2
    assert len(re.findall(r"</script>", tail)) == 1
    captions = json.loads(data)["captions"]
    assert any(printable(name)[:40] in c for c in captions)


@NAMES
def test_the_timeline_is_json_with_printable_names(name: str, traces: dict[str, Trace]) -> None:
    document = to_chrome_trace(traces[name])
    text = json.dumps(document, ensure_ascii=False)
    assert json.loads(text) == document
    found = strings(document)
    assert all(acting(s) == [] for s in found)
    assert printable(name) in found  # the thread's lane is named after it


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
@NAMES
def test_the_nan_report_shows_names_as_text(name: str) -> None:
    with record() as trace:
        nan_program(name)
    report = find_nans(trace)
    assert report.first is not None
    out = io.StringIO()
    print_report(report, Console(file=out, width=200, color_system=None, highlight=False))
    text = out.getvalue()
    assert acting(text) == []
    if len(name) < 100:  # markup would be read, not shown
        assert f"{printable(class_name(name))}Backward" in text.replace("\n", "")


CRAFTED_DTYPE = (
    'float32</FONT></TD></TR></TABLE>>]; evil [URL="javascript:alert(1)" label=<\x1b]0;t\x07'
)
"""A dtype that closed its HTML-like label and added a linked node, before dtypes were escaped."""


def _with_every_dtype(path: Path, dtype: str) -> Trace:
    """The plain hostile trace saved, with every tensor summary's ``dtype`` replaced."""
    trace = hostile_trace("x")
    trace.save(path)

    def edit(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: dtype if k == "dtype" else edit(v) for k, v in value.items()}
        if isinstance(value, list):
            return [edit(v) for v in value]
        return value

    records = [edit(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()]
    assert dtype in json.dumps(records, ensure_ascii=True).encode().decode("unicode_escape")
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return Trace.load(path)


def test_a_crafted_dtype_stays_inside_its_label(tmp_path: Path) -> None:
    trace = _with_every_dtype(tmp_path / "t.jsonl", CRAFTED_DTYPE)
    for gid in trace.graph_tasks:
        source = to_dot(trace, graph_task=gid, values=True, saved=True).source
        assert acting(source) == []
        assert 'URL="' not in source
        assert not [line for line in source.splitlines() if line.lstrip().startswith("evil")]
        assert "URL=&quot;javascript:alert(1)&quot;" in source  # shown, as text


@needs_dot
def test_a_crafted_dtype_adds_no_link_to_the_svg_or_the_page(tmp_path: Path) -> None:
    trace = _with_every_dtype(tmp_path / "t.jsonl", CRAFTED_DTYPE)
    root = svg_tree(to_dot(trace, graph_task=min(trace.graph_tasks), values=True, saved=True))
    assert not [el for el in root.iter() if any("href" in key for key in el.attrib)]
    out = tmp_path / "run.html"
    animate(trace, out, max_frames=2)
    page = out.read_text(encoding="utf-8")
    assert "javascript:alert(1)" not in page.replace("javascript:alert(1)&quot;", "")
    assert "innerHTML" not in page  # frames are parsed as SVG, captions set as text
