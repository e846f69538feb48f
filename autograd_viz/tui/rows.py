"""A scrolling list that renders only the rows on screen.

The node list and the event timeline both show one row per item, and a trace
can hold a hundred thousand nodes and several hundred thousand events. Rows
here are drawn on demand (Textual's line API), so the cost of a refresh is the
height of the widget, never the length of the list.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip


class RowList(ScrollView, can_focus=True):
    """A cursor over ``row_count`` rows drawn by :meth:`row_text`."""

    BINDINGS = [  # noqa: RUF012 - Textual's declaration style
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "First", show=False),
        Binding("end", "jump(-1)", "Last", show=False),
        Binding("enter", "choose", "Choose", show=False),
    ]

    COMPONENT_CLASSES = {"rowlist--cursor"}  # noqa: RUF012 - Textual's declaration style
    """The cursor row's style."""

    cursor = reactive(0, always_update=True, repaint=False)
    """The highlighted row."""

    class Highlighted(Message):
        """The cursor moved to ``row``."""

        def __init__(self, rows: RowList, row: int) -> None:
            super().__init__()
            self.rows = rows
            """The list."""
            self.row = row
            """The row under the cursor."""

        @property
        def control(self) -> RowList:
            return self.rows

    class Chosen(Highlighted):
        """``row`` was clicked or chosen with Enter."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._row_total = 0

    @property
    def row_count(self) -> int:
        """How many rows there are."""
        return self._row_total

    def set_row_count(self, count: int) -> None:
        """Change the number of rows (keeps the cursor inside)."""
        self._row_total = count
        self.virtual_size = Size(0, count)  # rows are cut to the width: never a horizontal bar
        if self.cursor >= count:
            self.set_reactive(RowList.cursor, max(0, count - 1))
        self.refresh()

    @property
    def row_width(self) -> int:
        """The columns a row has on screen (rows are cut to it)."""
        return self.scrollable_content_region.width or 200

    def row_text(self, row: int) -> Text:
        """The text of ``row``; subclasses draw their rows here (in :attr:`row_width`)."""
        raise NotImplementedError

    def move_to(self, row: int, *, center: bool = False, notify: bool = True) -> None:
        """Put the cursor on ``row`` and scroll it into view."""
        if not self._row_total:
            return
        row = max(0, min(row, self._row_total - 1))
        if notify:
            self.cursor = row
        else:
            self.set_reactive(RowList.cursor, row)
            self.refresh()
        self.scroll_to_region(
            Region(0, row, 1, 1), animate=False, center=center, immediate=True, force=True
        )

    def watch_cursor(self, old: int, new: int) -> None:
        self.refresh()
        self.post_message(self.Highlighted(self, new))

    def render_line(self, y: int) -> Strip:
        row = y + self.scroll_offset.y
        width = self.scrollable_content_region.width
        base = self.rich_style
        if row >= self._row_total:
            return Strip.blank(width, base)
        text = self.row_text(row)
        text.no_wrap = True
        text.overflow = "ellipsis"
        text.truncate(width, overflow="ellipsis", pad=True)
        style = base
        if row == self.cursor:
            cursor = self.get_component_rich_style("rowlist--cursor")
            style = base + (cursor if self.has_focus else Style(reverse=True, dim=True))
        segments = [
            Segment(s.text, style + s.style if s.style else style)
            for s in text.render(self.app.console, end="")
        ]
        return Strip(segments).crop_extend(0, width, style)

    def action_cursor(self, delta: int) -> None:
        self.move_to(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self.move_to(self.cursor + direction * max(1, self.scrollable_content_region.height - 1))

    def action_jump(self, row: int) -> None:
        self.move_to(row if row >= 0 else self._row_total - 1)

    def action_choose(self) -> None:
        if self._row_total:
            self.post_message(self.Chosen(self, self.cursor))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        row = offset.y + self.scroll_offset.y
        if 0 <= row < self._row_total:
            self.focus()
            self.move_to(row)
            self.post_message(self.Chosen(self, row))
