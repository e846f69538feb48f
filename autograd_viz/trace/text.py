"""Text that came from a program or a trace, made safe to show.

Note [Names are text]
~~~~~~~~~~~~~~~~~~~~~
Every string a trace carries (node, Function, tensor, thread and file names,
exception messages) was written by somebody else's program, and a trace file
is something people send each other. Every output shows such a string as
text, never interprets it:

* characters that act instead of showing (ESC and the other C0 and C1
  controls, DEL, bidirectional overrides, line and paragraph separators, lone
  surrogates) are written as escapes by :func:`printable`, so a name cannot
  set a terminal's title or colours, reorder the text around it, or make an
  SVG invalid;
* each output then escapes its own syntax where the text is put into it:
  rich or Textual markup (``[bold]``, ``[@click=...]``), DOT and HTML
  (``<``, ``&``, ``"``), JSON.

:func:`shorten` bounds what a one-line message quotes (a name can be 100,000
characters long).
"""

from __future__ import annotations

import re

from engine.naming import op_name
from engine.scheduler import UINT64_MAX

_ACTING = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)
"""Characters that act rather than show (see Note [Names are text])."""
_ACTING_BUT_NEWLINE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, *, newlines: bool = False) -> str:
    """``str(text)`` with every character that would act instead of show written as an escape.

    ESC becomes ``\\x1b``, a newline ``\\n`` (kept as a newline with
    ``newlines=True``, for outputs that show several lines), a right-to-left
    override ``\\u202e``; everything else is kept, other scripts and emoji
    included. Markup is not touched: each output escapes its own syntax after
    this (see Note [Names are text]).

    Args:
        text: the string (or any object, shown by ``str``).
        newlines: keep ``\\n`` as a line break.

    Returns:
        The text, safe to write to a terminal or a document.
    """
    text = str(text)
    pattern = _ACTING_BUT_NEWLINE if newlines else _ACTING
    return pattern.sub(_escape, text) if pattern.search(text) else text


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, with ``…`` and the count cut when cut."""
    if len(text) <= limit:
        return text
    tail = f"… (+{len(text) - limit:,} characters)"
    return text[: max(0, limit - len(tail))] + tail


def one_line(text: object, limit: int = 200) -> str:
    """:func:`printable` text, newlines escaped too, cut to ``limit`` characters.

    For what one line of output quotes: an error line, a status bar, a title.
    """
    return shorten(printable(text), limit)


def shown(text: object) -> str:
    """``text`` from a program or a trace as rich markup that shows it as written.

    Control characters become escapes and markup is escaped (Note [Names are
    text]).
    """
    from rich.markup import escape

    return escape(printable(text))


def shape_name(shape: tuple[int, ...]) -> str:
    """The name of an unnamed leaf of this shape: ``tensor[3, 4]``."""
    return f"tensor[{', '.join(str(d) for d in shape)}]"


def count_words(n: int, singular: str, plural: str | None = None) -> str:
    """``1 backward call``, ``0 backward calls``, ``2 more born``."""
    return f"{n:,} {singular if n == 1 else plural or singular + 's'}"


# -- thread names and sequence numbers, as every view writes them ------------------------

LIVE_THREAD = "autograd-viz-live"
"""The name of the thread a live session runs its target in."""

MAIN = "main"
"""The name every view gives the program's own thread, live or recorded."""


def thread_name(name: str) -> str:
    """An engine thread's name as every view writes it.

    The thread that runs the program is :data:`MAIN` whether it was Python's
    ``MainThread`` (a recorded script) or the live session's own thread; the
    engine's workers lose the ``autograd-`` they all share (``sim:0``).
    """
    if name in ("MainThread", LIVE_THREAD):
        return MAIN
    return name.removeprefix("autograd-")


def sequence_text(value: int | None, missing: str = "") -> str:
    """A sequence number as every view writes it: ``AccumulateGrad``'s ``UINT64_MAX`` as
    2⁶⁴−1; ``missing`` where there is none."""
    if value is None:
        return missing
    return "2⁶⁴−1" if value == UINT64_MAX else str(value)


__all__ = [
    "LIVE_THREAD",
    "MAIN",
    "UINT64_MAX",
    "count_words",
    "op_name",
    "printable",
    "sequence_text",
    "shorten",
    "shown",
    "thread_name",
]
