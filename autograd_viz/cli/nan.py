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
    options_only,
    script_and_args,
    shown,
)
from autograd_viz.cli.record import add_call_options, call_selection
from autograd_viz.nan.cause import canonical_op
from autograd_viz.nan.scan import LISTED_SOURCES
from autograd_viz.trace.text import printable

if TYPE_CHECKING:
    from rich.console import Console

    from autograd_viz.nan.report import Finding, NanReport
    from autograd_viz.nan.unrecorded import MissedFinding
    from autograd_viz.nan.watch import NanWatch
    from autograd_viz.sources.calls import CallSelection
    from autograd_viz.sources.recording import Recording
    from autograd_viz.trace.summary import TensorSummary

_LISTED = LISTED_SOURCES
"""How many other findings the report lists before it only counts them."""


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
    add_nan_options(nan)
    nan.add_argument("script_and_args", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS ...]")
    nan.set_defaults(run=run_nan, option_parser=options_only(add_nan_options))


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
    from autograd_viz.cli.children import (
        first_finding,
        print_first_process,
        print_own_rank,
    )
    from autograd_viz.cli.record import (
        Signalled,
        end_by_signal,
        own_streamed_path,
        stopped_by_signals,
    )
    from autograd_viz.nan.watch import stopped_at_finding, watch_nan
    from autograd_viz.sources.processes import follow_children, process_info
    from autograd_viz.sources.script import (
        ScriptFailedError,
        ScriptNotFoundError,
        check_script,
        run_script,
    )
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
        children = job.reports()
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
    console = _console()
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
                f"{_count(calls, 'backward call')} of {count} processes"
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
    saved_to = _streamed_to(watch, own_path, bool(children)) if own_path is not None else None
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
    from autograd_viz.nan.report import find_nans
    from autograd_viz.nan.scan import NanScan
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
    print_report(report, _console())
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
    return f"no NaN or Inf found in the {_count(calls, 'backward call')} before it"


def _count(n: int, singular: str, plural: str | None = None) -> str:
    """``1 backward call``, ``0 backward calls``, ``2 more born``."""
    return f"{n:,} {singular if n == 1 else plural or singular + 's'}"


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
            f"the backward of {read:,} of {_count(seen, 'backward call')} "
            f"({calls.describe()}); the other calls' backward was checked only where its "
            "gradients reached the parameters, their forward ops in full"
        )
    if calls.last is not None:
        return f"{_count(seen, 'backward call')} (the last {calls.last} kept)"
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


def print_report(
    report: NanReport, console: Console, stopped: bool = False, checked: str | None = None
) -> None:
    """Print ``report``: the first finding in full, then a short list of the others.

    ``stopped``: the program was stopped at the first finding (``--first``).
    ``checked``: which calls were checked, when not every call the report read.
    """
    first = report.first
    if report.values != "all":
        leaves = " and the leaves' gradients" if report.values == "leaves" else ""
        console.print(
            f"[yellow]note:[/yellow] gradients were recorded without values (--values "
            f"{report.values}): the report reads only the checks' own findings"
            f"{leaves}; record with "
            "--values all for the values along the way"
        )
    if first is None:
        where = checked if checked is not None else _count(report.backward_calls, "backward call")
        if report.contained:
            console.print(_contained_line(report, where), soft_wrap=True)
            return
        console.print(f"[bold green]no NaN or Inf found[/bold green] in {where}")
        return
    value = "NaN" if first.value == "nan" else "Inf"
    born = "born" if first.born else "first seen"
    op = canonical_op(first.aten_op or first.op)  # one naming: `log`, whichever engine ran it
    if first.node.name == op:  # PyTorch: an op that made no autograd node (no grad through it)
        where_born = f"[bold]{shown(op)}[/bold] (no autograd node)"
    else:
        where_born = f"[bold]{shown(str(first.node))}[/bold] (op {shown(op)})"
    console.print(f"[bold red]{value} {born} in the {first.phase} pass[/bold red] at {where_born}")
    rows = [("why", f"[bold]{shown(first.cause)}[/bold]")]
    if first.source is not None:
        where = f"{shown(str(first.source))} in {shown(first.source.function)}"
        if first.source.code:
            where += f"\n{'':16}[cyan]{shown(first.source.code)}[/cyan]"
        rows.append(("where", where))
    if first.module is not None:
        rows.append(("module", shown(first.module)))
    if report.path:
        rows.append(("path", " → ".join(shown(str(n)) for n in report.path)))
    rows.append(("PyTorch", _anomaly_mode_says(report, stopped)))
    inputs = "gradients in" if first.phase == "backward" else "inputs"
    outputs = "gradients out" if first.phase == "backward" else "output"
    rows += _tensor_rows(inputs, first.inputs)
    rows += _tensor_rows("saved", first.saved)
    rows += _tensor_rows(outputs, first.outputs)
    for label, text in rows:
        console.print(f"  {label:<13} {text}", soft_wrap=True)
    _print_others(report, console)


