"""Readers made of readers: optional values, lists, tuples, maps and records (objects of
named fields), each reading its parts with theirs and saying where a part is wrong
(``grad: shape: [0]: expected a non-negative integer, got -1``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from autograd_viz.trace.readers import (
    Reader,
    SchemaError,
    anything,
    emit_or_read,
    kind,
    read_float,
    show,
)

if TYPE_CHECKING:
    from autograd_viz.trace.codegen import Code


class _Optional(Reader):
    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def read(self, value: Any) -> Any:
        return None if value is None else self.reader.read(value)

    def test(self, src: str) -> str | None:
        test = self.reader.test(src)
        return None if test is None else f"{src} is None or ({test})"

    def emit(self, code: Code, src: str) -> str:
        test = self.test(src)
        if test is not None and _reads_more(self.reader):
            return emit_or_read(self, code, src)  # null, or a float in any form
        if test is not None:
            code.require(test)
            return src
        out = code.name("o")
        with code.block(f"if {src} is None:"):
            code.line(f"{out} = None")
        with code.block("else:"):
            code.line(f"{out} = {self.reader.emit(code, src)}")
        return out


def optional(reader: Reader) -> Reader:
    """``null``, or what ``reader`` reads."""
    return _Optional(reader)


class _ListOf(Reader):
    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def read(self, value: Any) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise SchemaError(f"expected a list, got {kind(value)}")
        out: list[Any] = []
        read = self.reader.read
        try:
            for item in value:
                out.append(read(item))
        except SchemaError as exc:
            raise SchemaError(f"[{len(out)}]: {exc}") from None
        return tuple(out)

    def emit(self, code: Code, src: str) -> str:
        code.require(f"type({src}) is list")
        item = code.name("i")
        test = self.reader.test(item)
        if test is not None:
            with code.block(f"for {item} in {src}:"):
                code.require(test)
            return f"tuple({src})"
        out = code.name("l")
        code.line(f"{out} = []")
        with code.block(f"for {item} in {src}:"):
            code.line(f"{out}.append({self.reader.emit(code, item)})")
        return f"tuple({out})"


def list_of(reader: Reader) -> Reader:
    """A list, each item read by ``reader``: a tuple."""
    return _ListOf(reader)


_each_float = list_of(read_float)

_NUMBERS = frozenset({float, int})


class _Floats(Reader):
    """A list of numbers (a summary's values): one pass in C when every one is finite."""

    def read(self, value: Any) -> tuple[float, ...]:
        if type(value) is list and set(map(type, value)) <= _NUMBERS:
            try:
                if math.isfinite(sum(value)):  # any Inf or NaN, or an overflow, makes it not
                    return tuple(map(float, value))
            except OverflowError:
                pass  # a huge integer: the exact check below names it
        return _each_float.read(value)

    def emit(self, code: Code, src: str) -> str:
        floats = code.constant(frozenset({float}))
        isfinite = code.constant(math.isfinite)
        usual = (
            f"type({src}) is list and set(map(type, {src})) <= {floats} and {isfinite}(sum({src}))"
        )
        # Else the reader itself, as for one float (read_float.emit): a NaN among them too.
        out = code.name("x")
        code.line(f"{out} = tuple({src}) if ({usual}) else {code.constant(self.read)}({src})")
        return out


read_floats = _Floats()


class _TupleOf(Reader):
    def __init__(self, readers: tuple[Reader, ...]) -> None:
        self.readers = readers

    def read(self, value: Any) -> tuple[Any, ...]:
        readers = self.readers
        if not isinstance(value, list):
            raise SchemaError(f"expected a list of {len(readers)} items, got {kind(value)}")
        if len(value) != len(readers):
            raise SchemaError(f"expected a list of {len(readers)} items, got {len(value)}")
        out: list[Any] = []
        try:
            for reader, item in zip(readers, value, strict=True):
                out.append(reader.read(item))
        except SchemaError as exc:
            raise SchemaError(f"[{len(out)}]: {exc}") from None
        return tuple(out)

    def emit(self, code: Code, src: str) -> str:
        code.require(f"type({src}) is list and len({src}) == {len(self.readers)}")
        items = [code.name("t") for _ in self.readers]
        code.line(f"{', '.join(items)}, = {src}")
        read = [reader.emit(code, item) for reader, item in zip(self.readers, items, strict=True)]
        return f"({', '.join(read)},)"


def tuple_of(*readers: Reader) -> Reader:
    """A list of as many items as ``readers``, each read by its own: a tuple."""
    return _TupleOf(readers)


class _StrMap(Reader):
    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def read(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise SchemaError(f"expected an object, got {kind(value)}")
        out = {}
        for key, item in value.items():
            try:
                out[key] = self.reader.read(item)
            except SchemaError as exc:
                raise SchemaError(f"{show(key)}: {exc}") from None
        return out

    def emit(self, code: Code, src: str) -> str:
        code.require(f"type({src}) is dict")
        item = code.name("i")
        test = self.reader.test(item)
        if test is None:
            return super().emit(code, src)  # no such map in the schema: kept simple
        with code.block(f"for {item} in {src}.values():"):
            code.require(test)
        return f"dict({src})"


def str_map(reader: Reader) -> Reader:
    """A JSON object, each value read by ``reader``: a dict."""
    return _StrMap(reader)


class _Record(Reader):
    """A JSON object with exactly ``fields`` (plus any of ``optional_fields``): a dict of
    what each field's reader read, or, given ``build``, ``build(*values)`` of every field in
    order, required then optional, an absent one as its ``defaults`` entry (else ``None``)."""

    def __init__(
        self,
        fields: Mapping[str, Reader],
        optional_fields: Mapping[str, Reader],
        build: Callable[..., Any] | None,
        defaults: Mapping[str, Any],
    ) -> None:
        self.fields = dict(fields)
        self.optional_fields = dict(optional_fields)
        self.readers = {**optional_fields, **fields}
        self.reads = {name: reader.read for name, reader in self.readers.items()}
        self.required = frozenset(fields)
        self.allowed = frozenset(self.readers)
        self.build = build
        self.order = (*fields, *optional_fields)
        self.defaults = {name: defaults.get(name) for name in optional_fields}

    def read(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise SchemaError(f"expected an object, got {kind(value)}")
        keys = value.keys()
        if not keys >= self.required:
            missing = next(name for name in self.fields if name not in value)
            raise SchemaError(f"missing field {missing!r}")
        if not keys <= self.allowed:
            unknown = next(name for name in value if name not in self.allowed)
            raise SchemaError(f"unknown field {show(unknown)}")
        out = {}
        name = ""
        reads = self.reads
        try:
            for name, item in value.items():
                out[name] = reads[name](item)
        except SchemaError as exc:
            raise SchemaError(f"{name}: {exc}") from None
        if self.build is None:
            return out
        defaults = self.defaults
        return self.build(*[out[n] if n in out else defaults[n] for n in self.order])

    def emit(self, code: Code, src: str) -> str:
        required = code.constant(self.required)
        if self.required == self.allowed:
            code.require(f"type({src}) is dict and {src}.keys() == {required}")
        else:
            allowed = code.constant(self.allowed)
            code.require(f"type({src}) is dict and {required} <= {src}.keys() <= {allowed}")
        read: dict[str, str] = {}
        items: dict[str, str] = {}
        for name, reader in self.fields.items():
            item = items[name] = code.name("f")
            if reader is not anything or self.build is not None:  # else left for another reader
                code.line(f"{item} = {src}[{name!r}]")
            read[name] = reader.emit(code, item)
        for name, reader in self.optional_fields.items():
            item = items[name] = code.name("f")
            read[name] = self._emit_optional(code, src, name, item, reader)
        if self.build is not None:
            build = code.constant(self.build)
            return f"{build}({', '.join(read[name] for name in self.order)})"
        # A dict: the object itself, with what was built in place of those fields.
        changed = {name: out for name, out in read.items() if out != items[name]}
        return code.replace_fields(src, changed, frozenset(self.optional_fields))

    def _emit_optional(self, code: Code, src: str, name: str, item: str, reader: Reader) -> str:
        default = self.defaults[name]
        test = reader.test(item)
        if test is not None and self.build is None and not _reads_more(reader):
            with code.block(f"if {name!r} in {src}:"):
                code.line(f"{item} = {src}[{name!r}]")
                code.require(test)
            return item  # read as itself where present, left out where absent
        if _reads_as_itself(reader, default):
            code.line(f"{item} = {src}.get({name!r}, {default!r})")
            return reader.emit(code, item)
        out = code.name("p")
        with code.block(f"if {name!r} in {src}:"):
            code.line(f"{item} = {src}[{name!r}]")
            code.line(f"{out} = {reader.emit(code, item)}")
        with code.block("else:"):
            code.line(f"{out} = {code.constant(default)}")
        return out


def _reads_more(reader: Reader) -> bool:
    """Whether ``reader`` writes code of its own beyond its :meth:`~Reader.test` (reading
    an unusual value in place, as a float's does)."""
    return type(reader).emit is not Reader.emit


def _reads_as_itself(reader: Reader, value: Any) -> bool:
    """Whether ``reader`` reads ``value`` (a default: ``None``, 0) as that very value."""
    if value is not None and type(value) is not int:
        return False
    try:
        return reader(value) is value or (type(value) is int and reader(value) == value)
    except SchemaError:
        return False


def record(
    fields: Mapping[str, Reader],
    optional_fields: Mapping[str, Reader] = {},
    build: Callable[..., Any] | None = None,
    defaults: Mapping[str, Any] = {},
) -> Reader:
    """A JSON object with exactly ``fields`` (plus any of ``optional_fields``): a dict, or
    ``build(*values)`` (see :class:`_Record`)."""
    return _Record(fields, optional_fields, build, defaults)
