"""The code a compiled reader is written in: its lines, constants and local names.

Each reader (:mod:`autograd_viz.trace.readers`, :mod:`autograd_viz.trace.compose`)
writes the code of its usual case into a :class:`Code`;
:func:`autograd_viz.trace.fast.compiled` makes the function (Note [One
reader] in :mod:`autograd_viz.trace.schema`). The code raises
``_UnusualError``, which that function defines, at the first thing that is
not the usual case.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

TOP = "value"
"""The name of the value a compiled function reads."""


class Code:
    """The code a compiled function is written in, as readers write it."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.after: list[str] = []
        """Lines run once every field is read: the fields of the value itself replaced."""
        self.constants: dict[str, Any] = {}
        self._depth = 2  # in the function, in its try
        self._names = 0

    def name(self, hint: str) -> str:
        """A new local name."""
        self._names += 1
        return f"{hint}{self._names}"

    def constant(self, value: Any) -> str:
        """A global name the code reads ``value`` by."""
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def line(self, text: str) -> None:
        """One line at the current depth."""
        self.lines.append("    " * self._depth + text)

    def require(self, test: str) -> None:
        """Go on only where ``test`` holds; else the reader reads the value."""
        self.line(f"if not ({test}): raise _UnusualError")

    @contextmanager
    def block(self, header: str) -> Iterator[None]:
        """Lines under ``header`` (``if ...:``, ``for ...:``, ``else:``)."""
        self.line(header)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def replace_fields(self, src: str, changed: dict[str, str], optional: frozenset[str]) -> str:
        """The object ``src`` with ``changed`` fields (name: expression) in place of its own:
        the value itself once all is read (a value left to the reader stays as it was),
        a copy of an object within it."""
        if not changed:
            return src
        if src == TOP:
            target, lines = src, self.after
        else:
            target = self.name("d")
            self.line(f"{target} = dict({src})")
            lines = self.lines
        indent = "    " if src == TOP else "    " * self._depth
        for name, out in changed.items():
            store = f"{target}[{name!r}] = {out}"
            lines.append(
                f"{indent}if {name!r} in {target}: {store}"
                if name in optional
                else f"{indent}{store}"
            )
        return target
