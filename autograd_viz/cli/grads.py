"""``autograd-viz grads SCRIPT [ARGS ...]``: why a parameter got no gradient, and the flow.

The script runs unmodified inside :func:`autograd_viz.grads.watch.watch_grads`
(results bit-identical). After it ends, the report lists every trainable
parameter that got no gradient in some backward call, with the reason and the
line, the parameters whose gradient was exact zeros (and the node and line
where it became zeros), those left out on purpose (pruned by ``inputs=`` or
``grad()``) and the frozen ones, then the last call's gradient flow per module
(largest and smallest first, vanishing and exploding flagged). ``--plot FILE``
draws every module's gradient norm across calls (SVG or PNG). The exit status
is 1 when a trainable parameter got no gradient, 0 otherwise; under
``torchrun`` each rank reports its own.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
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
    check_output,
    integer_at_least,
    note,
    rich_console,
    script_and_args,
    takes_a_script,
)
from autograd_viz.trace.text import count_words, printable, shown

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from rich.console import Console

    from autograd_viz.grads.report import CallGrads, FlowRow, GradsReport, Repeated, Where

ROWS = 8
"""How many modules the flow table shows from each end (largest, smallest)."""

NAMES = 6
"""How many parameters one entry of the report names before it counts the rest."""


def add_grads_command(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    """Add ``grads`` to the subcommands."""
    grads = commands.add_parser(
        "grads",
        usage=(
            f"{PROG} grads [-h] [--plot FILE] [--rows N] [-o TRACE] SCRIPT [ARGS ...]\n"
            f"       {PROG} grads [--plot FILE] [--rows N] TRACE.jsonl"
        ),
        help="run a script and say why parameters got no gradient, and how gradients flow",
        description=(
            "Run SCRIPT as __main__ with ARGS (PyTorch or our engine), results unchanged, "
            "and report every trainable parameter that got no gradient in a backward call "
            "and why (never used, used without grad, cut by .detach()/.item()/..., never "
            "reaching the loss), at the program's line; gradients of exact zeros and where "
            "they became zeros; pruned and frozen parameters apart; and each module's "
            "gradient norm and its ratio to the parameter norm, vanishing and exploding "
            "flagged. Exit status 1 when a trainable parameter got no gradient, 0 otherwise, "
            "4 when the script failed. Under torchrun, each rank reports its own. Given a "
            "trace file (.jsonl) instead: the exact zeros, pruned leaves and flow it recorded."
        ),
    )
    takes_a_script(grads, add_grads_options, run_grads)


def add_grads_options(grads: argparse.ArgumentParser) -> None:
    """``grads``'s options (before or after SCRIPT)."""
    grads.add_argument(
        "--plot",
        default=None,
        metavar="FILE",
        help="draw each module's gradient norm across backward calls to FILE (.svg or .png)",
    )
    grads.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="TRACE",
        help="also record the script's backward calls to TRACE (.jsonl), with what grads found "
        "about each, which replay, dot and the TUI then show",
    )
    grads.add_argument(
        "--rows",
        type=_rows,
        default=ROWS,
        metavar="N",
        help=f"modules shown from each end of the flow table, flagged ones always (default {ROWS})",
    )


_rows = integer_at_least(1, "a number of rows (1 or more)")


