"""What every ``autograd-viz`` command shares: its errors, its parser, its helpers.

A user mistake (a missing file, a bad trace, a script that raises) ends in one
line on stderr, ``autograd-viz: error: ...``, and a non-zero exit status:
commands raise :class:`UsageError` or :class:`CommandError` and
:func:`autograd_viz.cli.main.main` prints it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, NoReturn

from autograd_viz.trace.text import one_line, printable

if TYPE_CHECKING:
    from rich.console import Console

    from autograd_viz.trace import Trace

PROG = "autograd-viz"

ERROR_LIMIT = 2000
"""The longest error line printed, in characters (a name may be 100,000 long)."""


class UsageError(Exception):
    """The command line was wrong: an unknown command, a missing or bad argument."""


class CommandError(Exception):
    """A command could not do its job; the message is the one line ``main`` prints."""


class ArgumentParser(argparse.ArgumentParser):
    """An argument parser that raises instead of printing usage and exiting.

    ``main`` turns the error into one line on stderr, so a typo gives one line
    to read instead of a usage block.
    """

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def script_and_args(args: argparse.Namespace, command: str) -> tuple[str, list[str]]:
    """SCRIPT and its ARGS from ``args.script_and_args``.

    A leading ``--`` (``record -o t.jsonl -- SCRIPT``), which argparse keeps, is dropped.

    Raises:
        UsageError: SCRIPT is missing.
    """
    words = list(args.script_and_args)
    if words[:1] == ["--"]:
        del words[0]
    if not words:
        raise UsageError(f"{command}: missing SCRIPT, the Python script to run")
    return words[0], words[1:]


def load_trace(path: str) -> Trace:
    """Load a trace file; what is wrong with it becomes the one line ``main`` prints.

    Raises:
        CommandError: the file cannot be read or is not a valid trace.
    """
    from autograd_viz.trace import Trace, TraceFormatError

    try:
        return Trace.load(path, progress=_LoadProgress(path) if sys.stderr.isatty() else None)
    except TraceFormatError as exc:
        raise CommandError(f"invalid trace file {exc}") from None
    except OSError as exc:
        raise CommandError(f"cannot read trace {path}: {exc.strerror or exc}") from None


class _LoadProgress:
    """``reading TRACE: 42% of 169 MB`` on stderr, on one line, for a file that takes a while."""

    SHOWN_FROM = 16 << 20
    """Smaller files load in well under a second: nothing is shown."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.shown = False

    def __call__(self, done: int, size: int) -> None:
        if size < self.SHOWN_FROM:
            return
        if done >= size:
            if self.shown:
                sys.stderr.write("\r\033[K")  # the line goes; the TUI comes
                sys.stderr.flush()
            return
        self.shown = True
        sys.stderr.write(
            f"\r{PROG}: reading {one_line(self.path)}: {100 * done // size}% of {size >> 20} MB"
        )
        sys.stderr.flush()


def check_output(path: str) -> None:
    """Fail before doing any work when ``path`` cannot be an output file."""
    if os.path.isdir(path):
        raise CommandError(f"cannot write {path}: it is a directory")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CommandError(f"cannot write {path}: directory {directory} does not exist")


def shown(text: object) -> str:
    """``text`` from a program or a trace as rich markup that shows it as written.

    Control characters become escapes and markup is escaped (Note [Names are
    text] in :mod:`autograd_viz.trace.text`).
    """
    from rich.markup import escape

    return escape(printable(text))


def error_line(message: object) -> str:
    """One line of a message for stderr: control characters escaped, cut to a readable length."""
    return one_line(message, ERROR_LIMIT)


def rich_console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def note(message: str) -> None:
    """A line on stderr about what happened (names in it are shown escaped)."""
    print(f"{PROG}: {error_line(message)}", file=sys.stderr)
