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
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

from autograd_viz.cli.base import (
    PROG,
    ArgumentParser,
    CommandError,
    ScriptError,
    UsageError,
    add_call_option,
    check_output,
    load_trace,
    note,
    positive,
    rich_console,
    script_and_args,
    takes_a_script,
)
from autograd_viz.trace.text import count_words, one_line, printable, shown

if TYPE_CHECKING:
    from rich.text import Text

    from autograd_viz.launch.processes import ChildReport
    from autograd_viz.trace.calls import CallSelection
    from autograd_viz.trace.recording import Recording

DEFAULT_TRACE = "trace.jsonl"
"""Where ``record`` writes its trace when not told."""


def run_record(args: argparse.Namespace) -> int:
    """``autograd-viz record``: run a script with recording on and save its trace.

    Without ``--last`` each backward call is written to the trace as it ends;
    with it, the last calls are written when the script ends, raises, calls
    ``os._exit``, is stopped by SIGINT, SIGTERM or SIGHUP, or when a call holds
    a NaN or Inf. Stopped by SIGTERM or SIGHUP, the tool ends by that signal,
    as the script would have.
    """
    from autograd_viz.grads.recorded import explaining
    from autograd_viz.launch.processes import follow_children, process_info
    from autograd_viz.launch.script import (
        ScriptFailedError,
        ScriptNotFoundError,
        check_script,
        run_script,
    )
    from autograd_viz.trace.recording import Recording

    script, script_args = script_and_args(args, "record")
    output = args.output or DEFAULT_TRACE
    check_output(output)
    calls = call_selection(args)
    try:
        check_script(script)
    except ScriptNotFoundError as exc:
        raise CommandError(str(exc)) from None
    own, inherited_rank = own_streamed_path(output)
    try:
        recording = Recording(args.max_values, calls, own, values=args.values, watch=args.observe)
    except OSError as exc:
        raise CommandError(f"cannot write trace {own}: {exc.strerror or exc}") from None
    status = 0
    failure: ScriptFailedError | None = None
    interrupted = False
    signalled: int | None = None
    with (
        stopped_by_signals(),
        _saved_before_exit(recording),
        recording.running(),
        explaining(recording.recorder, args.why),
    ):
        with (
            follow_children(
                "record",
                recording.trace,
                output,
                args.max_values,
                calls={"steps": calls.steps, "every": calls.every, "last": calls.last},
                values=args.values,
                observe=args.observe,
            ) as job,
            _progress(recording, script),
        ):
            try:
                status = run_script(script, script_args)
            except ScriptFailedError as exc:
                failure = exc
            except KeyboardInterrupt:
                interrupted = True
            except Signalled as exc:
                signalled = exc.signum
            if interrupted or signalled is not None:
                job.settle()  # the children the signal reached are saving too
            children = job.reports()
            unfinished = job.unfinished()
            running = job.running()
        # Who this process is, once its script has made its process group and the
        # children's settings are gone from the environment.
        recording.trace.header["process"] = process_info(inherited_rank)
    if failure is not None:
        sys.stdout.flush()  # the script's own output comes before its traceback
        print(f"Traceback of {printable(script)}, which raised:", file=sys.stderr)
        print(printable(failure.script_traceback(), newlines=True), end="", file=sys.stderr)
    # The trace is saved whatever the script did: a partial trace is what shows where it failed.
    problem = recording.save_error or (recording.writer.error if recording.writer else None)
    if problem is not None:
        raise CommandError(f"cannot write trace {own}: {problem.strerror or problem}")
    saved_to: str | None = own
    if (children or unfinished or running) and not recording.stats().events:
        # The children recorded everything; this process leaves no file of its own (Note
        # [Children that outlive the script] in autograd_viz/launch/processes.py).
        from autograd_viz.trace.writing import remove_output

        remove_output(own)
        saved_to = None
    size = os.path.getsize(own) if saved_to is not None and os.path.exists(own) else 0
    complete = failure is None and not interrupted and signalled is None
    _print_record_summary(recording, script, saved_to, size, complete, children)
    for pid, path in unfinished:
        note(f"process {pid} ended before finishing its trace; the calls it wrote are in {path}")
    say_running(running)
    if saved_to is not None and (interrupted or signalled is not None):
        note(f"partial trace saved to {saved_to}")
    if signalled is not None:
        end_by_signal(signalled)
    if interrupted:
        raise KeyboardInterrupt
    if failure is not None:
        raise ScriptError(str(failure), status=1)  # as python SCRIPT exits when it raises
    if status != 0:
        note(f"{script} exited with status {status}")
    return status


