"""Choosing which backward calls of a run to record: ``--steps``, ``--every``, ``--last``.

A training run makes thousands of backward calls; the ones that matter are a
few. A :class:`CallSelection` names them by their index in the run (the
first backward call from user code is 0; reentrant calls belong to the call
they run in), the same on the command line and in Python::

    CallSelection(steps="10-12,100")    # calls 10, 11, 12 and 100
    CallSelection(every=100)             # calls 0, 100, 200, ...
    CallSelection(last=5)                # every call, keeping only the last five

``steps`` and ``every`` together keep the calls either names; ``last`` then
keeps the last ``last`` of those (a flight recorder).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable


class CallSelectionError(ValueError):
    """A ``steps``, ``every`` or ``last`` value that does not name backward calls."""


class CallSelection:
    """Which backward calls a recorder keeps.

    Args:
        steps: call indices, from 0: a string such as ``"10-12,100"`` (ranges
            include both ends), or an iterable of ints (a ``range`` works).
        every: keep calls 0, N, 2N, ...
        last: keep only the last N of the selected calls (a flight recorder).

    Raises:
        CallSelectionError: a value that is not a non-negative index, a
            positive count, or a well-formed range.
    """

    def __init__(
        self,
        steps: str | Iterable[int] | None = None,
        every: int | None = None,
        last: int | None = None,
    ) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []  # exclusive; ranges sorted and merged
        self.steps: str | None = None
        """The steps as ``10-12,100``, or ``None`` when not given."""
        if steps is not None:
            ranges = parse_steps(steps) if isinstance(steps, str) else _int_ranges(steps)
            for start, stop in ranges:
                self._starts.append(start)
                self._ends.append(stop)
            pairs = zip(self._starts, self._ends, strict=True)
            self.steps = ",".join(str(a) if b == a + 1 else f"{a}-{b - 1}" for a, b in pairs)
        self.every = _positive("every", every)
        """Keep every Nth call from call 0, or ``None``."""
        self.last = _positive("last", last)
        """Keep only the last N selected calls, or ``None``."""

    @property
    def filters(self) -> bool:
        """Whether some calls are left out (``steps`` or ``every`` was given)."""
        return self.steps is not None or self.every is not None

    def wants(self, index: int) -> bool:
        """Whether the backward call numbered ``index`` (from 0) is recorded."""
        every = self.every
        if every is not None:
            if index % every == 0:
                return True
        elif self.steps is None:
            return True
        i = bisect.bisect_right(self._starts, index) - 1
        return i >= 0 and index < self._ends[i]

    def describe(self) -> str:
        """In words, for a summary line: ``calls 10-12,100, the last 3``."""
        parts = []
        if self.steps is not None:
            parts.append(f"calls {self.steps}")
        if self.every is not None:
            parts.append("every call" if self.every == 1 else f"every {_ordinal(self.every)} call")
        if not parts:
            parts.append("every call")
        text = " and ".join(parts)
        if self.last is not None:
            text += f", the last {self.last} kept"
        return text

    def __repr__(self) -> str:
        return f"CallSelection(steps={self.steps!r}, every={self.every!r}, last={self.last!r})"


def _ordinal(n: int) -> str:
    """``2nd``, ``3rd``, ``11th``, ``21st``, ``100th``."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def parse_steps(text: str) -> list[tuple[int, int]]:
    """``"10-12,100"`` as sorted, merged ``[start, stop)`` ranges: ``[(10, 13), (100, 101)]``.

    Raises:
        CallSelectionError: an empty list, a part that is not ``N`` or
            ``A-B`` with ``0 <= A <= B``.
    """
    ranges = []
    for part in text.split(","):
        item = part.strip()
        low, dash, high = item.partition("-")
        try:
            start = _index(low)
            stop = _index(high) if dash else start
        except ValueError:
            raise CallSelectionError(
                f"steps: {item!r} is not a call index or a range such as 10-12 "
                "(indices count backward calls from 0)"
            ) from None
        if stop < start:
            raise CallSelectionError(f"steps: the range {item!r} ends before it starts")
        ranges.append((start, stop + 1))
    return _merged(ranges)


def _index(text: str) -> int:
    text = text.strip()
    if not text.isdigit() or not text.isascii():
        raise ValueError(text)
    return int(text)


def _int_ranges(steps: Iterable[int]) -> list[tuple[int, int]]:
    if isinstance(steps, range) and steps.step == 1:
        if steps.start < 0:
            raise CallSelectionError(f"steps: {steps!r} starts below 0")
        return [(steps.start, steps.stop)] if len(steps) else []
    ranges = []
    for step in steps:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise CallSelectionError(f"steps: {step!r} is not a call index (an int from 0)")
        ranges.append((step, step + 1))
    return _merged(ranges)


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(stop, merged[-1][1]))
        else:
            merged.append((start, stop))
    return merged


def _positive(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CallSelectionError(f"{name} must be a positive integer, got {value!r}")
    return value
