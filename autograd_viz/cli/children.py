"""Several processes under one watching command: a child's start-up, and what the parent says.

``record`` and ``nan`` follow the processes a script starts (Note [Children
armed by the environment] in :mod:`autograd_viz.sources.processes`): each
child starts watching in :func:`start_child`, saves its own trace when it
exits, and the command then names every trace (:func:`print_processes`) or,
for ``nan``, the process that saw the first NaN or Inf by the wall clock
(:func:`first_finding`).
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autograd_viz.trace.text import shown

if TYPE_CHECKING:
    from rich.console import Console

    from autograd_viz.nan.report import NanReport
    from autograd_viz.nan.unrecorded import MissedFinding
    from autograd_viz.sources.processes import ChildReport, ChildSettings
    from autograd_viz.trace import Trace

_kept: list[contextlib.ExitStack] = []
"""A child's watching, open until the process exits."""


def start_child() -> None:
    """Watch this process as the command that started its parent asked, if one did."""
    from autograd_viz.sources.arming import when_torch_is_imported
    from autograd_viz.sources.processes import note_process_groups, read_settings, watch_as_child
    from autograd_viz.sources.tracebacks import trim_uncaught

    settings = read_settings()
    if settings is None:
        return
    trim_uncaught()  # Note [A child's uncaught error]
    _saved_on_signals()
    stack = contextlib.ExitStack()
    trace: Trace
    said = None
    if settings.command == "print":
        _print(stack, settings)
        return
    if settings.command == "nan":
        from autograd_viz.nan.watch import watch_nan

        options = settings.nan or {}
        watch = stack.enter_context(
            watch_nan(
                first=bool(options.get("first")),
                forward=bool(options.get("forward", True)),
                inf=bool(options.get("inf", True)),
                ignore=options.get("ignore", ()),
                max_values=settings.max_values,
                values=settings.values,
                **(settings.calls or {}),
            )
        )
        trace, said = watch.trace, watch.report_fields
    elif settings.output is not None:
        _stream(stack, settings)
        return
    else:
        from autograd_viz.sources import record

        trace = stack.enter_context(
            record(settings.max_values, **(settings.calls or {}), values=settings.values)
        )
    stack.enter_context(when_torch_is_imported(note_process_groups))
    _kept.append(stack)
    # Exit hooks run last in, first out: the recording ends (a --last ring hands over
    # the calls it kept) before the trace is saved.
    watch_as_child(trace, settings, said)
    atexit.register(stack.close)


# Note [A child stopped by a signal]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# torchrun and torch.multiprocessing.spawn stop the other ranks with SIGTERM
# when one fails, and a scheduler preempts a job with it. Killed by a signal, a
# child never reaches its exit hooks: a flight recorder (--last) would lose
# every call it held, and a streamed trace its `process` record and its rank's
# name. So a watched child takes SIGTERM and SIGHUP, when nobody else did
# (their handler is the default one), as `record` takes them in the watching
# process: one line on stderr, then SystemExit on the main thread, which runs
# the program's `finally` blocks and the exit hooks that save what the process
# holds, without a traceback (multiprocessing and Python exit quietly on it),
# and last, the process ends by the same signal, so the launcher sees the exit
# status it would have seen unwatched. A Python handler runs only once the main
# thread is back in Python: a rank stuck inside a collective saves when the
# collective returns or fails (gloo fails it as soon as a peer has gone), or
# not at all when the launcher's SIGKILL comes first. `kill -9` runs nothing:
# a streamed child keeps the calls it had written, all but the one in flight.

_SAVING_SIGNALS = ("SIGTERM", "SIGHUP")
_stopped_by: list[int] = []
"""The signal that stopped this process, once one did (Note [A child stopped by a signal])."""


