"""``autograd-viz dot`` and ``autograd-viz animate``: draw a backward pass from a script or a trace.

Both take a SOURCE: a Python script (``*.py``), run with recording on, or a
trace file from ``autograd-viz record``. Their options may come before or
after SOURCE; anything else after a script is the script's own arguments
(after a ``--``, everything is).
"""

from __future__ import annotations

import argparse
import difflib
import gc
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING

from autograd_viz.cli.base import (
    PROG,
    ArgumentParser,
    CommandError,
    ScriptError,
    UsageError,
    add_call_option,
    check_output,
    integer_at_least,
    note,
    options_only,
    positive,
    refuse_twice,
    split_options,
)
from autograd_viz.trace.records import values_recorded
from autograd_viz.trace.text import printable

if TYPE_CHECKING:
    from autograd_viz.draw.model.graph_view import GraphView
    from autograd_viz.draw.model.options import ViewOptions
    from autograd_viz.trace import Trace


def add_graph_options(parser: argparse.ArgumentParser, animate: bool = False) -> None:
    """The options ``dot`` and ``animate`` share, and ``dot``'s ``--step``; not SOURCE."""
    add_call_option(parser)
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help=(
            "the page or GIF to write (.html or .gif; default: SOURCE's name with .html)"
            if animate
            else "the file to write: .dot, .svg, .png or .pdf (default: SOURCE's name with .svg)"
        ),
    )
    if not animate:
        parser.add_argument(
            "--step",
            type=_count,
            metavar="K",
            help="draw the state after K engine events (default: the end)",
        )
    parser.add_argument(
        "--graph-task",
        type=int,
        metavar="N",
        help="the graph task (backward call) to draw (default: the one of the step)",
    )
    parser.add_argument("--saved", action="store_true", help="draw saved tensors")
    parser.add_argument(
        "--values", action="store_true", help="write gradient summaries on nodes and edges"
    )
    parser.add_argument("--no-legend", action="store_true", help="leave out the legend")
    parser.add_argument(
        "--around",
        metavar="NAME",
        help=(
            "draw only what is near NAME: a node id, 'Name #id', a parameter, or a module "
            "path (drawn whole); any name the picture shows"
        ),
    )
    parser.add_argument(
        "--level",
        type=_count,
        metavar="L",
        help=(
            "open modules L deep (1: the outermost) and draw deeper ones as one box each "
            "(default: the deepest level within 150 boxes)"
        ),
    )
    parser.add_argument(
        "--expand",
        action="append",
        default=[],
        metavar="MODULE",
        help=(
            "draw MODULE whole (a path, a fold such as 'h.{0..11}', or a node); "
            "'all' draws every node without module boxes; may be repeated"
        ),
    )
    if not animate:
        parser.add_argument(
            "--leaves",
            action="store_true",
            help=(
                "draw as before each fold opened one call: every fold one box, and calls that "
                "hold no calls opened by the level too"
            ),
        )
    parser.add_argument(
        "--depth",
        type=_count,
        default=2,
        metavar="K",
        help="with --around, how many edges away to go (default: 2)",
    )
    parser.add_argument(
        "--collapse",
        action="store_true",
        help="fold repeated chains outside modules into one node with a count",
    )
    parser.add_argument(
        "--max-nodes",
        type=positive,
        metavar="N",
        help="draw at most N nodes, nearest the root; a notice counts the rest",
    )
    parser.add_argument(
        "--why",
        action="store_true",
        help="with a script: also find which parameters got no gradient and why (as "
        "autograd-viz grads does; about 2x the recording's time), and mark them",
    )
    if animate:
        parser.add_argument(
            "--max-frames",
            type=positive,
            default=600,
            metavar="N",
            help="at most N frames, sampled evenly when the trace has more steps (default: 600)",
        )


def run_dot(args: argparse.Namespace) -> int:
    """``autograd-viz dot``: write the graph of one step as DOT, SVG, PNG or PDF."""
    return _ended_by_signals(_run_dot, args)


def run_animate(args: argparse.Namespace) -> int:
    """``autograd-viz animate``: one frame per engine step, as an HTML page or a GIF."""
    return _ended_by_signals(_run_animate, args)


