"""Helpers for the Graphviz exporter's tests: stable numbering, DOT and SVG parsing."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import stat
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import graphviz
import pytest

import engine
from engine import graph, graph_task

needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None,
    reason="Graphviz's dot is not installed (./scripts/dev installs it)",
)

SVG = "{http://www.w3.org/2000/svg}"

_NODE_LINE = re.compile(r"^\s*(\w+) \[label=<(.*)>(.*)\]$")


@pytest.fixture
def fresh_numbers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Node and graph task ids and sequence numbers start again, so DOT text is reproducible."""
    monkeypatch.setattr(graph, "_node_ids", itertools.count(1))
    monkeypatch.setattr(graph_task, "_graph_task_ids", itertools.count(1))
    saved = graph.restart_sequence_nr(0)
    yield
    graph.restart_sequence_nr(saved)


@dataclass(frozen=True)
class DrawnNode:
    """What a node line of the DOT source says."""

    key: str
    name: str
    sequence_nr: str
    topological_nr: int
    remaining: int
    dependencies: int
    device: str
    status: str
    attrs: str


_DEPS = re.compile(r"seq (\S+) · topo (\d+)</FONT>.*?deps (\d+)/(\d+) · ([^<]+)</FONT>")


def drawn_nodes(dot: graphviz.Digraph) -> dict[str, DrawnNode]:
    """Backward nodes of a drawing, by key, read back from its DOT source."""
    out = {}
    for line in dot.source.splitlines():
        match = _NODE_LINE.match(line)
        if not match or "class=" not in line:
            continue
        key, label, attrs = match.groups()
        numbers = _DEPS.search(label)
        if numbers is None:
            continue
        name = re.search(r"<B>(.*?)</B>", label)
        status = re.search(r'class="?([\w-]+)"?', attrs)
        assert name is not None and status is not None, line
        seq, topo, remaining, deps, device = numbers.groups()
        out[key] = DrawnNode(
            key,
            name.group(1),
            seq,
            int(topo),
            int(remaining),
            int(deps),
            device,
            status.group(1),
            attrs,
        )
    return out


def drawn_edges(dot: graphviz.Digraph) -> list[tuple[str, str, str]]:
    """``(tail, head, attributes)`` of every edge in the DOT source."""
    edges = []
    for line in dot.source.splitlines():
        match = re.match(r"^\s*(\w+) -> (\w+) \[(.*)\]$", line)
        if match:
            edges.append((match.group(1), match.group(2), match.group(3)))
    return edges


def svg_tree(dot: graphviz.Digraph) -> ET.Element:
    """The drawing rendered by ``dot`` and parsed as XML."""
    return ET.fromstring(dot.pipe(format="svg"))


def svg_groups(root: ET.Element, kind: str) -> list[ET.Element]:
    """``<g class="node">`` (or edge, cluster) elements, classes as Graphviz writes them."""
    return [g for g in root.iter(f"{SVG}g") if kind in (g.get("class") or "").split()]


def svg_text(group: ET.Element) -> str:
    """The text a group shows, its lines joined by newlines."""
    return "\n".join("".join(t.itertext()) for t in group.iter(f"{SVG}text"))


def paper_rnn() -> engine.Tensor:
    """The loss of the RNN cell of the autodiff paper, with named leaves."""
    engine.manual_seed(0)
    w_h = engine.randn(3, 3, requires_grad=True, name="W_h")
    w_x = engine.randn(3, 2, requires_grad=True, name="W_x")
    x = engine.randn(1, 2, requires_grad=True, name="x")
    prev_h = engine.randn(1, 3, requires_grad=True, name="prev_h")
    return ((w_x @ x.T) + (w_h @ prev_h.T)).tanh().sum()


def dot_that_crashes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """Put first on PATH a ``dot`` that dies of a segmentation fault when its input matches
    the shell ``case`` pattern ``case`` (``*newrank*``; ``*splines=line*) ;; *nslimit*``:
    not with straight edges, else on a bounded placement), as Debian's Graphviz 2.43 did on
    some pictures; any other input goes to the real ``dot``."""
    real = shutil.which("dot")
    assert real is not None
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        f'input=$(cat); case "$input" in {case}) kill -SEGV $$;; esac\n'
        f'printf "%s" "$input" | exec {real} "$@"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
