"""A reader of the schema compiled into one straight-line function (Note [One reader]).

:func:`compiled` asks a record's reader (:mod:`autograd_viz.trace.schema`) to
write the code of its usual case, field by field into one function, and
makes it: the function reads a usual record in one go, a few type and range
checks per field and no call per field, and hands any other to the reader
itself. The code comes from the schema's table alone; ``fn.source`` shows it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autograd_viz.trace.codegen import TOP, Code
from autograd_viz.trace.readers import Reader, SchemaError


class _UnusualError(Exception):
    """Raised by compiled code at the first thing that is not the usual case
    (:meth:`~autograd_viz.trace.codegen.Code.require`)."""


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