def _ended_by_signals(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``run(args)``, SIGTERM and SIGHUP raised as an exception so that the Graphviz processes
    it started are ended (Note [No dot outlives us] in draw/render/frames.py); then this process
    ends by that signal, as it would have."""
    from autograd_viz.cli.record import Signalled, end_by_signal, stopped_by_signals

    try:
        with stopped_by_signals():
            return run(args)
    except Signalled as exc:
        end_by_signal(exc.signum)
        raise  # not reached: the signal ends the process


def _run_dot(args: argparse.Namespace) -> int:
    from autograd_viz.draw.render import dot

    source, trace = _prepare(args, ".svg", dot.output_format)
    output: str = args.output
    step = len(trace) if args.step is None else args.step
    if step > len(trace):
        raise CommandError(f"--step {step} is past the end of {source} (0 .. {len(trace)})")
    options = _options(args)
    view = _view(trace, step, args, options)
    graph = dot.render(view, saved=options.saved, values=options.values, legend=options.legend)
    drawn_otherwise: list[str] = []
    try:
        fmt = dot.save(graph, output, drawn_otherwise)
    except dot.GraphvizNotFoundError as exc:
        raise CommandError(str(exc)) from None
    except (RuntimeError, OSError) as exc:
        raise CommandError(f"cannot write {output}: {exc}") from None
    tasks = ", ".join(str(t.id) for t in view.tasks)
    boxes = sum(1 for n in view.nodes.values() if n.box is not None)
    drawn = f"{len(view.nodes) - boxes:,} nodes"
    if boxes:
        drawn += " and 1 module box" if boxes == 1 else f" and {boxes:,} module boxes"
    print(
        f"Wrote {printable(output)} ({fmt}): {drawn}, {len(view.edges):,} edges "
        f"at step {step:,} of {len(trace):,}, graph task {tasks}."
    )
    for line in view.notices:
        print(f"  {printable(line)}")
    for line in drawn_otherwise:
        note(line)
    tier = values_recorded(trace.header)
    if args.values and tier != "all":
        note(f"{source} was recorded with --values {tier}: gradient values not recorded")
    return 0


def _run_animate(args: argparse.Namespace) -> int:
    from autograd_viz.draw.render import animate, dot

    source, trace = _prepare(args, ".html", animate.output_format)
    output: str = args.output
    options = _options(args)
    _view(trace, len(trace), args, options)  # a bad --graph-task or --around fails first
    try:
        result = animate.animate(
            trace,
            output,
            max_frames=args.max_frames,
            title=os.path.basename(source),
            graph_task=args.graph_task,
            **asdict(options),
        )
    except dot.GraphvizNotFoundError as exc:
        raise CommandError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except (RuntimeError, OSError) as exc:
        raise CommandError(f"cannot write {output}: {exc}") from None
    skipped = f" ({result.skipped:,} steps skipped; see --max-frames)" if result.skipped else ""
    print(f"Wrote {printable(output)}: {result.frames:,} frames of {printable(source)}{skipped}.")
    return 0


# -- shared ----------------------------------------------------------------------------


def _prepare(
    args: argparse.Namespace, suffix: str, output_format: Callable[[str], str]
) -> tuple[str, Trace]:
    """Split SOURCE from its arguments, check the output, and get the trace.

    The output is checked (its format too) before a script runs, not after.
    """
    words = list(args.source_and_args)
    if words[:1] == ["--"]:
        del words[0]
    ours, rest = split_options(words, args.option_parser)
    refuse_twice(ours, args.option_parser, args)
    args.option_parser.parse_args(ours, namespace=args)
    _refuse_expanded_braces(args, words)
    if not rest:
        raise UsageError(f"{args.command}: missing SOURCE, a trace file or a Python script")
    source, *script_args = rest
    if args.output is None:
        args.output = os.path.splitext(os.path.basename(source))[0] + suffix
    check_output(args.output)
    try:
        output_format(args.output)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if source.endswith(".py"):
        return source, _record(source, script_args, args.call, args.why)
    if script_args:
        raise UsageError(
            f"{args.command}: {source} is a trace file, which takes no arguments "
            f"(got {' '.join(script_args)})"
        )
    return source, _load(source, args.call)


def _refuse_expanded_braces(args: argparse.Namespace, words: Sequence[str]) -> None:
    """Refuse a fold's name the shell cut into words, which would name something else.

    ``--around transformer.h.{0..11}`` unquoted reaches us as ``--around
    transformer.h.0 transformer.h.1 ...``: the first word is taken for the name
    and the others for SOURCE or the script's arguments, so the picture would
    show one block, silently. Words given with SOURCE that read as the name's
    brace expansion with it
    (:func:`~autograd_viz.draw.model.folds.fold_name` of them all gives them back) say so.
    """
    from autograd_viz.draw.model.folds import fold_name
    from autograd_viz.draw.model.targets import expand_braces

    if "--" in words:  # what follows is the script's, as given
        words = words[: list(words).index("--")]
    around = getattr(args, "around", None)
    named = [("--around", around)] if around else []
    named += [("--expand", value) for value in getattr(args, "expand", ())]
    for option, value in named:
        if "{" in value:
            continue  # braces the shell left as they are: it expanded none
        # What the shell made of the name follows it: right after it among the words, or
        # first of them when the option came before SOURCE (parsed before them). Another
        # option's value, alike but given on its own (--around h.3.attn --expand h.5),
        # is no part of it.
        starts = [
            at + 1
            for at, word in enumerate(words)
            if word == f"{option}={value}" or (word == value and words[at - 1 : at] == [option])
        ]
        for start in starts or [0]:
            after: list[str] = []
            for other in words[start:]:
                if other.startswith("-") or other == value or not _alike(value, other):
                    break
                after.append(other)
            names = [value, *after]
            folded = fold_name(names)
            if after and "{" in folded and expand_braces(folded) == names:
                raise UsageError(
                    f"the shell expanded {folded!r} into {len(names)} words; quote the "
                    f"name: {option} '{folded}'"
                )


def _alike(one: str, other: str) -> bool:
    return difflib.SequenceMatcher(None, one, other).ratio() >= 0.6


def _record(
    script: str, script_args: list[str], call: int | None = None, why: bool = False
) -> Trace:
    from autograd_viz.grads.recorded import explaining
    from autograd_viz.launch.script import ScriptFailedError, ScriptNotFoundError, run_script
    from autograd_viz.trace.calls import CallSelection
    from autograd_viz.trace.recording import Recording

    recording = Recording(calls=CallSelection(None if call is None else [call]))
    trace = recording.trace
    try:
        with recording.running(), explaining(recording.recorder, why):
            status = run_script(script, script_args)
    except ScriptNotFoundError as exc:
        raise CommandError(str(exc)) from None
    except ScriptFailedError as exc:
        if not trace.events:
            raise ScriptError(str(exc)) from None
        # What ran before the failure is what shows where it failed: draw it.
        note(f"{exc}; drawing the {len(trace.events):,} events recorded before it")
    else:
        if status != 0:
            note(f"{script} exited with status {status}")
    if not trace.graph_tasks:
        raise CommandError(f"{script} ran no backward pass, so there is nothing to draw")
    _keep_recorded()
    return trace


def _keep_recorded() -> None:
    """Keep the trace recorded in this process as a loaded one is kept: out of the collector's
    sight (Note [A replayed trace skips the collector] in cli/tui.py).

    The script has ended, so what it left in reference cycles (its model, its tensors) is
    garbage: one collection frees it, and freezing then keeps the trace, which lives until
    ``dot`` or ``animate`` exits, from being scanned again while its views are built.
    """
    from autograd_viz.trace.records import paused_gc

    with paused_gc():  # counted with every other pause (Note [A pause of the collector is counted])
        gc.collect()
        gc.freeze()


def _load(path: str, call: int | None = None) -> Trace:
    from autograd_viz.cli.tui import load_for_replay

    # dot and animate keep the trace until they exit, as replay does: loaded with the
    # collector off and frozen, a view of it built later does not scan it again (Note [A
    # replayed trace skips the collector] in cli/tui.py).
    trace = load_for_replay(path, call)
    if not trace.graph_tasks:
        raise CommandError(f"{path} holds no backward pass, so there is nothing to draw")
    return trace


def _options(args: argparse.Namespace) -> ViewOptions:
    """The picture ``dot`` and ``animate`` were asked for."""
    from autograd_viz.draw.model.options import ViewOptions

    return ViewOptions(
        around=args.around,
        depth=args.depth,
        collapse=args.collapse,
        max_nodes=args.max_nodes,
        level=args.level,
        expand=args.expand,
        leaves=getattr(args, "leaves", False),
        saved=args.saved,
        values=args.values,
        legend=not args.no_legend,
    )


def _view(trace: Trace, step: int, args: argparse.Namespace, options: ViewOptions) -> GraphView:
    from autograd_viz.draw.render import dot

    try:
        return dot.select(dot.build_view(trace, step, graph_task=args.graph_task), options)
    except dot.GraphViewError as exc:
        raise CommandError(str(exc)) from None


_count = integer_at_least(0, "a non-negative integer")


def options_parser(animate: bool) -> argparse.ArgumentParser:
    """A parser of the options alone, for the ones that come after SOURCE."""
    return options_only(lambda parser: add_graph_options(parser, animate))


def add_graph_commands(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    """Register ``dot`` and ``animate``."""
    source_help = "a trace file, or a Python script to run (with its ARGS) while recording"
    dot = commands.add_parser(
        "dot",
        usage=f"{PROG} dot [OPTIONS] SOURCE [ARGS ...]",
        help="draw the backward graph at any step as DOT, SVG, PNG or PDF (Graphviz)",
        description=(
            "Draw the backward graph of SOURCE at one step: each node's name, sequence_nr, "
            "topological_nr, dependencies remaining/total, device and status. Options may "
            "come before or after SOURCE; the format follows the output file's suffix."
        ),
    )
    add_graph_options(dot)
    dot.add_argument(
        "source_and_args", nargs=argparse.REMAINDER, metavar="SOURCE", help=source_help
    )
    dot.set_defaults(run=run_dot, option_parser=options_parser(animate=False))

    animate = commands.add_parser(
        "animate",
        usage=f"{PROG} animate [OPTIONS] SOURCE [ARGS ...]",
        help="animate a backward pass, one frame per engine step (HTML page or GIF)",
        description=(
            "Write one self-contained HTML page (or an animated GIF, by the suffix) with a "
            "drawing of the graph after every engine step, with play, pause, step and a slider."
        ),
    )
    add_graph_options(animate, animate=True)
    animate.add_argument(
        "source_and_args", nargs=argparse.REMAINDER, metavar="SOURCE", help=source_help
    )
    animate.set_defaults(run=run_animate, option_parser=options_parser(animate=True))


__all__ = ["add_graph_commands", "add_graph_options", "options_parser", "run_animate", "run_dot"]
