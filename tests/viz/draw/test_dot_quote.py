"""The quoting Digraph writes what graphviz.Digraph writes, byte for byte, from memory or not."""

from __future__ import annotations

import graphviz
import pytest

from autograd_viz.draw.render import dot_quote

HOSTILE = [
    "plain",
    "two words",
    "",
    "-4.2",
    ".42",
    "node",
    "EDGE",
    "subgraph",
    '"',
    '\\"',
    '\\\\"',
    "a\\Nb",
    "<b>bold</b>",
    "<<TABLE><TR><TD>x</TD></TR></TABLE>>",
    graphviz.nohtml("<<b>not html</b>>"),
    graphviz.escape("<i>\\G</i>"),
    "x" * (dot_quote.LONGEST_KEPT + 3) + ' "',
    "ünïcödé name",
    "line\nbreak",
    "a;b{c}[d]=e",
]


def _draw(cls: type[graphviz.Digraph]) -> str:
    graph = cls("backward", comment="c")
    graph.attr(rankdir="TB", fontname="Helvetica")
    graph.attr("node", shape="box")
    for i, text in enumerate(HOSTILE):
        graph.node(f"n{i}", label=text, tooltip=text, id=text)
        graph.node(text, text, **{"class": text})
        graph.edge(f"n{i}", text, label=text, _attributes={"xlabel": text, "skip": None})
        graph.edge(f"{text}:p:s", f"n{i}:{text}", attrs=None)
        with graph.subgraph(name=f"cluster_{text}") as sub:
            sub.attr(label=text, tooltip=text)
            sub.node(f"in{i}", label=text)
        graph.edges([(text, f"n{i}")])
    return graph.source


def test_the_source_is_graphvizs_own_for_hostile_names_first_and_again() -> None:
    expected = _draw(graphviz.Digraph)
    dot_quote._quoted.clear()
    assert _draw(dot_quote.Digraph) == expected  # every string quoted for the first time
    assert _draw(dot_quote.Digraph) == expected  # and from memory
    assert isinstance(dot_quote.Digraph(), graphviz.Digraph)


@pytest.mark.parametrize("text", HOSTILE)
def test_quote_is_graphvizs_quote(text: str) -> None:
    for _ in range(2):
        assert dot_quote.quote(text) == graphviz.quoting.quote(text)
        assert dot_quote.quote_edge(f"{text}:p") == graphviz.quoting.quote_edge(f"{text}:p")


def test_a_string_and_its_nohtml_twin_are_quoted_apart() -> None:
    html, plain = "<b>x</b>", graphviz.nohtml("<b>x</b>")
    assert dot_quote.quote(html) == "<b>x</b>"
    assert dot_quote.quote(plain) == '"<b>x</b>"'
    assert dot_quote.quote(html) == "<b>x</b>"


def test_the_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dot_quote, "QUOTED_LIMIT", 10)
    dot_quote._quoted.clear()
    for i in range(35):
        assert dot_quote.quote(f"name {i}") == f'"name {i}"'
    assert 0 < len(dot_quote._quoted) <= 10
    dot_quote.quote("y" * (dot_quote.LONGEST_KEPT + 1))
    assert all(len(text) <= dot_quote.LONGEST_KEPT for _, text in dot_quote._quoted)
