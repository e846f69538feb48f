"""A child process's start-up under a watching command.

``record``, ``nan``, ``grads`` and ``run --print`` follow the processes a script starts
(Note [Children armed by the environment] in
:mod:`autograd_viz.launch.processes`): each child starts watching in
:func:`start_child`, and saves its own trace (or prints its calls) as it
goes and when it exits; what the watching command then says of them is
:mod:`autograd_viz.cli.jobs`'s.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autograd_viz.launch.processes import ChildSettings
    from autograd_viz.trace import Trace

_kept: list[contextlib.ExitStack] = []
"""A child's watching, open until the process exits."""


def start_child() -> None:
    """Watch this process as the command that started its parent asked, if one did."""
    from autograd_viz.launch.child_signals import saved_on_signals
    from autograd_viz.launch.processes import note_process_groups, read_settings, watch_as_child
    from autograd_viz.launch.uncaught import trim_uncaught
    from autograd_viz.sources.arming import when_torch_is_imported

    settings = read_settings()
    if settings is None:
        return
    trim_uncaught()  # Note [A child's uncaught error]
    saved_on_signals()  # Note [A child stopped by a signal]
    stack = contextlib.ExitStack()
    trace: Trace
    said = None
    if settings.command == "print":
        _print(stack, settings)
        return
    if settings.command == "grads":
        _grads(stack, settings)
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
        from autograd_viz.trace.recording import record

        trace = stack.enter_context(
            record(settings.max_values, **(settings.calls or {}), values=settings.values)
        )
    stack.enter_context(when_torch_is_imported(note_process_groups))
    _kept.append(stack)
    # Exit hooks run last in, first out: the recording ends (a --last ring hands over
    # the calls it kept) before the trace is saved.
    watch_as_child(trace, settings, said)
    atexit.register(stack.close)


def _grads(stack: contextlib.ExitStack, settings: ChildSettings) -> None:
    """``grads``' child: its own backward calls explained, and its report printed at exit,
    headed by its rank as under ``torchrun -m autograd_viz grads``, to the output it shares
    with its parent (one process at a time); whether a parameter got no gradient is left in
    the job's directory for the parent's exit status."""
    import fcntl
    import json

    from autograd_viz.grads.watch import watch_grads
    from autograd_viz.launch.processes import GRADS_SUFFIX, process_info

    watch = stack.enter_context(watch_grads())
    _kept.append(stack)
    pid = os.getpid()

    def report() -> None:
        if os.getpid() != pid:
            return  # a fork of this child says nothing at exit
        stack.close()
        with contextlib.suppress(Exception):  # the child's exit goes on
            grads = watch.report
            if not grads.calls:
                return  # no backward call here: nothing to say (torchrun's own helpers)
            info = process_info(settings.rank)
            grads.rank = info["rank"]
            from autograd_viz.cli.base import rich_console
            from autograd_viz.cli.grads import ROWS, print_grads_report

            sys.stdout.flush()
            with open(os.path.join(settings.job, "print.lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one process's report at a time
                console = rich_console()
                if grads.rank is None:  # no rank to head it (mp.spawn's workers): its pid
                    console.print(f"[bold]process {pid}[/bold]")
                print_grads_report(grads, console, rows=(settings.grads or {}).get("rows", ROWS))
                sys.stdout.flush()
            note = os.path.join(settings.job, f"{pid}{GRADS_SUFFIX}")
            with open(note + ".part", "w", encoding="utf-8") as f:
                json.dump({"rank": info["rank"], "pid": pid, "found": grads.found}, f)
            os.replace(note + ".part", note)

    atexit.register(report)


def _print(stack: contextlib.ExitStack, settings: ChildSettings) -> None:
    """``run --print``'s child: each call printed as it ends, its lines headed by the process
    (``[rank1]``), to the output it shares with its parent; nothing is saved."""
    from autograd_viz.cli.printing import CallPrinter, printing, process_prefix
    from autograd_viz.launch.processes import (
        follow_forks,
        note_process_groups,
        process_info,
        report_child,
    )
    from autograd_viz.sources.arming import when_torch_is_imported
    from autograd_viz.trace.calls import CallSelection

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
    from autograd_viz.launch.processes import (
        finish_streamed,
        follow_forks,
        note_process_groups,
        process_info,
        streamed_path,
    )
    from autograd_viz.sources.arming import when_torch_is_imported
    from autograd_viz.trace.calls import CallSelection
    from autograd_viz.trace.recording import Recording

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
