"""A :class:`graphviz.Digraph` that quotes what it has quoted before from memory.

The ``graphviz`` library quotes every node name, attribute name and value it
writes, through two regular expressions and a wrapper that checks positional
arguments, once per attribute. A picture repeats most of them (``fillcolor``,
``"#f2f2f2"``, a node's key), and an animation draws the changed nodes of every
step again: quoting was most of the Python time of drawing a frame. The quoted
text is the library's own (:func:`graphviz.quoting.quote` makes it the first
time), so the DOT source is byte for byte what ``graphviz.Digraph`` writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import graphviz
from graphviz import quoting

QUOTED_LIMIT = 50_000
"""The most quoted strings kept; past it the memory starts again (it stays bounded)."""
LONGEST_KEPT = 512
"""Longer strings (a long tooltip, seldom repeated) are quoted each time, not kept."""

_quoted: dict[tuple[type, str], str] = {}


def quote(identifier: str) -> str:
    """:func:`graphviz.quoting.quote` of ``identifier``, from memory when quoted before."""
    # The class is part of the key: graphviz.nohtml("<b>") equals "<b>" but is quoted.
    key = (identifier.__class__, identifier)
    known = _quoted.get(key)
    if known is None:
        known = quoting.quote(identifier)
        if len(identifier) <= LONGEST_KEPT:
            if len(_quoted) >= QUOTED_LIMIT:
                _quoted.clear()
            _quoted[key] = known
    return known


def quote_edge(identifier: str) -> str:
    """:func:`graphviz.quoting.quote_edge` with :func:`quote`: ``node:port:compass``."""
    node, _, rest = identifier.partition(":")
    parts = [quote(node)]
    if rest:
        port, _, compass = rest.partition(":")
        parts.append(quote(port))
        if compass:
            parts.append(compass)
    return ":".join(parts)


def _items(mapping: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> Iterable[tuple[str, Any]]:
    """``graphviz._tools.mapping_items`` (a plain dict sorted), or pairs as given."""
    if isinstance(mapping, Mapping):
        items = mapping.items()
        return sorted(items) if type(mapping) is dict else items
    return mapping


def a_list(
    label: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    attributes: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
) -> str:
    """:func:`graphviz.quoting.a_list` with :func:`quote`: ``label=... name=value ...``."""
    result = [f"label={quote(label)}"] if label is not None else []
    if kwargs:
        result += [f"{quote(k)}={quote(v)}" for k, v in _items(kwargs) if v is not None]
    if attributes:
        result += [f"{quote(k)}={quote(v)}" for k, v in _items(attributes) if v is not None]
    return " ".join(result)


def attr_list(
    label: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    attributes: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
) -> str:
    """:func:`graphviz.quoting.attr_list` with :func:`quote`: `` [...]`` or nothing."""
    content = a_list(label, kwargs=kwargs, attributes=attributes)
    return f" [{content}]" if content else ""


class Digraph(graphviz.Digraph):
    """A :class:`graphviz.Digraph` (its subgraphs too) quoting through :func:`quote`."""

    _quote = staticmethod(quote)
    _quote_edge = staticmethod(quote_edge)
    _a_list = staticmethod(a_list)
    _attr_list = staticmethod(attr_list)

    stacked_from: int | None = None
    """How many lines of ``body`` were drawn before the invisible edges that stack module
    clusters (:func:`autograd_viz.draw.render.dot_clusters.draw_stacking`); None when there are
    none."""


__all__ = ["Digraph", "a_list", "attr_list", "quote", "quote_edge"]
