"""``i``: the lines a program reads, asked for in the prompt bar (Note [The program reads
through the prompt] in :mod:`~autograd_viz.tui.program_input`)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from textual.message import Message

from autograd_viz.trace.text import one_line
from autograd_viz.tui.program_input import LineRequest
from autograd_viz.tui.prompt import PromptBar

if TYPE_CHECKING:
    from autograd_viz.tui.host import Host

STDOUT = "stdout"
"""Who wrote what arrives through descriptor 1 (``input()``'s prompt is its unfinished line)."""

STDERR = "stderr"
"""Who wrote what arrives through descriptor 2 when it is apart from 1."""


class ProgramWrote(Message):
    """What the program wrote arrived (Note [The program writes to a terminal of its own])."""

    def __init__(self, first: bool) -> None:
        super().__init__()
        self.first = first
        """It is the first thing kept: the status bar says ``o``."""


class ProgramReads(Message):
    """The program waits for a line (Note [The program reads through the prompt])."""


class Answerer:
    """The reads a program waits on, asked one at a time in the prompt bar.

    The program's threads add reads (:meth:`reads`); everything else runs on the
    app's thread.

    Args:
        owner: the app whose prompt bar asks.
    """

    def __init__(self, owner: Host) -> None:
        self.owner = owner
        self._lock = threading.Lock()
        self._reads: list[LineRequest] = []
        self._asking: LineRequest | None = None
        self._stopped = False

    def reads(self, request: LineRequest) -> bool:
        """The program waits for ``request`` (on its own thread); ``False`` once stopped,
        when the read is interrupted at once."""
        with self._lock:
            stopped = self._stopped
            if not stopped:
                self._reads.append(request)
        if stopped:
            request.cancel()
        return not stopped

    @property
    def waiting(self) -> bool:
        """The program waits for a line (``i`` types it)."""
        with self._lock:
            return any(not request.answered for request in self._reads)

    def stop(self) -> None:
        """The app quits: every read waiting raises ``KeyboardInterrupt``, later ones too."""
        with self._lock:
            self._stopped = True
            reads, self._reads = self._reads, []
        for request in reads:
            request.cancel()

    def wrote(self) -> None:
        """The program wrote: the question shows its prompt as it stands now."""
        if self._asking is not None:
            self.owner.query_one(PromptBar).retitle(self.title(self._asking))

    def title(self, request: LineRequest) -> str:
        """The bar's title for ``request``: what is read, after the program's prompt."""
        if request.prompt is not None:  # getpass: the prompt went to the terminal itself
            prompt = one_line(request.prompt, 200)
            return "the program reads a password" + (f": {prompt}" if prompt.strip() else "")
        prompt = one_line(self.owner.capture.unfinished(STDOUT), 200)
        return "the program reads a line" + (f": {prompt}" if prompt.strip() else "")

    def ask(self) -> bool:
        """Ask for the line the program waits for first; whether it waits for one."""
        with self._lock:
            self._reads = [request for request in self._reads if not request.answered]
            request = self._reads[0] if self._reads else None
        app = self.owner
        app.refresh_status()
        if request is None:
            return False
        bar = app.query_one(PromptBar)
        if bar.asking and self._asking is request:
            bar.retitle(self.title(request))
            return True
        if bar.asking and self._asking is None:
            return True  # the user's own question (/, d) stays; `i` answers after it
        self._asking = request
        bar.ask(
            self.title(request),
            lambda text: self._answer(request, text),
            placeholder="Enter sends the line · Ctrl+D end of input · Esc hides (i)",
            keep_empty=True,
            password=request.secret,
            on_interrupt=app.interrupt,
            on_end=lambda: self._answer(request, None, end_of_file=True),
        )
        return True

    def _answer(self, request: LineRequest, text: str | None, *, end_of_file: bool = False) -> None:
        self._asking = None
        if end_of_file:
            request.answer("")
        elif text is None:  # hidden: the program still waits, `i` opens the bar again
            self.owner.refresh_status()
            return
        else:
            if not request.secret:
                self.owner.program_wrote(text + "\n", False)  # echoed, as a terminal would
            request.answer(text + "\n")
        self.ask()


__all__ = ["STDERR", "STDOUT", "Answerer", "ProgramReads", "ProgramWrote"]
