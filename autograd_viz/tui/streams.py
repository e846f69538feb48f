"""The program's standard streams while the TUI has the terminal (``autograd-viz run``).

Note [The program writes to a terminal of its own]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A program run beside the TUI prints, and so do its children: a ``fork``
child through the ``sys.stdout`` it inherited, a ``spawn`` child and a
subprocess straight to file descriptors 1 and 2. Swapping ``sys.stdout``
for an object that posts to the app (Textual's own capture) sees only the
first, and breaks the others: its ``fileno()`` is -1, which
``multiprocessing`` hands to every spawn child (``bad value(s) in
fds_to_keep``), and a fork child's prints are posted to an app that does not
exist in the child. So the swap is made where every writer meets, below
Python: while the TUI runs, descriptors 1 and 2 are a pseudo-terminal of
their own (one for both where both were the terminal, so that what each
wrote keeps its order; a pipe where none can be opened), a thread reads what
arrives and hands it to the app for ``o``, and the TUI draws on and reads
keys from copies of the real terminal's descriptors. Children inherit 1 and
2 as they would the terminal: they see a terminal (``isatty``), print a line
at a time, and their output shows. Descriptor 0 is ``/dev/null`` meanwhile,
so that no child reads the keys meant for the TUI; the program's own
``sys.stdin`` reads through the TUI's prompt (:mod:`~autograd_viz.tui.program_input`).

When the TUI ends, 1, 2 and 0 are the terminal again; what the program printed
while the TUI was up is written out, then whatever still arrives (a child
that outlives the TUI) is passed straight on, in the order it came.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
import select
import struct
import sys
import termios
import threading
import time
from collections.abc import Callable
from typing import TextIO

Sink = Callable[[str, bool], None]
"""Called with text a stream delivered and whether it is stderr's."""


class ProgramStreams:
    """Descriptors 0, 1 and 2 of this process, taken from the terminal while the TUI runs.

    Args:
        sink: called on the reading thread with what the program wrote, while the
            TUI has the terminal.
    """

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._lock = threading.Lock()
        self._released = False
        self._saved: dict[int, int] = {}
        self._masters: list[int] = []
        self._readers: list[threading.Thread] = []
        self.keys = -1
        """The terminal's input, for the TUI (a copy of descriptor 0)."""
        self.screen: TextIO | None = None
        """The terminal's output, for the TUI to draw on (over a copy of descriptor 1)."""

    def take(self) -> None:
        """Give the program descriptors of its own; the terminal's go to the TUI."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()  # what was printed before goes to the terminal, as printed
        encoding = getattr(sys.__stdout__, "encoding", None) or "utf-8"
        self._saved = {fd: os.dup(fd) for fd in (0, 1, 2)}
        self.keys = self._saved[0]
        self.screen = open(  # noqa: SIM115 - closed in release()
            self._saved[1], "w", encoding=encoding, errors="replace", closefd=False
        )
        size = _window_size(self._saved[1])
        # One terminal for both, as they were: a line to stderr shows where it was written
        # among stdout's; kept apart when they went to different places.
        together = _same_file(1, 2)
        for fds, stderr in (((1, 2), False),) if together else (((1,), False), ((2,), True)):
            master, slave = _terminal_or_pipe(size)
            for fd in fds:
                os.dup2(slave, fd)
            os.close(slave)
            self._masters.append(master)
            reader = threading.Thread(
                target=self._read,
                args=(master, stderr, encoding),
                name=f"autograd-viz-{'stderr' if stderr else 'stdout'}",
                daemon=True,
            )
            self._readers.append(reader)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for reader in self._readers:
            reader.start()

    def resize(self, columns: int, rows: int) -> None:
        """The program's terminals take the real one's new size (``shutil.get_terminal_size``)."""
        with self._lock:
            for master in self._masters:
                with contextlib.suppress(OSError):
                    fcntl.ioctl(
                        master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0)
                    )

    def release(self, write_out: Callable[[], None]) -> None:
        """Give descriptors 0, 1 and 2 back to the terminal; ``write_out`` writes what was kept.

        ``write_out`` runs once the descriptors are the terminal's and before
        anything that arrives later is passed on (Note [The program writes...]).
        Safe to call twice, and from a signal handler's thread while the TUI ends.
        """
        if not self._saved:
            write_out()
            return
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        with self._lock:
            if self._released:
                return
            self._released = True
            for fd, saved in self._saved.items():
                os.dup2(saved, fd)  # the pseudo-terminals' last holders may be children
            write_out()
        if self.screen is not None:
            with contextlib.suppress(OSError, ValueError):
                self.screen.close()
        for saved in self._saved.values():
            with contextlib.suppress(OSError):
                os.close(saved)
        _drain(list(self._masters))
        with self._lock:  # a piece read just before is written by now
            pass

    def _read(self, master: int, stderr: bool, encoding: str) -> None:
        decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        fd = 2 if stderr else 1
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer has closed its end
                chunk = b""
            text = decoder.decode(chunk, final=not chunk)
            with self._lock:
                if self._released:
                    _write_all(fd, text.encode(encoding, "replace"))
                elif text:
                    self._sink(text, stderr)
            if not chunk:
                break
        with self._lock:  # its number may be reused once closed: nobody asks it again
            self._masters.remove(master)
            with contextlib.suppress(OSError):
                os.close(master)


def _terminal_or_pipe(size: bytes | None) -> tuple[int, int]:
    """A pseudo-terminal (read end, write end) that keeps ``\\n`` as written, else a pipe."""
    try:
        master, slave = os.openpty()
    except OSError:
        return os.pipe()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST  # no "\n" → "\r\n": the text arrives as the program wrote it
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    if size is not None:
        with contextlib.suppress(OSError):
            fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
    return master, slave


def _same_file(first: int, second: int) -> bool:
    try:
        return os.path.samestat(os.fstat(first), os.fstat(second))
    except OSError:
        return False


def _window_size(fd: int) -> bytes | None:
    try:
        return fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8)
    except OSError:
        return None


def _drain(masters: list[int], timeout: float = 0.2) -> None:
    """Wait (a little) until the readers have read what the program wrote before."""
    deadline = time.monotonic() + timeout
    for master in masters:
        with contextlib.suppress(OSError, ValueError):
            while select.select([master], [], [], 0)[0] and time.monotonic() < deadline:
                time.sleep(0.005)


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(fd, data) :]


__all__ = ["ProgramStreams", "Sink"]
