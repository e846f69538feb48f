"""The bottom line of the TUI: the most useful keys that fit, and ``?`` for all of them.

Textual's footer writes every key in declaration order and cuts the line at
the screen's edge, so at 120 columns half the keys never showed. Here keys
have a priority: the bar writes them in that order while they fit, and
always ends with ``? all keys`` and ``q quit``.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

KEYS: tuple[tuple[str, str], ...] = (
    ("s", "step"),
    ("n", "next node"),
    ("p", "back"),
    ("c", "continue"),
    ("a", "first NaN"),
    ("v", "view"),
    ("/", "find"),
    ("t", "task"),
    ("b", "breakpoint"),
    ("f", "stop at NaN"),
    ("e", "end"),
    ("r", "rewind"),
    ("z", "zoom"),
    ("d", "export"),
    ("o", "output"),
    ("x", "pause"),
    ("P", "back a node"),
    ("tab", "next panel"),
)
"""Keys by priority, most useful first, with the short words the bar gives them."""

ALWAYS = (("?", "all keys"), ("q", "quit"))
"""Written at the end of the bar whatever the width."""

GAP = "  "
KEY_STYLE = "bold dark_orange"


def key_bar(width: int) -> Text:
    """The keys that fit in ``width`` columns, by priority, then :data:`ALWAYS`."""
    tail = _pairs(ALWAYS)
    room = width - tail.cell_len - len(GAP)
    text = Text()
    for key, what in KEYS:
        pair = _pairs(((key, what),))
        if text.cell_len + pair.cell_len + (len(GAP) if text else 0) > room:
            break
        if text:
            text.append(GAP)
        text.append_text(pair)
    if text:
        text.append(GAP)
    return text.append_text(tail)


def _pairs(keys: tuple[tuple[str, str], ...]) -> Text:
    text = Text()
    for i, (key, what) in enumerate(keys):
        if i:
            text.append(GAP)
        text.append(key, style=KEY_STYLE)
        text.append(f" {what}")
    return text


class KeyBar(Static):
    """The key line at the bottom (see the module notes); redrawn when the width changes."""

    def on_resize(self) -> None:
        self.update(key_bar(self.content_region.width or self.size.width))

    def on_mount(self) -> None:
        self.update(key_bar(self.content_region.width or self.app.size.width))
