"""Text from a program or a trace, escaped for DOT, Graphviz HTML-like labels and HTML.

Every drawing puts names, dtypes, devices and messages that somebody's program
wrote into Graphviz source, SVG and HTML pages (Note [Names are text] in
:mod:`autograd_viz.trace.text`). They go through these helpers, and nothing
else builds label text from a trace's strings:

* :func:`html_text`: the content of an HTML-like label (``label=<...>``);
* :func:`html_label`: the label itself, from rows already escaped;
* :func:`plain_text`: a quoted DOT attribute, such as a tooltip;
* :func:`page_text`: text in an HTML page, outside any script.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

import graphviz

from autograd_viz.trace.text import printable, shorten

LABEL_TEXT_LIMIT = 200
"""The most characters of one piece of text (a name, a message) a label shows.

Graphviz refuses a label or quoted string longer than 16,384 characters, and a
name may be 100,000 long."""
TOOLTIP_LIMIT = 3000
"""The most characters of text a tooltip shows (escaping makes it at most five times longer)."""


def html_text(text: object) -> str:
    """``text`` as the content of an HTML-like label: shown as written, never as markup.

    ``&``, ``<``, ``>`` and quotes become entities, a backslash is doubled, a
    newline is a line break, and other control characters (which would make the
    SVG invalid) a visible escape (Note [Names are text]). Text past
    :data:`LABEL_TEXT_LIMIT` characters is cut.
    """
    shown = shorten(printable(text, newlines=True), LABEL_TEXT_LIMIT)
    # Graphviz expands \N, \G and \L even in HTML-like labels; a doubled backslash is one.
    escaped = html.escape(shown, quote=True).replace("\\", "\\\\")
    return escaped.replace("\n", '<BR ALIGN="CENTER"/>')


def html_label(rows: Iterable[str]) -> str:
    """An HTML-like label: one centred row per string already escaped by :func:`html_text`."""
    body = "".join(f"<TR><TD>{row}</TD></TR>" for row in rows)
    return f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">{body}</TABLE>>'


def plain_text(text: object) -> str:
    """``text`` as a quoted DOT attribute (a tooltip), shown as written.

    A backslash is written four times: Graphviz reads a tooltip's text twice,
    first undoubling backslashes, then expanding ``\\N``, ``\\G`` and ``\\L``
    (the node's name, the graph's, the label) and undoubling again, so a
    doubled backslash before ``N`` still shows the node's name (checked on
    Graphviz 2.43 for node, edge and cluster tooltips). An ampersand is written
    ``&amp;``, because Graphviz writes an entity in a tooltip (``&lt;``) into
    the SVG as one, which a viewer shows as the character. Newlines become
    DOT's ``\\n`` so each attribute stays on one line of source, and text
    that looks like ``<html>`` is still quoted as a string. Text past
    :data:`TOOLTIP_LIMIT` characters is cut.
    """
    shown = shorten(printable(text, newlines=True), TOOLTIP_LIMIT)
    lines = (line.replace("&", "&amp;").replace("\\", "\\" * 4) for line in shown.split("\n"))
    joined: str = graphviz.nohtml("\\n".join(lines))
    return joined


def page_text(text: object) -> str:
    """``text`` as the content of an HTML element (a page's title): entities, no controls."""
    return html.escape(printable(text), quote=True)