def _saved_on_signals() -> None:
    """SIGTERM and SIGHUP save what this child holds, then end it by the same signal."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    taken = False
    for name in _SAVING_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) == signal.SIG_DFL:
            signal.signal(signum, _stop)
            taken = True
    if taken:
        # Registered before the hooks that save: exit hooks run last in, first out.
        atexit.register(_end_by_signal)


def _stop(signum: int, frame: object) -> None:
    import signal

    if _stopped_by:
        return  # a second signal while the first one is saving: the save goes on
    _stopped_by.append(signum)
    with contextlib.suppress(Exception):
        sys.stderr.write(
            f"autograd-viz: process {os.getpid()} got {signal.Signals(signum).name}: "
            "saving what it recorded, then ending by it\n"
        )
        sys.stderr.flush()
    raise SystemExit(128 + signum)


def _end_by_signal() -> None:
    """The last exit hook: a process stopped by a signal ends by it, as it would unwatched."""
    import signal

    if not _stopped_by:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(_stopped_by[0], signal.SIG_DFL)
    os.kill(os.getpid(), _stopped_by[0])


def _print(stack: contextlib.ExitStack, settings: ChildSettings) -> None:
    """``run --print``'s child: each call printed as it ends, its lines headed by the process
    (``[rank1]``), to the output it shares with its parent; nothing is saved."""
    from autograd_viz.cli.printing import CallPrinter, printing, process_prefix
    from autograd_viz.sources.arming import when_torch_is_imported
    from autograd_viz.sources.calls import CallSelection
    from autograd_viz.sources.processes import (
        follow_forks,
        note_process_groups,
        process_info,
        report_child,
    )

    printer = CallPrinter(prefix=process_prefix(settings.rank, None))
    calls = CallSelection(**(settings.calls or {}))
    recorder = stack.enter_context(
        printing(printer, settings.max_values, calls, settings.values, settings.observe)
    )
    stack.enter_context(when_torch_is_imported(note_process_groups))
    _kept.append(stack)
    pid = os.getpid()

    def report() -> None:
        if os.getpid() != pid:
            return  # a fork of this child prints, and says nothing at exit
        with contextlib.suppress(Exception):  # the child's exit goes on
            report_child(settings, process_info(settings.rank), "", printer.calls, 0)

    # Exit hooks run last in, first out: the calls still in flight at exit are printed
    # (as far as they ran), then the parent is told how many calls this process printed.
    atexit.register(report)
    atexit.register(stack.close)
    follow_forks(_Forks(settings), recorder.trace)


def _stream(stack: contextlib.ExitStack, settings: ChildSettings) -> None:
    """``record``'s child: each call written to its file as it ends, as the parent's are, so
    memory stays flat however long the child trains."""
    from autograd_viz.sources.arming import when_torch_is_imported
    from autograd_viz.sources.calls import CallSelection
    from autograd_viz.sources.processes import (
        finish_streamed,
        follow_forks,
        note_process_groups,
        process_info,
        streamed_path,
    )
    from autograd_viz.sources.recording import Recording

    path = streamed_path(settings)
    recording = Recording(
        settings.max_values,
        CallSelection(**(settings.calls or {})),
        path,
        values=settings.values,
        watch=settings.observe,
    )
    stack.enter_context(recording.running())
    stack.enter_context(when_torch_is_imported(note_process_groups))
    _kept.append(stack)
    pid = os.getpid()

    def finish() -> None:
        if os.getpid() != pid:
            return  # a fork of this child has its own
        try:
            recording.trace.header["process"] = process_info(settings.rank)
            stack.close()  # the last calls written, the header rewritten with the process
            problem = recording.save_error or (recording.writer.error if recording.writer else None)
            if problem is not None:
                raise problem
            stats = recording.stats()
            finish_streamed(path, settings, stats.graph_tasks, stats.events)
        except Exception as exc:  # noqa: BLE001 - the child's exit goes on; one line says why
            print(f"autograd-viz: process {pid} could not save its trace: {exc}", file=sys.stderr)

    atexit.register(finish)
    follow_forks(_Forks(settings), recording.trace)


class _Forks:
    """Keeps a streaming child's after-fork hook registered for the life of the process."""

    def __init__(self, settings: ChildSettings) -> None:
        self.settings = settings
        _held.append(self)


_held: list[_Forks] = []


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
            f"({_count(child.graph_tasks, 'graph task')}, {_count(child.events, 'event')}{size})",
            soft_wrap=True,
        )


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


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
    from autograd_viz.nan.report import find_nans
    from autograd_viz.nan.unrecorded import MissedFinding
    from autograd_viz.sources.processes import wall_ns
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
    from autograd_viz.sources.processes import process_info, read_settings

    parent = read_settings()
    process = process_info(parent.rank if parent is not None else None)
    if process["rank"] is not None:
        label = who(process["rank"], process["world_size"], process["pid"])
        console.print(f"[bold]{label}[/bold] (pid {process['pid']}):")
