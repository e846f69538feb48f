"""Walking and editing parsed JSON records in tests: every path, a value at a path, a copy with one changed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into ``value`` (keys and list indices), the empty one first."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from paths(item, (*prefix, i))


def get(value: Any, path: tuple[Any, ...]) -> Any:
    """The value at ``path``."""
    for key in path:
        value = value[key]
    return value


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """A copy of ``value`` with ``new`` at ``path`` (what is not on the path is shared)."""
    if not path:
        return new
    head, *rest = path
    out = list(value) if isinstance(value, list) else dict(value)
    out[head] = replaced(value[head], tuple(rest), new)
    return out
