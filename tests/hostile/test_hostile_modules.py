"""Hostile module paths and class names through the module view: DOT, SVG and the resolver."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import autograd_viz
import engine
from autograd_viz import to_dot
from autograd_viz.cli import main
from autograd_viz.draw.model import select
from autograd_viz.draw.model.graph_view import from_state
from autograd_viz.trace import Trace
from autograd_viz.trace.text import printable
from tests.hostile.names import ACTING, HOSTILE
from tests.viz.dotting import needs_dot, svg_tree

NAMES = pytest.mark.parametrize("name", HOSTILE.values(), ids=HOSTILE.keys())


def acting(text: str) -> list[str]:
    return [hex(ord(c)) for c in ACTING if c in text]


def scoped_trace(name: str) -> Trace:
    """Three calls of a module called ``name`` (class ``name``), one after the other."""
    w = engine.tensor(np.eye(2) * 0.5, requires_grad=True, name=name)
    h = engine.tensor(np.ones((1, 2)), requires_grad=True)
    with engine.scope(name, kind=name):
        for _ in range(3):
            with engine.scope(name, kind=name):
                h = (h @ w).tanh()
    with autograd_viz.record() as trace:
        h.sum().backward()
    return trace


@NAMES
def test_module_boxes_and_clusters_quote_names(name: str) -> None:
    trace = scoped_trace(name)
    for options in ({}, {"level": 0}, {"level": 1}):
        source = to_dot(trace, **options).source  # type: ignore[arg-type]
        assert acting(source) == []
        lines = [line for line in source.splitlines() if line.lstrip().startswith("digraph")]
        assert lines == ["digraph backward {"]
    assert "× 3" in to_dot(trace, leaves=True).source  # the three calls folded
    # By default too: calls that hold no calls are one fold box, its loop edge marked.
    default = to_dot(trace).source
    assert "× 3" in default and 'label="×2" class=loop' in default


@needs_dot
@NAMES
def test_module_names_are_text_in_svg(name: str) -> None:
    root = svg_tree(to_dot(scoped_trace(name), level=0))
    text = "".join(root.itertext())
    assert acting(text) == []
    assert printable(name, newlines=True).split("\n")[0].strip()[:40] in text


@needs_dot
@NAMES
def test_module_names_are_text_in_svg_tooltips(name: str) -> None:
    """A tooltip shows the name as written: Graphviz reads an entity in a plain attribute
    (``&amp;`` showed as ``&``), so the text it is given has its ampersands escaped."""
    root = svg_tree(to_dot(scoped_trace(name), level=0))
    xlink = "{http://www.w3.org/1999/xlink}title"
    tooltips = [a.get(xlink) or "" for a in root.iter() if a.get(xlink)]
    shown = printable(name, newlines=True).split("\n")[0].strip()[:40]
    assert any(shown in tip for tip in tooltips), (shown, tooltips[:3])
    assert all(acting(tip) == [] for tip in tooltips)


@NAMES
def test_a_module_name_is_read_back_as_a_view_shows_it(name: str) -> None:
    """Views write a name's control characters as escapes (``\\x1b``): typed back as
    shown, it names the module, as the name itself does."""
    trace = scoped_trace(name)
    view = from_state(trace.state_at(len(trace)))
    names = select.names_of_view(view)
    inside = {key for key, node in view.nodes.items() if node.info.scope}
    for given in {name, printable(name)}:
        assert set(names.resolve(given).nodes) == inside, given
        to_dot(trace, around=given, depth=1)  # raised GraphViewError for the escaped form


@NAMES
def test_an_unknown_module_name_is_one_clean_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.jsonl"
    scoped_trace(name).save(path)
    status = main(["dot", str(path), "--expand", "X" + name, "-o", str(tmp_path / "g.dot")])
    err = capsys.readouterr().err
    assert status == 3
    assert err.startswith("autograd-viz: error: nothing named ")
    assert acting(err) == [] and err.count("\n") == 1 and len(err) < 2100
