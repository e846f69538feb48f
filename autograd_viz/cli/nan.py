"""``autograd-viz nan SCRIPT [ARGS ...]``: where a NaN was born, and why.

The script runs inside :func:`autograd_viz.nan.watch.watch_nan`: recording
on, our engine's anomaly mode at its fullest (``detect_anomaly(check_inf=True,
check_forward=True, mode="collect")``) and, once the script imports torch,
PyTorch's backward watched and every aten op checked, so every op's output
and every backward output is checked and nothing stops the script (unless
``--first``). :func:`autograd_viz.nan.find_nans` then reads the trace, and the
report shows the first non-finite value: its node, phase, op, the cause in
words, the user's line that made it, the path from the loss, the tensors
around it, and then the other findings. The exit status is 1 when something
was found, 0 when nothing was.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING

from autograd_viz.cli.base import (
    FOUND,
    OK,
    PROG,
    ArgumentParser,
    CommandError,
    ScriptError,
    UsageError,
    add_call_option,
    check_output,
    load_trace,
    note,
    rich_console,
    script_and_args,
    takes_a_script,
)
from autograd_viz.cli.record import add_call_options, call_selection
from autograd_viz.nan.text import print_report
from autograd_viz.trace.text import count_words, printable, shown

if TYPE_CHECKING:
    from rich.console import Console

    from autograd_viz.nan.unrecorded import MissedFinding
    from autograd_viz.nan.watch import NanWatch
    from autograd_viz.trace.calls import CallSelection
    from autograd_viz.trace.recording import Recording


def add_nan_command(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    """Add ``nan`` to the subcommands."""
    nan = commands.add_parser(
        "nan",
        usage=(
            f"{PROG} nan [-h] [-o TRACE] [--no-forward] [--inf | --no-inf] [--first] "
            "[--ignore OP] [--eager-compiled] [--steps LIST] [--every N] [--last N] "
            "[--values {none,leaves,all}] [--observe nodes] "
            "SCRIPT [ARGS ...]\n"
            f"       {PROG} nan [--ignore OP] [--call K] TRACE.jsonl"
        ),
        help="run a script and report where its first NaN or Inf was born, and why",
        description=(
            "Run SCRIPT as __main__ with ARGS under anomaly mode (NaN and Inf, forward and "
            "backward, collecting every finding), on our engine or PyTorch, and report the "
            "first non-finite value: its node and op, the cause in words, the source line, the "
            "module, the path from the loss, and the node PyTorch's anomaly mode would name. "
            "Exit status 1 when one is found, 0 when none is, 4 when the script failed "
            "without one. Options may come before or after SCRIPT; every other word after "
            "SCRIPT is the script's (after a '--', every word is). Given a trace file "
            "(.jsonl) instead, report on what it recorded, reading it a call at a time "
            "(--call K: that call alone)."
        ),
    )
    takes_a_script(nan, add_nan_options, run_nan)


def add_nan_options(nan: argparse.ArgumentParser) -> None:
    """``nan``'s options (before or after SCRIPT, Note [Options and the script's arguments])."""
    nan.add_argument(
        "-o", "--output", default=None, metavar="TRACE", help="also save the trace to TRACE"
    )
    nan.add_argument(
        "--no-forward",
        action="store_true",
        help="check only backward outputs, not each op's output as it is made",
    )
    nan.add_argument(
        "--inf",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="flag +Inf and -Inf as well as NaN (default: on; an intentional -inf, such as "
        "a masked attention score, is never flagged)",
    )
    nan.add_argument(
        "--first",
        action="store_true",
        help="stop the script at the first finding, raising as anomaly mode does "
        "(default: collect every finding)",
    )
    nan.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="OP",
        help="an op that makes Inf or NaN on purpose (masked_fill, aten.log.default); repeatable",
    )
    nan.add_argument(
        "--eager-compiled",
        action="store_true",
        help="run torch.compile'd code eagerly so that each op inside is checked (results "
        "may then differ in the last bits; default: it runs compiled, checked at its edges)",
    )
    add_call_options(nan)
    add_call_option(nan)


def run_nan(args: argparse.Namespace) -> int:
    """``autograd-viz nan``: run the script, print the report, 1 when a NaN or Inf was found."""
    from autograd_viz.cli.jobs import (
        first_finding,
        print_first_process,
        print_own_rank,
    )
    from autograd_viz.cli.record import (
        Signalled,
        end_by_signal,
        own_streamed_path,
        say_running,
        stopped_by_signals,
    )
    from autograd_viz.launch.processes import follow_children, process_info
    from autograd_viz.launch.script import (
        ScriptFailedError,
        ScriptNotFoundError,
        check_script,
        run_script,
    )
    from autograd_viz.nan.watch import stopped_at_finding, watch_nan
    from autograd_viz.trace.records import DEFAULT_MAX_VALUES

    script, script_args = script_and_args(args, "nan")
    if script.endswith(TRACE_SUFFIX):
        return report_on_trace(args, script, script_args)
    if args.call is not None:
        raise UsageError(f"--call K picks a call of a trace file ({TRACE_SUFFIX}), not of a script")
    output: str | None = args.output
    if output is not None:
        check_output(output)
    try:
        check_script(script)
    except ScriptNotFoundError as exc:
        raise CommandError(str(exc)) from None
    if args.observe == "calls":
        raise UsageError(
            "nan needs the nodes watched as they run (a NaN's birth is read from the values "
            "along the way): --observe calls watches no node; leave it out"
        )
    selection = call_selection(args)
    failure: ScriptFailedError | None = None
    status = 0
    options = {"first": args.first, "forward": not args.no_forward, "inf": args.inf}
    # Without --last each call is read for the report as it ends, and written to -o then:
    # memory stays flat however long the run (Note [A run read a part at a time]).
    streamed = selection.last is None
    # With -o the file is opened (and locked) before the script runs, written as calls end
    # or, with --last, when the run ends or finds a NaN (Note [Writing an output file]).
    own_path, inherited_rank = own_streamed_path(output) if output else (None, None)
    interrupted = False
    signalled: int | None = None
    with contextlib.ExitStack() as stack:
        stack.enter_context(stopped_by_signals())
        try:
            watch = stack.enter_context(
                watch_nan(
                    **options,
                    ignore=args.ignore,
                    eager_compiled=args.eager_compiled,
                    steps=selection.steps,
                    every=selection.every,
                    last=selection.last,
                    output=own_path,
                    keep_trace=not streamed,
                    values=args.values,
                )
            )
        except OSError as exc:
            raise CommandError(f"cannot write trace {own_path}: {exc.strerror or exc}") from None
        job = stack.enter_context(
            follow_children(
                "nan",
                watch.trace,
                output,
                DEFAULT_MAX_VALUES,
                {**options, "ignore": args.ignore},
                # Each process counts and chooses its own calls, and checks those it
                # leaves out at the parameters (Note [Checking calls not recorded]).
                calls={"steps": selection.steps, "every": selection.every, "last": selection.last},
                values=args.values,
                said=watch.report_fields,
            )
        )
        try:
            status = run_script(script, script_args)
        except ScriptFailedError as exc:
            if not (args.first and stopped_at_finding(exc.exception)):
                failure = exc
        except KeyboardInterrupt:  # what was recorded is reported and saved, as record does
            interrupted = True
        except Signalled as exc:
            signalled = exc.signum
        if interrupted or signalled is not None:
            job.settle()  # the children the signal reached are saving too
        children = job.reports()
        running = job.running()
        if own_path is not None:  # who this process is, once its script made its group
            watch.trace.header["process"] = process_info(inherited_rank)
        assert watch.recording is not None
        watch.recording.finish()  # every call read, and written, before the report
        trace = watch.trace
        if children:  # the children's traces are read before the job's directory goes
            ran = watch.recorded or watch.missed is not None
            own = (watch.report, trace, watch.missed) if ran else None
            finding, calls = first_finding(
                own, children, frozenset(args.ignore), output is not None
            )
    sys.stdout.flush()  # the script's own output comes before the report
    console = rich_console()
    failed = failure is not None or status != 0
    if children:
        found = finding is not None
        if finding is not None:
            print_first_process(console, finding, len(children) + (own is not None))
            if finding.missed is not None:
                print_missed(finding.missed, selection, console)
            else:
                assert finding.report is not None
                print_report(finding.report, console, stopped=args.first)
        elif not failed:
            count = len(children) + (own is not None)
            console.print(
                f"[bold green]no NaN or Inf found[/bold green] in "
                f"{count_words(calls, 'backward call')} of {count} processes"
            )
    else:
        missed = watch.missed
        found = watch.found
        calls = watch.report.backward_calls
        print_own_rank(console)
        if missed is not None and watch.report.first is None:
            print_missed(missed, selection, console)
        elif found or not failed:
            recording = watch.recording
            checked = None if recording is None else _checked_calls(recording, calls)
            print_report(watch.report, console, stopped=args.first, checked=checked)
            if missed is not None:
                print_missed(missed, selection, console)
    theirs = bool(children or running)  # Note [Children that outlive the script]
    saved_to = _streamed_to(watch, own_path, theirs) if own_path is not None else None
    say_running(running)
    stopped = interrupted or signalled is not None
    if saved_to is not None:
        kept = "partial trace" if stopped else "trace"
        note(f"{kept} saved to {saved_to}; step it with '{PROG} replay {saved_to}'")
    if stopped:
        if signalled is not None:
            end_by_signal(signalled)
        raise KeyboardInterrupt
    if found:
        if failed:
            note(f"{failure or f'{script} exited with status {status}'}")
        return FOUND
    if failure is not None:
        # The script failed before it found anything: that is the answer, not "no NaN found".
        print(f"Traceback of {printable(script)}, which raised:", file=sys.stderr)
        print(printable(failure.script_traceback(), newlines=True), end="", file=sys.stderr)
        raise ScriptError(f"{failure}; {_searched(calls)}")
    if status != 0:
        raise ScriptError(f"{script} exited with status {status}; {_searched(calls)}")
    return OK


TRACE_SUFFIX = ".jsonl"
"""What ``nan`` takes for a trace file to report on rather than a script to run."""


def report_on_trace(args: argparse.Namespace, path: str, extra: list[str]) -> int:
    """``autograd-viz nan TRACE.jsonl [--call K]``: the report on a recorded trace.

    The file is read a call at a time (``--call K``: that call alone), so memory
    is that of one call whatever the file's size (Note [A run read a part at a time]).
    """
    from autograd_viz.nan.scan import NanScan, find_nans
    from autograd_viz.nan.watch import KEPT_FINDINGS
    from autograd_viz.trace import TraceFormatError
    from autograd_viz.trace.index import iter_calls

    runs_only = {
        "-o": args.output is not None,
        "--first": args.first,
        "--no-forward": args.no_forward,
        "--no-inf": not args.inf,
        "--eager-compiled": args.eager_compiled,
        "--steps": args.steps is not None,
        "--every": args.every is not None,
        "--last": args.last is not None,
        "--values": args.values is not None,
        "--observe": getattr(args, "observe", "nodes") != "nodes",
    }
    given = [option for option, set_ in runs_only.items() if set_]
    if given or extra:
        what = ", ".join(given) if given else f"arguments ({' '.join(extra)})"
        raise UsageError(
            f"{what}: for a script that nan runs; {path} is a trace, read as it was recorded"
        )
    if args.call is not None:
        report = find_nans(load_trace(path, args.call), args.ignore)
    else:
        scan = NanScan(args.ignore, keep=KEPT_FINDINGS)
        try:
            for part in iter_calls(path):
                scan.add(part)
        except TraceFormatError as exc:
            raise CommandError(f"invalid trace file {exc}") from None
        except OSError as exc:
            raise CommandError(f"cannot read trace {path}: {exc.strerror or exc}") from None
        report = scan.report()
    if report.unchecked:
        raise CommandError(
            f"{printable(path)} was recorded without values (--values none) and without the "
            "NaN checks: it cannot say whether a gradient held a NaN or Inf; record with "
            f"--values leaves or all, or run '{PROG} nan SCRIPT'"
        )
    print_report(report, rich_console())
    return FOUND if report.first is not None else OK


def _streamed_to(watch: NanWatch, path: str, children: bool) -> str | None:
    """Where the trace written as calls ended (with ``--last``, as the run ended) is;
    ``None`` when this process kept none.

    Raises:
        CommandError: a write failed.
    """
    recording = watch.recording
    writer = recording.writer if recording is not None else None
    problem = recording.save_error if recording is not None else None
    if problem is None and writer is not None:
        problem = writer.error
    if problem is not None:
        raise CommandError(f"cannot write trace {path}: {problem.strerror or problem}")
    if children and not watch.recorded:
        # The children recorded everything; this process leaves no file of its own.
        from autograd_viz.trace.writing import remove_output

        remove_output(path)
        return None
    return path


def _searched(calls: int) -> str:
    return f"no NaN or Inf found in the {count_words(calls, 'backward call')} before it"


def _checked_calls(recording: Recording, read: int) -> str | None:
    """Which backward calls were checked, in words, where that is not every call the report
    read: ``--last`` checks every call and keeps a few; ``--steps``/``--every`` check the
    backward of the chosen calls node by node, the others' where their gradients reach the
    parameters (the forward's ops are checked in every call; Note [Checking calls not
    recorded]). ``read``: how many calls the report read."""
    seen = recording.recorder.calls_seen
    calls = recording.calls
    if calls.filters:
        return (
            f"the backward of {read:,} of {count_words(seen, 'backward call')} "
            f"({calls.describe()}); the other calls' backward was checked only where its "
            "gradients reached the parameters, their forward ops in full"
        )
    if calls.last is not None:
        return f"{count_words(seen, 'backward call')} (the last {calls.last} kept)"
    return None


def print_missed(missed: MissedFinding, selection: CallSelection, console: Console) -> None:
    """Say that a NaN or Inf reached a parameter in a call not recorded, and how to see it
    born (Note [Checking calls not recorded])."""
    chosen = f"--steps {selection.steps}" if selection.steps is not None else ""
    if selection.every is not None:
        chosen = f"{chosen} --every {selection.every}".strip()
    console.print(
        f"[bold red]{shown(missed)}[/bold red] (not recorded: {chosen}); record that call "
        f"to see where it was born: --steps {missed.call}",
        soft_wrap=True,
    )
