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

Note [A line for the program]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The same bar asks for the line a program reads (Note [The program reads
through the prompt] in :mod:`~autograd_viz.tui.program_input`), with a terminal's
keys: Enter on nothing is an empty line, not a cancel; Ctrl+D is end of file
and Ctrl+C interrupts (the app quits), where in any other question Ctrl+C
copies as it does in every input.
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

Keys = Callable[[], None]
"""What a terminal key does for the question asked (Note [A line for the program])."""

Answer = Callable[[str | None], None]
"""Called with what was typed, spaces and all (``None`` when empty or cancelled): a name
may start or end with a space (Note [Names are text]), so only the asker knows whether
spaces around the text are a stray keystroke."""


class _Line(Input):
    """The bar's input, with a terminal's Ctrl+C and Ctrl+D when a program asks."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "interrupt", "Interrupt the program", show=False),
        Binding("ctrl+d", "end_of_file", "End of input", show=False),
    ]

    def action_interrupt(self) -> None:
        bar = self.parent
        interrupt = bar.on_interrupt if isinstance(bar, PromptBar) else None
        if interrupt is None:
            self.action_copy()
        else:
            interrupt()

    def action_end_of_file(self) -> None:
        bar = self.parent
        if isinstance(bar, PromptBar) and bar.on_end is not None:
            bar.end()


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
        self._keep_empty = False
        self.title_text = ""
        """The question asked now (or last)."""
        self.on_interrupt: Keys | None = None
        """What Ctrl+C does for this question (``None``: it copies)."""
        self.on_end: Keys | None = None
        """What Ctrl+D does for this question (``None``: nothing)."""

    def compose(self) -> ComposeResult:
        yield Label(id="prompt-title")
        yield _Line(id="prompt-input", compact=True)

    def on_mount(self) -> None:
        self.display = False

    @property
    def asking(self) -> bool:
        """Shown and waiting for an answer."""
        return self._answer is not None

    def ask(
        self,
        title: str,
        answer: Answer,
        *,
        value: str = "",
        placeholder: str = "",
        keep_empty: bool = False,
        password: bool = False,
        on_interrupt: Keys | None = None,
        on_end: Keys | None = None,
    ) -> None:
        """Show ``title`` and an input holding ``value``; call ``answer`` with the reply.

        A question still open is cancelled first (its callback gets ``None``).
        With ``keep_empty``, Enter on nothing answers ``""``; with ``password``, what is
        typed shows as dots; ``on_interrupt`` and
        ``on_end`` are what Ctrl+C and Ctrl+D do (Note [A line for the program]).
        """
        earlier, self._answer = self._answer, answer
        if earlier is None:
            self._return_to = self.app.focused
        self._keep_empty = keep_empty
        self.on_interrupt, self.on_end = on_interrupt, on_end
        self.retitle(title)
        line = self.query_one(Input)
        line.placeholder = placeholder
        line.password = password
        line.value = value
        line.cursor_position = len(value)
        self.display = True
        line.focus()
        if earlier is not None:
            earlier(None)

    def retitle(self, title: str) -> None:
        """Change the question's title (a program's prompt arrived after its read)."""
        self.title_text = title
        # Text, not markup: an export path or a name may hold brackets (Note [Names are text]).
        self.query_one("#prompt-title", Label).update(Text(title))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._close(event.value if self._keep_empty else event.value or None)

    def end(self) -> None:
        """Ctrl+D: hide the bar and do what the question does at end of file."""
        end = self.on_end
        self._answer = None  # answered by ``end``, not with ``None``
        self._close(None)
        if end is not None:
            end()

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
        self.on_interrupt = self.on_end = None
        self.display = False
        if refocus and back is not None and back.is_attached and back.display:
            back.focus()
        if answer is not None:
            answer(text)


__all__ = ["Answer", "PromptBar"]
