"""What a watching command says of the processes it followed, once they have ended.

``record`` names every child's trace (:func:`print_processes`), ``run
--print`` counts their calls by :func:`who` ran them, and ``nan`` names the
process that saw the first NaN or Inf by the wall clock
(:func:`first_finding`). Each child started watching itself
(:mod:`autograd_viz.cli.children`).
"""

from __future__ import annotations

import datetime
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autograd_viz.trace.text import count_words, shown

if TYPE_CHECKING:
    from rich.console import Console

    from autograd_viz.launch.processes import ChildReport
    from autograd_viz.nan.report import NanReport
    from autograd_viz.nan.unrecorded import MissedFinding
    from autograd_viz.trace import Trace


def print_processes(console: Console, children: list[ChildReport]) -> None:
    """One line per child process's trace."""
    from rich.filesize import decimal

    if not children:
        return
    count = len(children)
    console.print(f"  [bold]{count} child process{'' if count == 1 else 'es'}[/bold] recorded")
    for child in children:
        try:
            size = f", {decimal(os.path.getsize(child.path))}"
        except OSError:
            size = ""
        console.print(
            f"  {who(child.rank, child.world_size, child.pid):<14} {shown(_near(child.path))} "
            f"({count_words(child.graph_tasks, 'graph task')}, "
            f"{count_words(child.events, 'event')}{size})",
            soft_wrap=True,
        )


def _near(path: str) -> str:
    """``path`` relative to the working directory when it is inside it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def who(rank: int | None, world_size: int | None, pid: int) -> str:
    """``rank 1 of 2`` or ``pid 4242``."""
    if rank is None:
        return f"pid {pid}"
    return f"rank {rank}" + (f" of {world_size}" if world_size is not None else "")


@dataclass(frozen=True)
class ProcessFinding:
    """The process that saw the first NaN or Inf of a job, when, and its report or finding."""

    report: NanReport | None
    """Its report, when the first finding is one of the calls it recorded."""
    who: str
    """``rank 1 of 2``, ``pid 4242`` or ``this process``."""
    wall_ns: int
    """When, by the wall clock."""
    trace_path: str | None
    """Its trace file, when one is kept."""
    processes: int
    """How many processes saw one."""
    missed: MissedFinding | None = None
    """Its finding at the parameters, when the first is one of a backward call it did not
    record (Note [Checking calls not recorded])."""


def first_finding(
    own: tuple[NanReport, Trace, MissedFinding | None] | None,
    children: list[ChildReport],
    ignore: frozenset[str],
    kept: bool,
) -> tuple[ProcessFinding | None, int]:
    """The process whose first NaN or Inf came first by the wall clock, and backward calls in all.

    A process's findings are those of the calls it recorded (its trace) and
    the one at the parameters in a call it did not (``--every``, ``--steps``),
    which its report carries.

    Args:
        own: the watching process's report, trace and finding at the parameters, if it
            ran anything.
        children: the child processes' reports; their traces are read here.
        ignore: ``nan --ignore``'s ops.
        kept: whether the children's traces are kept (``nan -o``), to be named.
    """
    from autograd_viz.launch.processes import wall_ns
    from autograd_viz.nan.scan import find_nans
    from autograd_viz.nan.unrecorded import MissedFinding
    from autograd_viz.trace import Trace, TraceFormatError

    # (report, trace, its clock, label, path, missed) of each process
    candidates: list[Any] = []
    if own is not None:
        report, trace, missed = own
        # This process's clock, read now, where its trace has none (no ``process`` record).
        clock = _clock(trace) or (time.perf_counter_ns(), time.time_ns())
        candidates.append((report, trace, clock, "this process", None, missed))
    for child in children:
        label = who(child.rank, child.world_size, child.pid)
        try:
            child_missed = MissedFinding(**child.missed) if child.missed else None
        except TypeError:  # a report of another version: its trace says the rest
            child_missed = None
        try:
            loaded: Trace | None = Trace.load(child.path)
        except (OSError, TraceFormatError):
            loaded = None
        if loaded is None and child_missed is None:
            continue
        child_report = find_nans(loaded, ignore) if loaded is not None else None
        path = child.path if kept and loaded is not None else None
        candidates.append((child_report, loaded, child.clock, label, path, child_missed))
    found: list[tuple[int, NanReport | None, MissedFinding | None, str, str | None]] = []
    calls = 0
    seen: set[str] = set()
    for report, trace, clock, label, path, missed in candidates:
        if missed is not None:
            found.append((wall_ns(missed.t_ns, clock), None, missed, label, path))
            seen.add(label)
        if report is None:
            continue
        calls += report.backward_calls
        if report.first is None:
            continue
        t_ns = report.first.t_ns
        if t_ns is None:  # a finding made by hand
            t_ns = trace.events[report.first.event_index].t_ns
        found.append((wall_ns(t_ns, clock), report, None, label, path))
        seen.add(label)
    if not found:
        return None, calls
    when, first, missed, label, path = min(found, key=lambda item: item[0])
    return ProcessFinding(first, label, when, path, len(seen), missed), calls


def _clock(trace: Trace) -> tuple[int, int] | None:
    process: Any = trace.header.get("process")
    if not isinstance(process, dict):
        return None
    clock = process.get("clock")
    return (clock[0], clock[1]) if clock else None


def print_first_process(console: Console, finding: ProcessFinding, processes: int) -> None:
    """The line above ``nan``'s report when several processes ran: which one saw it first."""
    when = datetime.datetime.fromtimestamp(finding.wall_ns / 1e9, tz=datetime.UTC)
    others = finding.processes - 1
    also = f"; {others} other{'' if others == 1 else 's'} saw one later" if others else ""
    console.print(
        f"[bold]{shown(finding.who)}[/bold] saw the first NaN or Inf of {processes} "
        f"process{'' if processes == 1 else 'es'}, "
        f"at {when:%H:%M:%S.%f} UTC{also}",
        soft_wrap=True,
    )
    if finding.trace_path is not None:
        console.print(f"  trace        {shown(finding.trace_path)}", soft_wrap=True)


def print_own_rank(console: Console) -> None:
    """``rank 1 of 2:`` above a report, in a process that is one rank of several."""
    from autograd_viz.launch.processes import process_info, read_settings

    parent = read_settings()
    process = process_info(parent.rank if parent is not None else None)
    if process["rank"] is not None:
        label = who(process["rank"], process["world_size"], process["pid"])
        console.print(f"[bold]{label}[/bold] (pid {process['pid']}):")
