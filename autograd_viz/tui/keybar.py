"""The bottom line of the TUI: the focused panel's keys, then the most useful keys that fit.

Textual's footer writes every key in declaration order and cuts the line at
the screen's edge, so at 120 columns half the keys never showed. Here keys
have a priority: the bar writes them in that order while they fit, and
always ends with ``? all keys`` and ``q quit``.

Note [The key bar follows the focus]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The same key does different things in different panels: Enter opens a box
in the drawing, opens a call's row in the module tree, and goes to a step in
the timeline; ← → pick labels in the drawing and step everywhere else. The
bar starts with the keys of the panel that has the focus (:data:`FOCUS_KEYS`),
set apart by a bar, so what it says is what the keys do where the user is.
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

FOCUS_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "topo": (("↑↓", "select"),),
    "tree": (("↑↓", "select"), ("enter", "open/close")),
    "dag": (("←→", "pick"), ("enter", "open/close"), ("z", "zoom")),
    "events": (("↑↓", "move"), ("enter", "go to step")),
}
"""The keys of the panel with the focus, written first (Note [The key bar follows the focus]):
the node list in its ``topo`` and ``tree`` views, the drawn DAG, the timeline."""

ALWAYS = (("?", "all keys"), ("q", "quit"))
"""Written at the end of the bar whatever the width."""

GAP = "  "
KEY_STYLE = "bold dark_orange"
FOCUS_STYLE = "bold cyan"
"""The style of the focused panel's keys."""
SEPARATOR = " │ "
"""Between the focused panel's keys and the others."""


def key_bar(width: int, focus: str = "") -> Text:
    """The keys of the panel ``focus`` names, then those that fit in ``width`` columns, by
    priority, then :data:`ALWAYS` (Note [The key bar follows the focus])."""
    own = FOCUS_KEYS.get(focus, ())
    tail = _pairs(ALWAYS)
    text = Text()
    if own:
        text.append_text(_pairs(own, FOCUS_STYLE))
        text.append(SEPARATOR, style="dim")
    room = width - tail.cell_len - len(GAP)
    taken = {key for key, _ in own}
    listed = False
    for key, what in KEYS:
        if key in taken:
            continue
        pair = _pairs(((key, what),))
        if text.cell_len + pair.cell_len + (len(GAP) if listed else 0) > room:
            break
        if listed:
            text.append(GAP)
        text.append_text(pair)
        listed = True
    if listed:
        text.append(GAP)
    return text.append_text(tail)


def _pairs(keys: tuple[tuple[str, str], ...], style: str = KEY_STYLE) -> Text:
    text = Text()
    for i, (key, what) in enumerate(keys):
        if i:
            text.append(GAP)
        text.append(key, style=style)
        text.append(f" {what}")
    return text


class KeyBar(Static):
    """The key line at the bottom (see the module notes); redrawn when the width or the
    focused panel changes."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.focus_name = ""
        """The panel whose keys come first (a key of :data:`FOCUS_KEYS`, or ``""``)."""

    def follow(self, focus: str) -> None:
        """Show the keys of panel ``focus`` first (no redraw when it is the same)."""
        if focus != self.focus_name:
            self.focus_name = focus
            self._draw()

    def _draw(self) -> None:
        width = self.content_region.width or self.size.width or self.app.size.width
        self.update(key_bar(width, self.focus_name))

    def on_resize(self) -> None:
        self._draw()

    def on_mount(self) -> None:
        self._draw()
