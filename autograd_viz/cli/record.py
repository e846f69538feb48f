"""``autograd-viz record`` and ``timeline``: a trace file of a script, a timeline of a trace.

* ``autograd-viz record [-o TRACE] SCRIPT [ARGS ...]`` runs a script with
  recording on and saves every backward call it makes as a trace file.
* ``autograd-viz timeline TRACE [-o JSON]`` turns a trace into a timeline for
  Perfetto or ``chrome://tracing`` (see ``autograd_viz.timeline``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from autograd_viz.cli.base import (
    PROG,
    ArgumentParser,
    CommandError,
    ScriptError,
    check_output,
    load_trace,
    note,
    options_only,
    rich_console,
    script_and_args,
    shown,
)
from autograd_viz.trace.text import printable

if TYPE_CHECKING:
    from rich.text import Text

    from autograd_viz.sources.processes import ChildReport
    from autograd_viz.trace import Trace, TraceStats

DEFAULT_TRACE = "trace.jsonl"
"""Where ``record`` writes its trace when not told."""


def run_record(args: argparse.Namespace) -> int:
    """``autograd-viz record``: run a script with recording on and save its trace."""
    from autograd_viz.cli.children import own_trace_path
    from autograd_viz.sources import record
    from autograd_viz.sources.processes import follow_children
    from autograd_viz.sources.script import (
        ScriptFailedError,
        ScriptNotFoundError,
        check_script,
        run_script,
    )

    script, script_args = script_and_args(args, "record")
    output = args.output or DEFAULT_TRACE
    check_output(output)
    try:
        check_script(script)
    except ScriptNotFoundError as exc:
        raise CommandError(str(exc)) from None
    status = 0
    failure: ScriptFailedError | None = None
    interrupted = False
    with (
        record(args.max_values) as trace,
        follow_children("record", trace, output, args.max_values) as job,
        _progress(trace, script),
    ):
        try:
            status = run_script(script, script_args)
        except ScriptFailedError as exc:
            failure = exc
        except KeyboardInterrupt:
            interrupted = True
        children = job.reports()
    if failure is not None:
        sys.stdout.flush()  # the script's own output comes before its traceback
        print(f"Traceback of {printable(script)}, which raised:", file=sys.stderr)
        print(printable(failure.script_traceback(), newlines=True), end="", file=sys.stderr)
    # The trace is saved whatever the script did: a partial trace is what shows where it failed.
    saved_to = own_trace_path(trace, output, children)
    size = 0
    try:
        if saved_to is not None:
            trace.save(saved_to)
            size = os.path.getsize(saved_to)
    except OSError as exc:
        raise CommandError(f"cannot write trace {saved_to}: {exc.strerror or exc}") from None
    complete = failure is None and not interrupted
    _print_record_summary(trace.stats(), script, saved_to, size, complete, children)
    output = saved_to or output
    if interrupted:
        note(f"partial trace saved to {output}")
        raise KeyboardInterrupt
    if failure is not None:
        raise ScriptError(str(failure), status=1)  # as python SCRIPT exits when it raises
    if status != 0:
        note(f"{script} exited with status {status}")
    return status


class _RecordingStatus:
    """The spinner's text; rich re-renders it on its own timer, not per engine event."""

    def __init__(self, trace: Trace, script: str) -> None:
        self.trace = trace
        self.script = script

    def __rich__(self) -> Text:
        from rich.text import Text

        return Text(f"Running {printable(self.script)}: {len(self.trace.events):,} events recorded")


@contextmanager
def _progress(trace: Trace, script: str) -> Iterator[None]:
    """A spinner with a live event count on stderr, when stderr is a terminal."""
    console = rich_console(stderr=True)
    if not console.is_terminal:
        yield
        return
    with console.status(_RecordingStatus(trace, script)):
        yield


def _print_record_summary(
    stats: TraceStats,
    script: str,
    output: str | None,
    size: int,
    complete: bool,
    children: list[ChildReport],
) -> None:
    from rich.filesize import decimal

    from autograd_viz.cli.children import print_processes

    console = rich_console()
    title = "Recorded" if complete else "Partial trace of"
    console.print(f"[bold]{title} {shown(script)}[/bold]", soft_wrap=True)
    if output is None:
        print_processes(console, children)
        return  # the children recorded everything
    rows = [
        ("graph tasks", f"{stats.graph_tasks:,}"),
        ("nodes run", f"{stats.nodes:,}"),
        ("events", f"{stats.events:,}"),
        ("duration", _duration(stats.duration_ns)),
        ("errors", _flagged(stats.errors)),
        ("anomalies", _flagged(stats.anomalies)),
        ("saved to", f"{shown(output)} ({decimal(size)})"),
    ]
    for label, value in rows:
        console.print(f"  {label:<12} {value}", soft_wrap=True)
    if not stats.events:
        console.print("  [dim]No backward pass ran while recording.[/dim]")
    print_processes(console, children)


