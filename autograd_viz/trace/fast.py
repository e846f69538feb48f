"""A reader of the schema compiled into one straight-line function (Note [One reader]).

:func:`compiled` asks a record's reader (:mod:`autograd_viz.trace.schema`) to
write the code of its usual case, field by field into one function, and
makes it: the function reads a usual record in one go, a few type and range
checks per field and no call per field, and hands any other to the reader
itself. The code comes from the schema's table alone; ``fn.source`` shows it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from autograd_viz.trace.readers import Reader, SchemaError

TOP = "value"
"""The name of the value a compiled function reads."""


class _UnusualError(Exception):
    """Raised by compiled code at the first thing that is not the usual case."""


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


def compiled(reader: Reader, name: str) -> Callable[[Any], Any]:
    """``reader`` as one function: the same value for the same JSON value, or the same error.

    Args:
        reader: a reader of the schema (a record, usually).
        name: the function's name, as tracebacks show it.
    """
    code = Code()
    result = reader.emit(code, TOP)
    source = "\n".join(
        [
            f"def {name}({TOP}):",
            "    try:",
            *code.lines,
            f"        result = {result}",
            "    except (_UnusualError, SchemaError):",
            f"        return _read({TOP})",
            *code.after,
            "    return result",
        ]
    )
    namespace = {**code.constants, "_UnusualError": _UnusualError, "SchemaError": SchemaError}
    namespace["_read"] = reader.read
    exec(compile(source, f"<{name}: compiled from the schema>", "exec"), namespace)
    function: Callable[[Any], Any] = namespace[name]
    function.source = source  # type: ignore[attr-defined]
    return function


class Compiled(dict[str, Callable[[Any], Any]]):
    """Readers by name, each compiled when first asked for: a process compiles only the
    records it reads, and importing costs nothing.

    Raises:
        KeyError: for a name it has no reader of.
    """

    def __init__(self, readers: dict[str, Reader]) -> None:
        super().__init__()
        self.readers = readers

    def __missing__(self, name: str) -> Callable[[Any], Any]:
        function = self[name] = compiled(self.readers[name], f"read_{name}")
        return function
