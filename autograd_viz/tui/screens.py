"""The app's screens: the main one, and modal ones (help, a page of text, the graph-task picker).

Note [A focus change repaints what it restyles]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Textual's ``Screen.focused`` is a reactive that repaints the whole screen on
every change, although the focus change's own restyle (``:focus``,
``:focus-within``) already refreshes each widget whose style changed. At 20,000
nodes that repaint was a third of ``/``'s cost (the prompt takes the focus) and
part of every ``v`` to the drawn DAG and of every Enter or Escape that gives the
focus back. The main screen's ``focused`` refreshes the key bar, as Textual's
does, but repaints nothing itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.reactive import Reactive
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from autograd_viz.draw.render.words import KIND_MEANINGS
from autograd_viz.trace.text import printable
from autograd_viz.tui.styled import STATUS_GLYPHS


class MainScreen(Screen[None]):
    """The app's screen of panels; a focus change repaints only what it restyles (Note [A focus
    change repaints what it restyles])."""

    focused: Reactive[Widget | None] = Reactive(None, repaint=False)
    """The focused widget, or ``None``."""


_CLOSE: list[BindingType] = [Binding("escape", "dismiss_none", "Close")]


class _Modal(ModalScreen[str | None]):
    BINDINGS: ClassVar[list[BindingType]] = _CLOSE

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


class HelpScreen(_Modal):
    """Every key, and what the colours of the node list mean."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *_CLOSE,
        Binding("question_mark,q", "dismiss_none", "Close"),
    ]

    def __init__(self, keys: Iterable[tuple[str, str]]) -> None:
        super().__init__()
        self.keys = list(keys)

    def compose(self) -> ComposeResult:
        legend = Table.grid(padding=(0, 1))
        for _ in range(3):
            legend.add_column(no_wrap=True)
            legend.add_column(no_wrap=True)
        marks = [
            *(
                (Text(glyph, style=style), str(status))
                for status, (glyph, style) in STATUS_GLYPHS.items()
            ),
            (Text("⚠", style="bold magenta"), "NaN or Inf here"),
            (Text("⏺", style="bold red"), "breakpoint"),
            (Text("»", style="bold red1"), "path to 1st NaN"),
        ]
        for i in range(0, len(marks), 3):
            row: list[Text | str] = []
            for glyph, what in marks[i : i + 3]:
                row += [glyph, what]
            legend.add_row(*row)
        keys = Table.grid(padding=(0, 2))
        keys.add_column(style="bold cyan", no_wrap=True)
        keys.add_column()
        for key, what in [*self.keys, *MOVING]:
            keys.add_row(key, what)
        kinds = Table.grid(padding=(0, 2))
        kinds.add_column(style="bold", no_wrap=True)
        kinds.add_column()
        for kind, meaning in KIND_MEANINGS.items():
            kinds.add_row(kind, meaning)
        with VerticalScroll(id="help-body"):
            yield Static(Text(READING, style=""))
            yield Static(Text("\nNode status", style="bold underline"))
            yield Static(legend)
            yield Static(Text("\nKeys", style="bold underline"))
            yield Static(keys)
            yield Static(
                Text(
                    "\nEvents (the line above the status bar explains the current one)",
                    style="bold underline",
                )
            )
            yield Static(kinds)


def help_keys(
    bindings: Iterable[BindingType], glyphs: dict[str, str], where: str = ""
) -> list[tuple[str, str]]:
    """Each binding's keys as the help page writes them (``glyphs``: a key's name → how it
    is written), and what it does, ``where`` added."""
    keys = []
    for binding in bindings:
        if isinstance(binding, Binding):
            key = binding.key
            for name, glyph in glyphs.items():
                key = key.replace(name, glyph)
            keys.append((key, binding.description + where))
    return keys


READING = (
    "A node runs once every gradient it waits for has arrived: its deps (remaining/total) "
    "reaches 0. Each device's ready queue pops the deepest reentrant task first, then the "
    "highest sequence_nr (seq, s). topo (t) is the topological_nr: the longest path to a leaf. "
    "Esc closes this page; arrows scroll it."
)
"""How to read the screen: first on the help page, above the fold."""

MOVING = (
    ("tab / shift+tab", "move between panels: node list or DAG, engine, inspector, events"),
    ("↑ ↓ pgup pgdn home end", "move the cursor in the focused list; the inspector follows"),
    ("enter", "in the events list: go to that step; in the module tree: open or close a row"),
    ("mouse", "click a node or an event to select it; the wheel scrolls"),
)
"""Keys of the panels themselves, which the app's bindings do not list."""


class TextScreen(_Modal):
    """A titled page of plain text (a program's output), scrollable."""

    BINDINGS: ClassVar[list[BindingType]] = [*_CLOSE, Binding("o,q", "dismiss_none", "Close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Static(Text(self.title_text, style="bold underline"))
            yield Static(Text(printable(self.text, newlines=True)))


class TaskPicker(_Modal):
    """Choose the graph task the node list shows, or follow the current step."""

    def __init__(
        self, choices: Iterable[tuple[str, str]], title: str = "Show which graph task?"
    ) -> None:
        super().__init__()
        self.choices = list(choices)
        self.title_text = title

    def compose(self) -> ComposeResult:
        with Vertical(id="picker"):
            yield Label(Text(self.title_text))
            # Text, not markup: a label quotes node names (Note [Names are text]).
            yield OptionList(*(Option(Text(label), id=key) for key, label in self.choices))

    BINDINGS: ClassVar[list[BindingType]] = [*_CLOSE, Binding("t", "dismiss_none", "Close")]

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
