"""The program's ``sys.stdin`` while the TUI has the terminal: each line asked for in the TUI.

Note [The program reads through the prompt]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The TUI reads the terminal's keys, so a program that read them too would
take some of them (``q`` among them) and wait for a newline a raw terminal
never sends. While the TUI runs, the program's ``sys.stdin`` is a
:class:`ProgramInput`: a read asks the app for a line, the app opens its
prompt bar with what the program printed last (``input()``'s prompt), and
the line typed there is the program's, echoed in its output as a terminal
would. Escape hides the bar (``i`` opens it again); Ctrl+D answers end of
file, Ctrl+C and Ctrl+Q quit. Quitting answers every read still waiting with
``KeyboardInterrupt``, as Ctrl+C at a terminal would; once the TUI has ended,
reads go to the terminal again. ``getpass.getpass``, which reads
``/dev/tty`` itself, asks the same way while the TUI runs, what is typed
unseen. Its ``fileno()`` is descriptor 0, which is
``/dev/null`` meanwhile (Note [The program writes to a terminal of its own]
in :mod:`~autograd_viz.tui.streams`): not a terminal, so ``input()`` writes
its prompt to ``sys.stdout`` and reads this object, and a subprocess given
``stdin=sys.stdin`` reads an empty input rather than the TUI's keys.
"""

from __future__ import annotations

import contextlib
import getpass
import io
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO


class LineRequest:
    """One line a program asked for, waiting for its answer.

    Args:
        prompt: the prompt of a read that writes it elsewhere than ``sys.stdout``
            (``getpass``); ``None``: the program printed it.
        secret: what is typed is not shown (``getpass``).
    """

    def __init__(self, prompt: str | None = None, *, secret: bool = False) -> None:
        self.prompt = prompt
        """The prompt, where the program did not print it."""
        self.secret = secret
        """What is typed is not shown, nor echoed into the program's output."""
        self._answered = threading.Event()
        self._line = ""
        self._cancelled = False

    @property
    def answered(self) -> bool:
        """It has its line, its end of file, or was cancelled."""
        return self._answered.is_set()

    def answer(self, line: str) -> None:
        """Give the program ``line`` (with its newline; ``""`` is end of file)."""
        if not self._answered.is_set():
            self._line = line
            self._answered.set()

    def cancel(self) -> None:
        """The TUI is quitting: the read raises ``KeyboardInterrupt``."""
        if not self._answered.is_set():
            self._cancelled = True
            self._answered.set()

    def wait(self) -> str:
        """The line (Ctrl+C at the TUI, or SIGINT, interrupts the wait).

        Raises:
            KeyboardInterrupt: the TUI quit before the line was given.
        """
        self._answered.wait()
        if self._cancelled:
            raise KeyboardInterrupt
        return self._line


Asker = Callable[[LineRequest], None]
"""Shows a read to the user (called on the reading thread)."""


class ProgramInput(io.TextIOBase):
    """``sys.stdin`` for a program beside the TUI (Note [The program reads through the prompt]).

    Args:
        ask: shows a :class:`LineRequest` in the TUI.
        terminal: the stdin it stands in for, read once the TUI has ended.
    """

    def __init__(self, ask: Asker, terminal: TextIO) -> None:
        super().__init__()
        self._ask: Asker | None = ask
        self._terminal = terminal
        self._lock = threading.Lock()
        self._waiting: list[LineRequest] = []
        self._left = ""
        self._pid = os.getpid()

    # -- what the TUI does ---------------------------------------------------------------
    def tui_ended(self) -> None:
        """The TUI has ended: reads waiting raise ``KeyboardInterrupt``, later ones read the
        terminal."""
        with self._lock:
            self._ask = None
            waiting, self._waiting = self._waiting, []
        for request in waiting:
            request.cancel()

    # -- what the program does -----------------------------------------------------------
    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._terminal, "encoding", None) or "utf-8"

    @property
    def name(self) -> str:
        return "<stdin>"

    def readable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return True  # a person types the lines

    def fileno(self) -> int:
        return 0  # /dev/null while the TUI runs (Note [The program reads through the prompt])

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        """One line typed in the TUI (``""`` at end of file), at most ``size`` characters."""
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        if size == 0:
            return ""
        line = self._left or self._line()
        if size is not None and 0 < size < len(line):
            line, self._left = line[:size], line[size:]
        else:
            self._left = ""
        return line

    def read(self, size: int | None = -1) -> str:
        """Lines until end of file (Ctrl+D), or up to ``size`` characters of the next line."""
        if size is not None and size >= 0:
            return self.readline(size)
        text = []
        while line := self.readline():
            text.append(line)
        return "".join(text)

    def getpass(self, prompt: str = "Password: ", stream: TextIO | None = None) -> str:
        """:func:`getpass.getpass` while the TUI runs: asked in the TUI, typed unseen.

        ``getpass`` reads ``/dev/tty`` itself, so it would take the TUI's keys
        as a plain read would (Note [The program reads through the prompt]).

        Raises:
            EOFError: Ctrl+D was pressed, as ``getpass`` raises at end of file.
            KeyboardInterrupt: the TUI quit first.
        """
        request = LineRequest(prompt, secret=True)
        line = self._line(request, terminal=lambda: _real_getpass(prompt, stream) + "\n")
        if not line:
            raise EOFError
        return line.removesuffix("\n")

    def _line(
        self, request: LineRequest | None = None, terminal: Callable[[], str] | None = None
    ) -> str:
        if os.getpid() != self._pid:
            return ""  # a forked child: the TUI is its parent's, so it reads nothing
        request = request or LineRequest()
        with self._lock:
            ask = self._ask
            if ask is not None:
                self._waiting.append(request)
        if ask is None:
            return terminal() if terminal is not None else self._terminal.readline()
        try:
            ask(request)
            return request.wait()
        finally:
            with self._lock:
                if request in self._waiting:
                    self._waiting.remove(request)

    def __getattr__(self, name: str) -> Any:
        # ``buffer``, ``errors``, ``newlines`` and the like: the terminal's stream has them.
        return getattr(self._terminal, name)


_real_getpass = getpass.getpass
"""``getpass.getpass`` as it was, for a read once the TUI has ended."""


@contextlib.contextmanager
def asked_in_tui(program_input: ProgramInput) -> Iterator[None]:
    """While the block runs, ``getpass.getpass`` asks through ``program_input``."""
    getpass.getpass = program_input.getpass
    try:
        yield
    finally:
        if getpass.getpass == program_input.getpass:  # unless the program set its own
            getpass.getpass = _real_getpass


__all__ = ["Asker", "LineRequest", "ProgramInput", "asked_in_tui"]