def run_grads(args: argparse.Namespace) -> int:
    """``autograd-viz grads``: run the script, print the report, 1 when a gradient is missing."""
    from autograd_viz.cli.record import Signalled, end_by_signal, stopped_by_signals
    from autograd_viz.grads.plot import PLOT_SUFFIXES
    from autograd_viz.grads.watch import watch_grads
    from autograd_viz.launch.processes import follow_children, process_info
    from autograd_viz.launch.script import (
        ScriptFailedError,
        ScriptNotFoundError,
        check_script,
        run_script,
    )
    from autograd_viz.trace import Trace

    script, script_args = script_and_args(args, "grads")
    plot: str | None = args.plot
    if plot is not None:
        check_output(plot)
        if not plot.lower().endswith(PLOT_SUFFIXES):
            raise CommandError(f"cannot draw {plot}: expected a .svg or .png file name")
    output: str | None = args.output
    if output is not None:
        check_output(output)
    if script.endswith(TRACE_SUFFIX):
        if output is not None:
            raise UsageError(f"-o {output}: records a script that grads runs; {script} is a trace")
        if script_args:
            raise UsageError(
                f"arguments ({' '.join(script_args)}): for a script that grads runs; "
                f"{script} is a trace, read as it was recorded"
            )
        report = report_on_trace(script)
        _finish(report, args, plot)
        return FOUND if report.found else OK
    try:
        check_script(script)
    except ScriptNotFoundError as exc:
        raise CommandError(str(exc)) from None
    failure: ScriptFailedError | None = None
    status = 0
    interrupted = False
    signalled: int | None = None
    # Stopped by Ctrl-C, SIGTERM or SIGHUP, the calls that finished are reported, as record
    # and nan save them, and the tool then ends as the script would have.
    with (
        stopped_by_signals(),
        _recording(output) as noter,
        watch_grads(on_call=noter) as watch,
        # Note [Children explained]
        follow_children("grads", Trace(), grads={"rows": args.rows}) as job,
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
            job.settle()  # the children the signal reached are saying theirs
        children = job.grads_found()
    report = watch.report
    report.rank = process_info()["rank"]
    sys.stdout.flush()  # the script's own output comes before the report
    if children and not report.calls:
        _say_children(children, output, plot, 0)
    else:
        _finish(report, args, plot)
        if children:
            _say_children(children, output, plot, report.calls)
    found = report.found or any(child_found for *_, child_found in children)
    if signalled is not None:
        end_by_signal(signalled)
    if interrupted:
        raise KeyboardInterrupt
    if found:
        if failure is not None or status != 0:
            note(f"{failure or f'{script} exited with status {status}'}")
        return FOUND
    if failure is not None:
        print(f"Traceback of {printable(script)}, which raised:", file=sys.stderr)
        print(printable(failure.script_traceback(), newlines=True), end="", file=sys.stderr)
        raise ScriptError(str(failure))
    if status != 0:
        raise ScriptError(f"{script} exited with status {status}")
    return OK


@contextlib.contextmanager
def _recording(output: str | None) -> Iterator[Callable[[CallGrads], None] | None]:
    """Record the script's backward calls to ``output`` (when given), each with its findings
    (Note [Gradient findings in a trace] in ``autograd_viz/grads/recorded.py``).

    Yields:
        What puts a call's findings into the recording, or ``None`` without one.
    """
    if output is None:
        yield None
        return
    from autograd_viz.grads.recorded import into
    from autograd_viz.launch.processes import process_info
    from autograd_viz.trace.recording import Recording
    from autograd_viz.trace.writing import OutputBusyError

    try:
        recording = Recording(output=output)
    except OutputBusyError as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:
        raise CommandError(f"cannot write trace {output}: {exc.strerror or exc}") from None
    try:
        with recording.running():
            yield into(recording.recorder)
            recording.trace.header["process"] = process_info()
    finally:
        stats = recording.stats()
        note(f"trace of {stats.graph_tasks} graph tasks saved to {output}")


TRACE_SUFFIX = ".jsonl"
"""What ``grads`` takes for a trace file to read rather than a script to run."""


def report_on_trace(path: str) -> GradsReport:
    """What a recorded trace says, read a call at a time (:mod:`autograd_viz.grads.trace_report`).

    Raises:
        CommandError: the file cannot be read or is not a trace.
    """
    from autograd_viz.grads.recorded import KIND
    from autograd_viz.grads.report import GradsReport
    from autograd_viz.grads.trace_report import recorded_calls
    from autograd_viz.trace import TraceFormatError
    from autograd_viz.trace.index import iter_calls

    report = GradsReport(from_trace=True)
    noted = True  # every call holds what the watch found (grads -o, record --why)
    try:
        for part in iter_calls(path):
            noted = noted and any(event.kind == KIND for event in part.events)
            for call in recorded_calls(part, report.calls):
                report.add(call)
    except TraceFormatError as exc:
        raise CommandError(f"invalid trace file {exc}") from None
    except OSError as exc:
        raise CommandError(f"cannot read trace {path}: {exc.strerror or exc}") from None
    report.from_trace = not (noted and report.calls)
    return report


# Note [Children explained]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# ``grads torchrun --nproc-per-node 2 train.py`` (or a script that starts ``mp.spawn``)
# runs the backward calls in the children: this process runs none. Each Python child is
# armed at start-up as ``record``'s are (Note [Children armed by the environment] in
# launch/processes.py), explains its own calls and prints its report when it exits,
# headed by its rank as under ``torchrun -m autograd_viz grads``, one process at a time;
# the command's exit status is 1 when any process found a parameter without gradient.
# The children's calls are not in ``-o``'s trace nor in ``--plot``'s drawing, which are
# this process's: a line says so. A child ``multiprocessing`` forks is not explained.


def _say_children(
    children: list[tuple[int | None, int, bool]],
    output: str | None,
    plot: str | None,
    own_calls: int,
) -> None:
    """The line after the children's own reports (Note [Children explained])."""
    found = sum(1 for *_, f in children if f)
    text = (
        f"{count_words(len(children), 'child process', 'child processes')} explained "
        "their backward calls above"
    )
    if found:
        text += f"; {count_words(found, 'process', 'processes')} found a parameter without gradient"
    print(text)
    drawn = "" if own_calls else " (not drawn)"
    mine = [f"-o {output}"] if output else []
    mine += [f"--plot {plot}{drawn}"] if plot else []
    if mine:
        whose = "this process's backward calls only" if own_calls else "no backward call"
        note(f"{' and '.join(mine)}: {whose}; the children's are in their reports above")


def _finish(report: GradsReport, args: argparse.Namespace, plot: str | None) -> None:
    """Print the report and draw the plot."""
    from autograd_viz.grads.plot import save_plot

    print_grads_report(report, rich_console(), rows=args.rows)
    if plot is not None:
        try:
            drawn = save_plot(report, plot)
        except OSError as exc:
            raise CommandError(f"cannot write {plot}: {exc.strerror or exc}") from None
        note(f"gradient norms of {drawn} modules drawn to {plot}")


def print_grads_report(report: GradsReport, console: Console, rows: int = ROWS) -> None:
    """Print the findings, grouped, then the last call's flow table."""
    from autograd_viz.grads.report import FROZEN, PRUNED, ZEROS

    rank = f" on rank {report.rank}" if report.rank is not None else ""
    calls = _count(report.calls, "backward call")
    if not report.calls:
        console.print(f"[yellow]no backward call{rank}[/yellow]: no gradient to explain")
        return
    if report.from_trace:
        console.print(
            "[yellow]note:[/yellow] read from a trace: exact zeros, pruned leaves and the flow; "
            "why a parameter got no gradient needs the script (a trace holds no forward)"
        )
    missing = report.missing
    if missing:
        console.print(
            f"[bold red]{_count(len(missing), 'trainable parameter')} got no gradient"
            f"[/bold red]{rank} ({calls}):"
        )
        _print_groups(missing, report, console)
    else:
        console.print(
            f"[bold green]every trainable parameter got a gradient[/bold green]{rank} in {calls}"
        )
    for reason, title in (
        (ZEROS, "[bold yellow]gradient of exact zeros[/bold yellow]"),
        (PRUNED, "[bold]pruned on purpose[/bold] (the call's inputs= or grad() left them out)"),
        (FROZEN, "[bold]frozen[/bold] (requires_grad=False)"),
    ):
        found = report.findings(reason)
        if found:
            console.print(f"{title}: {len(found)}")
            _print_groups(found, report, console, brief=reason == FROZEN)
    if report.last is not None and report.last.flow:
        print_flow(report.last.index, report.last.flow, console, rows)
    if report.last is not None and report.last.flow_left_out:
        n = report.last.flow_left_out
        are, them = ("is", "it") if n == 1 else ("are", "them")
        console.print(
            f"{count_words(n, 'parameter')} {are} left out of the flow: the gradients nested "
            f"backward calls (reentrant checkpoints) gave {them} cannot be told apart",
            soft_wrap=True,
        )
    flagged = report.flagged()
    if flagged:
        by_flag: dict[str, dict[str, list[int]]] = {}
        for call, row in flagged:
            assert row.flag is not None
            by_flag.setdefault(row.flag, {}).setdefault(row.module, []).append(call)
        for flag, modules in by_flag.items():
            listed = ", ".join(
                f"{shown(m)} ({_count(len(c), 'call')})" for m, c in list(modules.items())[:12]
            )
            more = f" and {len(modules) - 12} more" if len(modules) > 12 else ""
            console.print(f"[bold yellow]{flag}[/bold yellow] gradients: {listed}{more}")


def _print_groups(
    found: list[Repeated], report: GradsReport, console: Console, brief: bool = False
) -> None:
    """Parameters with the same reason at the same line on one entry."""
    groups: dict[tuple[object, ...], list[Repeated]] = {}
    for r in found:
        f = r.finding
        groups.setdefault((f.reason, f.why, f.where, r.first_call, r.calls), []).append(r)
    if brief:
        listed = [r.finding.parameter for group in groups.values() for r in group]
        shown_names = ", ".join(shown(n) for n in listed[:20])
        more = f" and {len(listed) - 20} more" if len(listed) > 20 else ""
        console.print(f"  {shown_names}{more}", soft_wrap=True)
        return
    for group in groups.values():
        first = group[0]
        f = first.finding
        names = ", ".join(
            shown(f"{r.finding.parameter} {_shape(r.finding.shape)}") for r in group[:NAMES]
        )
        if len(group) > NAMES:
            names += f" and {len(group) - NAMES:,} more"
        console.print(f"  [bold]{names}[/bold]", soft_wrap=True)
        console.print(f"      {f.reason}: {shown(f.why)}", soft_wrap=True)
        if f.where is not None:
            code = f"  [cyan]{shown(f.where.code)}[/cyan]" if f.where.code else ""
            console.print(f"      at {shown(_place(f.where))}{code}", soft_wrap=True)
        if report.calls > 1:
            if first.calls == 1:
                console.print(f"      in call {first.first_call} of {report.calls}")
            else:
                console.print(
                    f"      in {first.calls:,} of {report.calls:,} calls, "
                    f"from call {first.first_call}"
                )


def print_flow(call: int, flow: list[FlowRow], console: Console, rows: int = ROWS) -> None:
    """The flow table of one call: largest gradient norms first, then the smallest, and
    every flagged module between them (a flag is never left out of the table)."""
    from rich.table import Table

    ordered = sorted(flow, key=lambda r: -r.grad_norm if math.isfinite(r.grad_norm) else -math.inf)
    flagged = any(row.flag is not None for row in ordered)
    table = Table(title=f"gradient flow, backward call {call}", title_justify="left")
    # A name too long for the terminal folds onto the next line, after a dot where it can:
    # cut, the names of sibling modules would read alike ("model.decoder.layers.0.encoder_…"
    # for each projection).
    table.add_column("module", overflow="fold")
    table.add_column("‖grad‖", justify="right", no_wrap=True)
    table.add_column("‖param‖", justify="right", no_wrap=True)
    table.add_column("ratio", justify="right", no_wrap=True)
    if flagged:
        table.add_column("flag", no_wrap=True)
    lines: list[list[str]] = []
    for row in _rows_shown(ordered, rows):
        if isinstance(row, int):
            lines.append([f"... {row:,} more", *[""] * (len(table.columns) - 1)])
            continue
        known = not math.isnan(row.param_norm)  # a trace records no parameter norms
        cells = [
            row.module,
            f"{row.grad_norm:.3g}",
            f"{row.param_norm:.3g}" if known else "-",
            f"{row.ratio:.3g}" if known else "-",
        ]
        if flagged:
            cells.append(row.flag or "")
        lines.append(cells)
    # Each column's width and padding, and the borders: what is left is the names'.
    others = sum(
        max([len(str(column.header)), *(len(cells[i]) for cells in lines)]) + 3
        for i, column in enumerate(table.columns[1:], start=1)
    )
    width = max(12, console.width - others - 4)
    for name, *numbers in lines:
        if flagged and numbers[-1]:
            numbers[-1] = f"[bold yellow]{numbers[-1]}[/bold yellow]"
        table.add_row("\n".join(shown(part) for part in _fold_at_dots(name, width)), *numbers)
    console.print(table)


def _fold_at_dots(name: str, width: int) -> list[str]:
    """``name`` in lines of at most ``width``, each broken after its last dot within the
    width (``text_model.encoder.layers.1.`` / ``self_attn.q_proj``); a part longer than
    ``width`` is left for the table to fold."""
    lines = []
    while len(name) > width:
        cut = name.rfind(".", 0, width) + 1
        if not cut:  # no dot within the width: the table folds it
            break
        lines.append(name[:cut])
        name = name[cut:]
    lines.append(name)
    return lines


def _rows_shown(ordered: list[FlowRow], rows: int) -> list[FlowRow | int]:
    """The first and last ``rows`` of ``ordered`` and every flagged row between them; each
    run of rows left out is the count of them."""
    shown_rows: list[FlowRow | int] = []
    for at, row in enumerate(ordered):
        if at < rows or at >= len(ordered) - rows or row.flag is not None:
            shown_rows.append(row)
        elif shown_rows and isinstance(shown_rows[-1], int):
            shown_rows[-1] += 1
        else:
            shown_rows.append(1)
    return shown_rows


def _place(where: Where) -> str:
    """``file:line``, the file relative to the working directory when it is under it."""
    path = where.file
    with contextlib.suppress(ValueError):
        relative = os.path.relpath(path)
        if not relative.startswith(os.pardir):
            path = relative
    return f"{path}:{where.line}"


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _count(n: int, singular: str) -> str:
    return f"{n:,} {singular if n == 1 else singular + 's'}"
