"""Timing machinery shared by the suite: cases, interleaved repeats, medians.

Note [Interleaving]
~~~~~~~~~~~~~~~~~~~
The machine these numbers come from has two cores and other work on it, so a
figure taken in one block of repeats drifts with whatever else ran then. Every
repetition therefore runs each contender once, in turn (A B A B ...), with the
cyclic garbage collector in the same mode and after a full collection, and a
figure is the median over repetitions. Contenders see the same machine state,
and a noisy moment spoils one sample of each instead of every sample of one.

Note [A heap each contender left]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Contenders share one process, so what one frees can be paid for by the next.
PyTorch frees a graph's nodes into glibc's fast bins; the next malloc of a
kilobyte or more (in our engine, the dependency dict growing at the start of
a backward) consolidates every chunk in them. After PyTorch's W1 at 10⁵
steps that one malloc took 17 ms (perf: ``malloc_consolidate``), and our
next W1 backward at 10³ steps ran at 12-16 µs a node instead of 4. Our own
freed arrays can cost PyTorch the same way. So each timed run starts, after
the full collection, with glibc's heap consolidated and trimmed
(``malloc_trim(0)``), where the C library has it: every contender pays only
for its own allocations.

Usage: imported by ``benchmarks/run.py`` (``python -m benchmarks.run``).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from benchmarks.chain import gc_mode, settle_heap

CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
"""``--clock`` names: ``wall`` is elapsed time; ``cpu`` is this process's CPU time, which
other processes on a busy machine disturb much less (waiting for a core does not count)."""

_clock: Callable[[], float] = time.perf_counter
_clock_name = "wall"


def use_clock(name: str) -> None:
    """Make :func:`now` read the clock ``name`` (a key of :data:`CLOCKS`)."""
    global _clock, _clock_name  # one setting for every peer, chosen once per run
    _clock, _clock_name = CLOCKS[name], name


def clock_name() -> str:
    """The clock :func:`now` reads (for child processes, which must time with the same)."""
    return _clock_name


def now() -> float:
    """Seconds on the chosen clock (:func:`use_clock`); peers time their phases with it."""
    return _clock()


Timings = dict[str, float]
"""Seconds per named phase of one run, such as ``{"forward": ..., "backward": ...}``."""

Contender = Callable[["Case"], Timings]
"""One peer (or variant) running one case once."""


class UnsupportedError(Exception):
    """This contender cannot run this case (such as a matrix on scalar values)."""


class WrongResultError(RuntimeError):
    """A contender computed a wrong gradient, so its timing would mean nothing."""


@dataclass(frozen=True)
class Case:
    """One size (and variant) of a workload."""

    label: str
    """How the case reads in a table, such as ``"n=10,000"``."""
    params: dict[str, Any]
    """What the contenders need to run it."""
    units: int
    """What a figure is divided by: graph nodes, or 1 for a whole step."""


@dataclass(frozen=True)
class Workload:
    """A benchmark: its cases, its contenders and how its figures read."""

    key: str
    """The ``--workload`` name, such as ``"W1"``."""
    title: str
    """The table title."""
    unit: str
    """How figures read: ``"µs/node"`` or ``"ms/step"``."""
    scale: float
    """Seconds per unit times this is the figure (1e6 for µs, 1e3 for ms)."""
    cases: Callable[[list[int] | None], list[Case]]
    """The cases for the given ``--sizes`` (``None``: the defaults)."""
    contenders: dict[str, Contender]
    """By name, in the order they run (and are shown)."""
    shown: tuple[str, ...]
    """The phases the table shows; every phase goes to the JSON lines."""
    references: tuple[str, ...]
    """Contenders the others are divided by in the ratio columns."""
    ratios: tuple[str, ...] = ()
    """The phases the ratio columns show; empty: every shown phase."""
    notes: tuple[str, ...] = ()
    """Lines printed under the table."""
    summarize: Callable[[list[Cell]], list[str]] | None = None
    """Derived figures, as lines printed under the table."""


@dataclass
class Cell:
    """Every sample of one (case, gc mode, contender)."""

    case: Case
    collect: bool
    contender: str
    samples: dict[str, list[float]] = field(default_factory=dict)
    unsupported: str | None = None
    """Why the contender cannot run this case, if it cannot."""

    def add(self, timings: Timings) -> None:
        for phase, seconds in timings.items():
            self.samples.setdefault(phase, []).append(seconds)

    def median(self, phase: str, scale: float) -> float:
        """The median of ``phase`` in the workload's unit."""
        return statistics.median(self.samples[phase]) / self.case.units * scale


def run_once(contender: Contender, case: Case, collect: bool) -> Timings:
    """Run ``contender`` on ``case`` from a clean heap with the collector on or off."""
    gc.collect()
    settle_heap()
    with gc_mode(collect):
        timings = contender(case)
    gc.collect()
    return timings


def measure(
    workload: Workload,
    cases: list[Case],
    repeat: int,
    gc_modes: tuple[bool, ...],
    on_sample: Callable[[str], None] = lambda _: None,
) -> list[Cell]:
    """Every cell of ``workload``, contenders interleaved (see Note [Interleaving]).

    Each contender first runs the two smallest cases once, untimed, to warm up
    imports, allocators, BLAS threads and engine worker threads.
    """
    for contender in workload.contenders.values():
        for case in sorted(cases, key=lambda c: c.units)[:2]:
            with suppress(UnsupportedError):
                run_once(contender, case, collect=True)
    cells: list[Cell] = []
    for case in cases:
        for collect in gc_modes:
            row = {name: Cell(case, collect, name) for name in workload.contenders}
            for _ in range(repeat):
                for name, contender in workload.contenders.items():
                    cell = row[name]
                    if cell.unsupported is not None:
                        continue
                    on_sample(f"{workload.key} {case.label} gc={'on' if collect else 'off'} {name}")
                    try:
                        cell.add(run_once(contender, case, collect))
                    except UnsupportedError as exc:
                        cell.unsupported = str(exc)
            cells.extend(row.values())
    return cells


def check_close(who: str, got: float, expected: float, rtol: float) -> None:
    """Raise :class:`WrongResultError` unless ``got`` is within ``rtol`` of ``expected``."""
    if not abs(got - expected) <= rtol * abs(expected):
        raise WrongResultError(f"{who}: got {got!r}, expected {expected!r} (rtol {rtol})")
