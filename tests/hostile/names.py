"""The one list of hostile names every output is tested with.

Each is something a program may legally call a Function, a tensor, a thread
or a script, or put in an exception message, and each would do harm if an
output interpreted it instead of showing it (see Note [Names are text] in
``autograd_viz.trace.text``).
"""

from __future__ import annotations

HOSTILE: dict[str, str] = {
    "rich_close": "[/bold]Nan",
    "rich_action": "[@click=app.quit]quit[/]",
    "textual_variable": "[$accent]styled[/]",
    "markup_link": "[link=https://example.com]x[/link]",
    "osc_title": "\x1b]0;pwned\x07\x1b[5;31mEvil",
    "csi_clear": "\x1b[2J\x1b[H\x1b[?1049h",
    "c1_csi": "\x9b31mC1",
    "bell_backspace": "a\x07\x08\x08b\rc\x00d\x7f",
    "html": '"<b>&amp;</b>"',
    "script_end": "</script><script>alert(1)</script>",
    "dot_break": '"} ]; digraph { x [label=<<b>y</b>>]; //',
    "dot_escapes": "\\N \\G \\L \\l \\",
    "newlines": "line one\nline two\r\nthree\u2028four",
    "rtl": "\u202eevil\u202c \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627",
    "unicode": "\u0394\u2207 \U0001f600 \u6f22\u5b57 e\u0301 \u200b",
    "surrogate": "lone \ud800 surrogate",
    "json": '{"type": "event"}\n{"x": 1}',
    "percent": "%s %d {0} {name} $HOME",
    "long": "L" * 100_000,
}
"""Hostile strings by a short id (the pytest parameter id)."""

ACTING = ("\x1b", "\x07", "\x9b", "\x00", "\x08", "\x7f", "\u202e", "\ud800")
"""Characters no output may contain raw when it shows a hostile name."""
