"""Readers of JSON values, the scalars: each decodes a value strictly or names what is wrong.

A *reader* takes a raw JSON value and returns it decoded, or raises
:class:`SchemaError` naming what was wrong; readers of lists and objects are
made of readers (:mod:`autograd_viz.trace.compose`), and the schema of a
trace file is a table of them (:mod:`autograd_viz.trace.schema`). Each reader
also writes the code of its usual case, for the compiled readers of Note
[One reader] in that module.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autograd_viz.trace.codegen import Code


class SchemaError(ValueError):
    """A value does not match the schema (the caller adds the line number)."""


INT_LIMIT = 2**64
"""The bound every integer of a trace file lies within."""


class Reader:
    """Reads one JSON value: calling it returns the value decoded, or raises
    :class:`SchemaError` naming what is wrong (Note [One reader])."""

    def __call__(self, value: Any) -> Any:
        return self.read(value)

    def read(self, value: Any) -> Any:
        """``value`` decoded; raises :class:`SchemaError` naming what is wrong."""
        raise NotImplementedError

    def test(self, src: str) -> str | None:
        """A Python expression, true exactly when the value named ``src`` is usual and reads
        as itself; ``None`` when reading it builds something (then :meth:`emit` does)."""
        return None

    def emit(self, code: Code, src: str) -> str:
        """Write the code that reads the value named ``src`` in its usual case, and leaves for
        the reader on anything else; returns an expression of the value read."""
        test = self.test(src)
        assert test is not None, f"{type(self).__name__} writes no code of its own"
        code.require(test)
        return src


def emit_or_read(reader: Reader, code: Code, src: str) -> str:
    """Write ``src`` as itself where ``reader``'s test holds, else read by ``reader`` where it
    stands (its error, if it has one, hands the whole value to the reader it is part of)."""
    out = code.name("x")
    code.line(f"{out} = {src} if ({reader.test(src)}) else {code.constant(reader.read)}({src})")
    return out


# -- floats: JSON has no NaN or Inf, so they travel as strings ------------------------

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def encode_float(value: float) -> float | str:
    """A float as JSON: itself when finite, else ``"nan"``, ``"inf"`` or ``"-inf"``."""
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "nan"
    return "inf" if value > 0 else "-inf"


class _Float(Reader):
    def read(self, value: Any) -> float:
        if type(value) is float and value - value == 0.0:  # finite (inf - inf is nan)
            return value
        if isinstance(value, bool):
            raise SchemaError(f"expected a number, got {_kind(value)}")
        if isinstance(value, int | float):
            try:
                result = float(value)
            except OverflowError:
                raise SchemaError("number out of range") from None
            if not math.isfinite(result):
                raise SchemaError("number out of range")
            return result
        if isinstance(value, str) and value in _NON_FINITE:
            return _NON_FINITE[value]
        raise SchemaError(f"expected a number, got {_kind(value)}")

    def test(self, src: str) -> str:
        return f"type({src}) is float and {src} - {src} == 0.0"

    def emit(self, code: Code, src: str) -> str:
        # Cheap enough to place here: a NaN or an Inf (a string), or an integer, is read by
        # the reader itself, so the record around it still reads in one go.
        return emit_or_read(self, code, src)


read_float = _Float()

# -- scalar readers --------------------------------------------------------------------


class _Int(Reader):
    def __init__(self, low: int) -> None:
        self.low = low

    def read(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(f"expected an integer, got {_kind(value)}")
        if not -INT_LIMIT <= value <= INT_LIMIT:
            raise SchemaError(f"integer {show(value)} out of range")
        if value < self.low:
            raise SchemaError(f"expected a non-negative integer, got {value}")
        return value

    def test(self, src: str) -> str:
        return f"type({src}) is int and {self.low} <= {src} <= {INT_LIMIT}"


read_int = _Int(-INT_LIMIT)
read_count = _Int(0)


class _Str(Reader):
    def __init__(self, empty: bool = True) -> None:
        self.empty = empty

    def read(self, value: Any) -> str:
        if not isinstance(value, str):
            raise SchemaError(f"expected a string, got {_kind(value)}")
        if not value and not self.empty:
            raise SchemaError("expected a module path, got an empty string")
        return value

    def test(self, src: str) -> str:
        return f"type({src}) is str" if self.empty else f"type({src}) is str and {src} != ''"


read_str = _Str()
read_path = _Str(empty=False)
"""A module path: a non-empty string (``"transformer.h.3.attn"``)."""


class _Bool(Reader):
    def read(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise SchemaError(f"expected true or false, got {_kind(value)}")
        return value

    def test(self, src: str) -> str:
        return f"type({src}) is bool"


read_bool = _Bool()


class _Any(Reader):
    """Any value, as it is (an event's ``data``, read by its kind's reader)."""

    def read(self, value: Any) -> Any:
        return value

    def test(self, src: str) -> str:
        return "True"

    def emit(self, code: Code, src: str) -> str:
        return src


anything = _Any()


class _OneOf(Reader):
    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = choices

    def read(self, value: Any) -> str:
        text = read_str.read(value)
        if text not in self.choices:
            raise SchemaError(f"expected one of {', '.join(self.choices)}; got {show(text)}")
        return text

    def test(self, src: str) -> str:
        if len(self.choices) == 1:
            return f"{src} == {self.choices[0]!r}"
        choices = ", ".join(map(repr, self.choices))  # a set display: a constant once compiled
        return f"type({src}) is str and {src} in {{{choices}}}"


def one_of(*choices: str) -> Reader:
    """One of a fixed set of strings."""
    return _OneOf(choices)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"the number {show(value)}"
    return names.get(type(value), type(value).__name__)


kind = _kind
"""How a value is named in a message: ``null``, ``a list``, ``the number 3``."""

_SHOWN = 60


def show(value: Any) -> str:
    """``repr(value)`` cut to a length that fits in an error message."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**_SHOWN:
        return f"an integer of {len(str(abs(value)))} digits"
    if isinstance(value, list | dict):
        return _kind(value)  # a nested value's repr is neither short nor useful
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[: _SHOWN - 3]}..."
