"""One line of text asked for on the main screen: what to find (``/``), where to export (``d``).

Note [The prompt is part of the main screen]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The prompt used to be a modal screen of its own. Pushing a screen over the
app lays it out and paints it whole, and a modal screen paints the app's
screen under it again, every line dimmed: at 20,000 nodes the first ``/``
cost 65-95 ms of the UI thread's CPU on a quiet machine, over 100 ms on a
loaded one, before a key was typed. The bar is mounted once, hidden, on its
own layer docked at the bottom: showing it moves no panel, so only the lines
it covers are painted. It stays modal in what matters: it has the focus
while it is shown, Enter answers, Escape cancels, and focus leaving it (Tab,
a click on a panel) cancels too, so no question is left open behind the
user's back. A blur because the terminal lost focus is not one: Textual
gives the focus back when the terminal has it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Input, Label

Answer = Callable[[str | None], None]
"""Called with what was typed, spaces and all (``None`` when empty or cancelled): a name
may start or end with a space (Note [Names are text]), so only the asker knows whether
spaces around the text are a stray keystroke."""


class PromptBar(Vertical):
    """A titled one-line input at the bottom of the main screen, hidden until asked.

    :meth:`ask` shows it with a title and a first value and focuses it; Enter hides it
    and calls back with the text, Escape (or focus moving elsewhere) with ``None``.
    """

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Close", show=False)]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._answer: Answer | None = None
        self._return_to: Widget | None = None
        self.title_text = ""
        """The question asked now (or last)."""

    def compose(self) -> ComposeResult:
        yield Label(id="prompt-title")
        yield Input(id="prompt-input", compact=True)

    def on_mount(self) -> None:
        self.display = False

    @property
    def asking(self) -> bool:
        """Shown and waiting for an answer."""
        return self._answer is not None

    def ask(self, title: str, answer: Answer, *, value: str = "", placeholder: str = "") -> None:
        """Show ``title`` and an input holding ``value``; call ``answer`` with the reply.

        A question still open is cancelled first (its callback gets ``None``).
        """
        earlier, self._answer = self._answer, answer
        if earlier is None:
            self._return_to = self.app.focused
        self.title_text = title
        # Text, not markup: an export path or a name may hold brackets (Note [Names are text]).
        self.query_one("#prompt-title", Label).update(Text(title))
        line = self.query_one(Input)
        line.placeholder = placeholder
        line.value = value
        line.cursor_position = len(value)
        self.display = True
        line.focus()
        if earlier is not None:
            earlier(None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._close(event.value or None)

    def action_cancel(self) -> None:
        """Hide the bar; the question is answered with ``None``."""
        self._close(None)

    def on_descendant_blur(self, _: events.DescendantBlur) -> None:
        # Handled after the focus moved: cancel only if it went elsewhere in the app
        # (Note [The prompt is part of the main screen]).
        focused = self.app.focused
        gone = focused is None or focused.parent is not self
        if self.asking and self.app.app_focus and gone:
            self._close(None, refocus=False)

    def _close(self, text: str | None, *, refocus: bool = True) -> None:
        answer, self._answer = self._answer, None
        back, self._return_to = self._return_to, None
        self.display = False
        if refocus and back is not None and back.is_attached and back.display:
            back.focus()
        if answer is not None:
            answer(text)


__all__ = ["Answer", "PromptBar"]
