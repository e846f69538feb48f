"""What a program prints while the app runs: kept for ``o``, passed on a whole line at a time."""

from __future__ import annotations

import threading


class PrintCapture:
    """Lines a program printed, per thread and stream, and everything printed so far.

    ``print(a, b)`` writes ``a``, the separator, ``b`` and the newline
    separately; two threads printing at once would share a line. Each thread's
    text waits here until its newline (the rest when the program ends, see
    :meth:`flush`). What arrives through a stream's descriptor (Note [The program
    writes to a terminal of its own] in :mod:`~autograd_viz.tui.streams`) waits
    per stream instead, named by ``source``.
    """

    def __init__(self) -> None:
        self.output: list[tuple[bool, str]] = []
        """What was printed: ``(to stderr, text)`` pieces, in order."""
        self._lock = threading.Lock()
        self._unfinished: dict[tuple[object, bool], str] = {}

    def lines(self, text: str, stderr: bool, source: object = None) -> str:
        """The whole lines ``text`` completes for ``source`` (``""`` if none yet).

        ``source`` names who wrote: the calling thread unless given.
        """
        key = (threading.get_ident() if source is None else source, stderr)
        with self._lock:
            whole, newline, rest = (self._unfinished.pop(key, "") + text).rpartition("\n")
            if rest:
                self._unfinished[key] = rest
        return whole + newline

    def unfinished(self, source: object, stderr: bool = False) -> str:
        """What ``source`` wrote after its last newline (``input()``'s prompt)."""
        with self._lock:
            return self._unfinished.get((source, stderr), "")

    def keep(self, text: str, stderr: bool) -> bool:
        """Keep what was printed; ``True`` for the first piece (the status bar says ``o``)."""
        with self._lock:
            self.output.append((stderr, text))
            return len(self.output) == 1

    def flush(self) -> None:
        """Keep what each thread printed after its last newline (the program has ended)."""
        with self._lock:
            left, self._unfinished = self._unfinished, {}
        for (_, stderr), text in left.items():
            self.output.append((stderr, text))

    def text(self) -> str:
        """Everything printed, as one text."""
        return "".join(text for _, text in self.output)