def _flagged(count: int) -> str:
    return f"[bold red]{count:,}[/bold red]" if count else "0"


def _duration(ns: int) -> str:
    if ns < 1_000_000:
        return f"{ns / 1000:.1f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1_000_000:.1f} ms"
    return f"{ns / 1_000_000_000:.2f} s"


def _max_values(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


# -- timeline --------------------------------------------------------------------------


def run_timeline(args: argparse.Namespace) -> int:
    """``autograd-viz timeline``: write a trace's timeline for Perfetto or chrome://tracing.

    Several traces (the ranks of one job) make one timeline, a process per trace.
    """
    from autograd_viz.timeline import save_chrome_trace, save_chrome_trace_of_processes

    sources: list[str] = args.trace
    output: str = args.output or _timeline_name(sources[0], several=len(sources) > 1)
    check_output(output)
    traces = [load_trace(source) for source in sources]
    try:
        if len(traces) == 1:
            document = save_chrome_trace(traces[0], output)
        else:
            document = save_chrome_trace_of_processes(traces, output)
    except OSError as exc:
        raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
    events = document["traceEvents"]
    slices = sum(1 for e in events if e["ph"] == "X" and e["cat"] == "node")
    flows = sum(1 for e in events if e["ph"] == "s")
    lanes = sum(1 for e in events if e["name"] == "thread_name")
    processes = f"{len(traces)} processes, " if len(traces) > 1 else ""
    print(
        f"Wrote {printable(output)}: {processes}{slices} node slices, {flows} flows, "
        f"{lanes} threads. Open it in https://ui.perfetto.dev or chrome://tracing."
    )
    if len(traces) > 1 and not document["otherData"]["aligned"]:
        note("a trace does not say when it was recorded: each process starts at 0")
    return 0


def _timeline_name(trace_path: str, several: bool = False) -> str:
    """``run.jsonl`` → ``run.timeline.json``, next to the trace; ``run.rank0.jsonl`` → the same
    when it is one of several."""
    root, ext = os.path.splitext(trace_path)
    if several:
        root = re.sub(r"\.(rank|pid)\d+$", "", root)
    return f"{root if ext else trace_path}.timeline.json"


def add_record_options(record: argparse.ArgumentParser) -> None:
    """``record``'s options (before or after SCRIPT, Note [Options and the script's arguments])."""
    from autograd_viz.trace import DEFAULT_MAX_VALUES

    record.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="TRACE",
        help=f"the trace file to write (default: {DEFAULT_TRACE})",
    )
    record.add_argument(
        "--max-values",
        type=_max_values,
        default=DEFAULT_MAX_VALUES,
        metavar="N",
        help=f"keep the values of tensors with at most N elements (default: {DEFAULT_MAX_VALUES})",
    )


def add_record_commands(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    """Register ``record`` and ``timeline``."""
    record = commands.add_parser(
        "record",
        usage=f"{PROG} record [-h] [-o TRACE] [--max-values N] SCRIPT [ARGS ...]",
        help="run a Python script and record every backward pass it makes",
        description=(
            "Run SCRIPT as __main__ with ARGS, record every backward call into a trace "
            "file and print a summary. Options may come before or after SCRIPT; every "
            "other word after SCRIPT is the script's (after a '--', every word is). "
            "The exit status is the script's, as python gives it."
        ),
    )
    add_record_options(record)
    record.add_argument("script_and_args", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS ...]")
    record.set_defaults(run=run_record, option_parser=options_only(add_record_options))

    timeline = commands.add_parser(
        "timeline",
        help="turn a trace into a timeline for Perfetto or chrome://tracing",
        description=(
            "Write TRACE as Chrome Trace Event Format JSON: a lane per engine thread, a slice "
            "per node run and per graph task, arrows from each enqueue to the node's start."
        ),
    )
    timeline.add_argument(
        "trace",
        nargs="+",
        metavar="TRACE",
        help="a trace file from 'autograd-viz record'; several (t.rank0.jsonl t.rank1.jsonl) "
        "make one timeline with a process per trace, their clocks aligned",
    )
    timeline.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="JSON",
        help="the timeline file to write (default: TRACE with .timeline.json)",
    )
    timeline.set_defaults(run=run_timeline)
