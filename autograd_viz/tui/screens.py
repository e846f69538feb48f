"""Modal screens: help, a one-line prompt (search, export), the graph-task picker."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from autograd_viz.trace.text import printable
from autograd_viz.tui.text import STATUS_GLYPHS

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
        keys = Table.grid(padding=(0, 2))
        keys.add_column(style="bold cyan", no_wrap=True)
        keys.add_column()
        for key, what in self.keys:
            keys.add_row(key, what)
        legend = Table.grid(padding=(0, 1))
        legend.add_column(no_wrap=True)
        legend.add_column()
        for status, (glyph, style) in STATUS_GLYPHS.items():
            legend.add_row(Text(glyph, style=style), str(status))
        legend.add_row(Text("⚠", style="bold magenta"), "a gradient holds NaN or Inf")
        legend.add_row(Text("⏺", style="bold red"), "breakpoint: continue stops when it starts")
        with VerticalScroll(id="help-body"):
            yield Static(Text("Keys", style="bold underline"))
            yield Static(keys)
            yield Static(Text("\nNode status", style="bold underline"))
            yield Static(legend)
            yield Static(
                Text(
                    "\nA node runs once every gradient it waits for has arrived (deps reaches "
                    "0). Each device's ready queue pops the deepest reentrant task first, then "
                    "the highest sequence_nr. Press escape to close.",
                    style="dim",
                )
            )


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


class PromptScreen(_Modal):
    """Ask for one line of text; dismissed with it, or ``None`` on escape."""

    def __init__(self, title: str, value: str = "", placeholder: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.value = value
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt"):
            yield Label(self.title_text)
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)


class TaskPicker(_Modal):
    """Choose the graph task the node list shows, or follow the current step."""

    def __init__(self, choices: Iterable[tuple[str, str]]) -> None:
        super().__init__()
        self.choices = list(choices)

    def compose(self) -> ComposeResult:
        with Vertical(id="picker"):
            yield Label("Show which graph task?")
            # Text, not markup: a label quotes node names (Note [Names are text]).
            yield OptionList(*(Option(Text(label), id=key) for key, label in self.choices))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