def say_running(running: list[tuple[int, str]]) -> None:
    """One line per child still running as the script ended: where its trace goes."""
    for pid, path in running:
        note(
            f"process {pid} still runs: it writes its trace to {shown(path)} (named for its "
            "rank, if it has one) as it ends"
        )


def own_streamed_path(output: str) -> tuple[str, str | None]:
    """Where this process writes its trace (a rank's own file under ``torchrun``), and the
    ``RANK`` it inherited from a watching parent (``None`` when it has none)."""
    from autograd_viz.launch.processes import process_info, process_trace_path, read_settings

    parent = read_settings()
    inherited = parent.rank if parent is not None else None
    process = process_info(inherited)
    own = process_trace_path(output, process) if process["rank"] is not None else output
    return own, inherited


class Signalled(BaseException):
    """SIGTERM or SIGHUP reached the script while it was recorded (it had no handler of its own).

    A ``BaseException``, as ``KeyboardInterrupt`` is: the script's ``except
    Exception`` does not swallow it, its ``finally`` blocks run.
    """

    _engine_propagate = True  # raised in a listener: the backward fails with it (engine.events)

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum
        """The signal's number."""


_SAVING_SIGNALS = ("SIGTERM", "SIGHUP")


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP stop the script as an exception, so that its trace is saved first.

    Only signals whose handler is the default one (death) are taken: a
    signal ignored by whoever started us (``nohup``) stays ignored, and a
    handler the script installs replaces ours, as it would without us.
    """
    import signal
    import threading

    taken: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        for name in _SAVING_SIGNALS:
            signum = getattr(signal, name, None)
            if signum is not None and signal.getsignal(signum) == signal.SIG_DFL:
                taken[signum] = signal.signal(signum, _raise_signalled)
    try:
        yield
    finally:
        for signum, handler in taken.items():
            if signal.getsignal(signum) is _raise_signalled:
                signal.signal(signum, handler)  # type: ignore[arg-type]


def _raise_signalled(signum: int, frame: object) -> None:
    raise Signalled(signum)


def end_by_signal(signum: int) -> None:
    """End this process by ``signum``, as the script would have ended without us."""
    import signal

    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _saved_before_exit(recording: Recording) -> AbstractContextManager[None]:
    """A script that ends with ``os._exit`` gets its trace written first (in this process only:
    a forked child that calls it leaves the parent's trace alone)."""
    from autograd_viz.launch.processes import before_os_exit

    pid = os.getpid()

    def save(status: int) -> None:
        if os.getpid() == pid:
            recording.finish()
            note(f"the script called os._exit({status}); trace saved to {recording.output}")

    return before_os_exit(save)


class _RecordingStatus:
    """The spinner's text; rich re-renders it on its own timer, not per engine event."""

    def __init__(self, recording: Recording, script: str) -> None:
        self.recording = recording
        self.script = script

    def __rich__(self) -> Text:
        from rich.text import Text

        count = self.recording.events_recorded()
        return Text(f"Running {printable(self.script)}: {count:,} events recorded")


@contextmanager
def _progress(recording: Recording, script: str) -> Iterator[None]:
    """A spinner with a live event count on stderr, when stderr is a terminal."""
    console = rich_console(stderr=True)
    if not console.is_terminal:
        yield
        return
    with console.status(_RecordingStatus(recording, script)):
        yield


def _print_record_summary(
    recording: Recording,
    script: str,
    output: str | None,
    size: int,
    complete: bool,
    children: list[ChildReport],
) -> None:
    from rich.filesize import decimal

    from autograd_viz.cli.jobs import print_processes

    stats = recording.stats()
    console = rich_console()
    title = "Recorded" if complete else "Partial trace of"
    console.print(f"[bold]{title} {shown(script)}[/bold]", soft_wrap=True)
    if output is None:
        print_processes(console, children)
        return  # the children recorded everything
    rows = [
        ("calls", _calls_row(recording)),
        *_values_row(recording),
        ("graph tasks", f"{stats.graph_tasks:,}"),
        ("nodes run", f"{stats.nodes:,}"),
        ("events", f"{stats.events:,}"),
        ("duration", _duration(stats.duration_ns)),
        ("errors", _flagged(stats.errors)),
        ("anomalies", _flagged(stats.anomalies)),
        *_cut_row(recording),
        ("saved to", f"{shown(output)} ({decimal(size)})"),
    ]
    for label, value in rows:
        console.print(f"  {label:<12} {value}", soft_wrap=True)
    if not stats.events:
        console.print("  [dim]No backward pass ran while recording.[/dim]")
    print_processes(console, children)


def _values_row(recording: Recording) -> list[tuple[str, str]]:
    """``values  none: no gradient summaries`` below the tier ``all`` (``--values``)."""
    values = recording.recorder.values
    if values == "all":
        return []
    kept = "no gradient summaries" if values == "none" else "summaries of leaves' gradients only"
    rows = [("values", f"{values}: {kept}")]
    if recording.recorder.observe == "calls":
        rows.append(("observe", "calls: each call's nodes derived from its graph, not observed"))
    return rows


def _calls_row(recording: Recording) -> str:
    """``3 of 1,000 backward calls (every 100th call, the last 3 kept)``."""
    seen = recording.recorder.calls_seen
    kept = sum(1 for info in recording.trace.graph_tasks.values() if info.call is not None)
    if recording.writer is not None:
        kept = recording.writer.calls
    text = f"{kept:,} of {seen:,} backward call{'' if seen == 1 else 's'}"
    calls = recording.calls
    if calls.filters or calls.last is not None:
        text += f" ({calls.describe()})"
    if recording.ring is not None and recording.ring.found:
        text += ", [bold red]stopped at the first NaN or Inf[/bold red]"
    return text


def _cut_row(recording: Recording) -> list[tuple[str, str]]:
    """``cut short  1 call (backward call 1 (graph task 7): ValueError: ...)``, when any was."""
    recorder = recording.recorder
    if not recorder.cut_calls:
        return []
    count = recorder.cut_calls
    first = shown(one_line(recorder.first_cut or "", 160))
    text = f"[bold red]{count:,}[/bold red] call{'' if count == 1 else 's'} by a recorder error"
    return [("cut short", f"{text} (the first: {first})")]


def _flagged(count: int) -> str:
    return f"[bold red]{count:,}[/bold red]" if count else "0"


def _duration(ns: int) -> str:
    if ns < 1_000_000:
        return f"{ns / 1000:.1f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1_000_000:.1f} ms"
    return f"{ns / 1_000_000_000:.2f} s"


LAST_HELP = (
    "a flight recorder: keep the last N recorded calls in memory and write them when the "
    "script ends, raises, is stopped (SIGINT, SIGTERM, SIGHUP) or a NaN or Inf is found "
    "(record: in a gradient it summarizes, so not with --values none)"
)
"""``--last``'s help for the commands that record a script (``record``, ``nan``)."""


def add_call_options(parser: argparse.ArgumentParser, last: str | None = LAST_HELP) -> None:
    """``--steps``, ``--every`` and ``--last`` (its help ``last``; ``None``: no ``--last``)."""
    group = parser.add_argument_group(
        "which backward calls to record (counted from 0; reentrant calls belong to theirs)"
    )
    group.add_argument(
        "--steps",
        default=None,
        metavar="LIST",
        help="only these calls: indices and ranges, such as 10-12,100",
    )
    group.add_argument(
        "--every", type=positive, default=None, metavar="N", help="only calls 0, N, 2N, ..."
    )
    group.add_argument(
        "--values",
        choices=("none", "leaves", "all"),
        default=None,
        help="which gradients to summarize: all (default), leaves (leaves' gradients only) or "
        "none (the order, threads, times and graph of each call, without values: the "
        "cheapest, for a flight recorder left on all run)",
    )
    group.add_argument(
        "--observe",
        choices=("nodes", "calls"),
        default="nodes",
        help="what is watched: nodes (default: each node as it runs) or calls (no node is "
        "watched: only each call's start and end; its nodes' order, dependencies and buffers "
        "are derived from its graph after it, without values or node times)",
    )
    if last is None:
        return
    group.add_argument("--last", type=positive, default=None, metavar="N", help=last)


def call_selection(args: argparse.Namespace) -> CallSelection:
    """The :class:`CallSelection` of ``--steps``, ``--every`` and ``--last``.

    Raises:
        UsageError: ``--steps`` does not name calls.
    """
    from autograd_viz.trace.calls import CallSelection, CallSelectionError

    try:
        selection = CallSelection(args.steps, args.every, getattr(args, "last", None))
    except CallSelectionError as exc:
        raise UsageError(f"--{exc}") from None
    _settle_values(args)
    return selection


def _settle_values(args: argparse.Namespace) -> None:
    """``--values`` left out: ``all``, or ``none`` with ``--observe calls``, which keeps none.

    Raises:
        UsageError: ``--observe calls`` with ``--values leaves`` or ``all``.
    """
    observe = getattr(args, "observe", "nodes")
    if args.values is None:
        args.values = "none" if observe == "calls" else "all"
    elif observe == "calls" and args.values != "none":
        raise UsageError(
            f"--observe calls watches no node, so it keeps no values: --values {args.values} "
            "needs --observe nodes (the default)"
        )


def _max_values(text: str) -> int:
    from autograd_viz.trace.readers import INT_LIMIT

    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= INT_LIMIT:  # past it, no reader would take the trace's header
        raise argparse.ArgumentTypeError(
            f"expected a non-negative integer up to {INT_LIMIT}, got {text!r}"
        )
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
    traces = [load_trace(source, args.call) for source in sources]
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
        f"Wrote {printable(output)}: {processes}{count_words(slices, 'node slice')}, "
        f"{count_words(flows, 'flow')}, {count_words(lanes, 'thread')}. "
        "Open it in https://ui.perfetto.dev or chrome://tracing."
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
    record.add_argument(
        "--why",
        action="store_true",
        help="also record, after each backward call, which parameters got no gradient and why, "
        "and each module's gradient norm (as autograd-viz grads finds them; about 2x the "
        "recording's time), for dot and the TUI to show",
    )
    add_call_options(record)


def add_record_commands(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    """Register ``record`` and ``timeline``."""
    record = commands.add_parser(
        "record",
        usage=(
            f"{PROG} record [-h] [-o TRACE] [--max-values N] [--steps LIST] [--every N] "
            "[--last N] [--values {none,leaves,all}] [--observe {nodes,calls}] "
            "SCRIPT [ARGS ...]"
        ),
        help="run a Python script and record every backward pass it makes",
        description=(
            "Run SCRIPT as __main__ with ARGS, record its backward calls into a trace "
            "file and print a summary. Each call is written when it ends (with --last, the "
            "last N when the script ends or stops). Options may come before or after SCRIPT; "
            "every other word after SCRIPT is the script's (after a '--', every word is). "
            "The exit status is the script's, as python gives it."
        ),
    )
    takes_a_script(record, add_record_options, run_record)

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
    add_call_option(timeline)
    timeline.set_defaults(run=run_timeline)
