"""Cutting Graphviz's SVG into the pieces an animation page swaps: one per drawn element.

Used by :mod:`autograd_viz.draw.render.frame_diff` (Note [Frames as changes] there).
"""

from __future__ import annotations

import re
from xml.sax.saxutils import escape as xml_escape

_TAG = re.compile(r"<g\b[^>]*>|</g>")
_ELEMENT_ID = re.compile(r'\bid="([^"]*)"')
_TITLE = re.compile(r"<title>.*?</title>", re.DOTALL)


def inline(svg: bytes) -> str:
    """An SVG file as markup to put inside HTML: no XML declaration, doctype or comments."""
    text = svg.decode("utf-8")
    text = text[text.index("<svg") :]
    return re.sub(r"<!--.*?-->\n?", "", text, flags=re.DOTALL)


def element_groups(svg: bytes) -> dict[str, str]:
    """The SVG markup of each drawn element (node, edge, cluster) by its id.

    dot writes every drawn element as a ``<g>`` right inside the graph's own
    ``<g>``; text and attribute values never hold a raw ``<``, so counting the
    ``<g>`` tags finds where each element ends.
    """
    text = svg.decode("utf-8")
    out: dict[str, str] = {}
    depth = 0
    start, eid = -1, ""
    for tag in _TAG.finditer(text):
        if tag.group().startswith("</"):
            depth -= 1
            if depth == 1 and start >= 0:
                out[eid] = text[start : tag.end()]
                start = -1
            continue
        depth += 1
        if depth == 2:
            found = _ELEMENT_ID.search(tag.group())
            if found is not None and 'class="graph"' not in tag.group():
                start, eid = tag.start(), found.group(1)
    return out


def renamed(markup: str, drawn_id: str, eid: str, title: str | None) -> str:
    """An element drawn under id ``drawn_id``, given the id ``eid`` (its anchors' too) and,
    unless ``None``, the title ``title`` (shown as text)."""
    markup = markup.replace(f'{drawn_id}"', f'{eid}"')  # id="v…", id="a_v…"
    markup = markup.replace(f"{drawn_id}-", f"{eid}-")  # id="a_v…-label"
    if title is not None:
        shown = f"<title>{xml_escape(title)}</title>"
        markup = _TITLE.sub(lambda _: shown, markup, count=1)
    return markup


__all__ = ["element_groups", "inline", "renamed"]
