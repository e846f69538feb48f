"""Reading a trace file within bounds: what a crafted or mistaken file can make a reader do.

Note [Bounded reading]
~~~~~~~~~~~~~~~~~~~~~~
A trace file is untrusted input (Note [Names are text] in
:mod:`autograd_viz.trace.text`), and a path is easy to get wrong. Reading one
never hangs and never runs out of memory:

* only a regular file is read: a FIFO would block forever, a device such as
  ``/dev/zero`` never ends, a socket is no file at all. The file is opened
  without blocking and checked before a byte is read (:func:`open_trace`);
* a line is at most :data:`MAX_LINE_BYTES` long (a record of a million values
  is 20 MB), and a file at most :data:`MAX_RECORDS` lines: past either, the
  load stops with a :class:`TraceFormatError` naming the line;
* a file that cannot fit in the memory the process may use
  (``RLIMIT_AS``) is refused before reading, and running out of memory while
  reading is a :class:`TraceFormatError` too, never a bare ``MemoryError``.
"""

from __future__ import annotations

import os
import resource
import stat
from collections.abc import Iterator
from typing import BinaryIO

from autograd_viz.trace.records import TraceFormatError

MAX_LINE_BYTES = 64 << 20
"""The longest line read, in bytes: far above any record a recorder writes."""
MAX_RECORDS = 50_000_000
"""The most lines read from one file (a 20 GB trace)."""
MEMORY_PER_BYTE = 4
"""About how many bytes of memory a loaded trace takes per byte of its file."""

_KINDS = {
    stat.S_ISFIFO: "a FIFO (named pipe)",
    stat.S_ISCHR: "a character device",
    stat.S_ISBLK: "a block device",
    stat.S_ISSOCK: "a socket",
}


def open_trace(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a trace file to read, refusing anything but a regular file before reading.

    Raises:
        TraceFormatError: ``path`` is a FIFO, a device or a socket, or too big for
            the memory this process may use.
        OSError: it cannot be opened (missing, a directory, no permission).
    """
    name = os.fspath(path)
    _refuse_special(name, os.stat(name).st_mode)  # a socket cannot even be opened
    # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)  # what was opened, if the path changed since
        _refuse_special(name, info.st_mode)
        _check_memory(name, info.st_size)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _refuse_special(name: str, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(21, "Is a directory", name)
    for test, kind in _KINDS.items():
        if test(mode):
            raise TraceFormatError(f"{name}: {kind}, not a trace file; give a regular file")


def _check_memory(name: str, size: int) -> None:
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit != resource.RLIM_INFINITY and size * MEMORY_PER_BYTE > limit:
        raise TraceFormatError(
            f"{name}: {size / 1e9:.1f} GB does not fit in the {limit / 1e9:.1f} GB of memory "
            "this process may use (ulimit -v); record fewer steps, or load it where it fits"
        )


def lines(f: BinaryIO, name: str) -> Iterator[tuple[int, bytes]]:
    """``(line number, line)`` for each line of ``f``, within Note [Bounded reading]'s limits.

    Raises:
        TraceFormatError: a line is longer than :data:`MAX_LINE_BYTES`, or the file
            holds more than :data:`MAX_RECORDS` lines.
    """
    lineno = 0
    while True:
        raw = f.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > MAX_LINE_BYTES:
            raise TraceFormatError(
                f"{name}, line {lineno}: longer than {MAX_LINE_BYTES >> 20} MiB, which no "
                "trace record is; is this a trace file?"
            )
        if lineno > MAX_RECORDS:
            raise TraceFormatError(
                f"{name}, line {lineno}: more than {MAX_RECORDS:,} records, more than a trace "
                "holds; record fewer steps"
            )
        yield lineno, raw


def out_of_memory(name: str, lineno: int) -> TraceFormatError:
    """What running out of memory at ``lineno`` is said as."""
    return TraceFormatError(
        f"{name}, line {lineno}: out of memory while reading the trace; record fewer steps, "
        "or load it where more memory is free"
    )