def _anomaly_mode_says(report: NanReport, stopped: bool) -> str:
    """What PyTorch's anomaly mode would name, and whether that is later than the birth."""
    first, named = report.first, report.torch_node
    if named is None and stopped:
        return "anomaly mode: not reached (the program stopped at the first finding)"
    if named is None and report.values != "all":
        return "anomaly mode: not known (the nodes' gradients were recorded without values)"
    if named is None:
        return "anomaly mode names no node: no backward node returned NaN"
    text = f"anomaly mode names {shown(str(named))}"
    if first is None or (first.phase == "backward" and first.node.id == named.id):
        return text
    if first.node.id == named.id:
        return f"{text} [yellow](the same op, once its backward returns NaN)[/yellow]"
    if first.phase == "forward":
        why = "it checks only backward outputs"
    elif first.value == "inf":
        why = "it checks only for NaN, not Inf"
    else:
        why = "the NaN was passed on to it"
    return f"{text} [yellow](later than the birth: {why})[/yellow]"


def _print_others(report: NanReport, console: Console) -> None:
    # A long run's report lists only some (Note [A run read a part at a time]).
    others = report.other_count
    if not others:
        return
    sources = report.source_count
    passed = others - sources
    contained = f" ({report.contained:,} contained)" if report.contained else ""
    console.print(
        f"[bold]Other findings[/bold]: {sources:,} more born{contained}, "
        f"{_count(passed, 'passed on from an earlier one', 'passed on from earlier ones')}"
    )
    # Those whose values reached something first, then the contained ones (Note [Lineage]).
    listed = sorted(report.sources, key=lambda f: f.contained)
    for finding in listed[:_LISTED]:
        console.print(f"  {shown(_one_line(finding))}", soft_wrap=True)
    if sources > _LISTED:
        console.print(f"  ... and {sources - _LISTED} more")


def _contained_line(report: NanReport, where: str) -> str:
    """No value reached anything that matters; say how many were contained, and the first
    (Note [Lineage] in ``sources/pytorch/forward_lineage.py``): nothing is hidden."""
    first = report.first_contained
    text = (
        f"[bold green]no NaN or Inf reached the loss, a gradient, a parameter or the model's "
        f"output[/bold green] "
        f"in {where}; {_count(report.contained, 'contained non-finite value')} seen"
    )
    if first is None:
        return text
    value = "NaN" if first.value == "nan" else "Inf"
    text += f", the first an {value} from {shown(first.cause)}"
    if first.source is not None:
        text += f" at {shown(str(first.source))}"
    if first.module is not None:
        text += f" in module {shown(first.module)}"
    return text


def _one_line(finding: Finding) -> str:
    where = f" at {finding.source}" if finding.source is not None else ""
    module = f" in module {finding.module}" if finding.module is not None else ""
    op = f" (op {canonical_op(finding.aten_op or finding.op)})"
    contained = " [contained]" if finding.contained else ""
    return (
        f"{finding.phase:<8} {finding.value:<3} {finding.node}{op}: {finding.cause}{where}"
        f"{module}{contained}"
    )


def _tensor_rows(label: str, summaries: tuple[TensorSummary | None, ...]) -> list[tuple[str, str]]:
    rows = []
    for i, summary in enumerate(summaries):
        text = "none" if summary is None else describe_tensor(summary)
        rows.append((label if i == 0 else "", f"[{i}] {shown(text)}"))
    return rows


def describe_tensor(s: TensorSummary) -> str:
    """``(2, 1) float32  min 0  max 0.413  [0, 0.413]``, with its NaN and Inf counts."""
    shape = "(" + ", ".join(str(d) for d in s.shape) + ("," if len(s.shape) == 1 else "") + ")"
    parts = [f"{shape} {s.dtype}"]
    if s.min is not None and s.max is not None:
        parts.append(f"min {s.min:.4g}  max {s.max:.4g}")
    if s.nan_count:
        parts.append(f"{s.nan_count} NaN")
    if s.inf_count:
        parts.append(f"{s.inf_count} Inf")
    if s.values is not None and len(s.values) <= 8:
        parts.append("[" + ", ".join(f"{v:.4g}" for v in s.values) + "]")
    return "  ".join(parts)


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False)
