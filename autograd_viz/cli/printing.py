"""``autograd-viz run --print``: a script's backward calls as text, a line per step, as they end.

The walk-through the TUI steps, without a terminal: for every backward call a
header (its call number, graph task, root, node count and thread), then each
node in the order it ran, with its topological number, the gradients it
waited for (its dependency count when the call started) and the thread that
ran it, and a line for each NaN or Inf the checks of ``autograd-viz nan``
find (forward or backward), each collective launched or finished (DDP's
buckets), and each error. A call is printed when it ends; nothing of it is
kept after, so memory stays flat however long the script trains.

Child processes (``torch.multiprocessing.spawn``, ``multiprocessing``,
``torchrun``'s workers) are followed as ``record`` follows them (Note
[Children armed by the environment] in :mod:`autograd_viz.launch.processes`)
and print to the same output, each line headed by the process: ``[rank1]``,
or ``[pid 4242]`` for a child without a rank. Each line is written whole, so
the processes' lines interleave but never cut into each other.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from autograd_viz.trace.text import one_line, printable

if TYPE_CHECKING:
    from autograd_viz.trace import GraphTaskInfo, Trace, TraceEvent
    from autograd_viz.trace.calls import CallSelection
    from autograd_viz.trace.recording import Recording

_MAIN_THREADS = ("MainThread", "autograd-viz-live")


def thread_label(name: str) -> str:
    """A thread as every view names it: ``main`` for the program's, ``sim:0`` for a worker."""
    return "main" if name in _MAIN_THREADS else name.removeprefix("autograd-")


class CallPrinter:
    """Prints each part a :class:`~autograd_viz.trace.recorder.Recorder` hands on.

    Use it as the recorder's ``on_calls``.

    Args:
        stream: where the lines go (``sys.stdout`` when ``None``, looked up at
            each write, so that a redirection by the program is followed).
        prefix: the text each line starts with, asked for at each call (a
            process learns its rank only once it has made its process group).
    """

    def __init__(
        self, stream: TextIO | None = None, prefix: Callable[[], str] = lambda: ""
    ) -> None:
        self._stream = stream
        self._prefix = prefix
        self.calls = 0
        """Backward calls printed."""
        self.findings = 0
        """NaN or Inf lines printed."""

    def __call__(self, part: Trace, calls: int) -> None:
        lead = self._prefix()
        lines = list(self.lines(part))
        stream = self._stream or sys.stdout
        try:
            for line in lines:
                # One write and flush a line: the lines of several processes sharing
                # the output interleave whole.
                stream.write(f"{lead}{line}\n")
                stream.flush()
        except (OSError, ValueError):
            pass  # the reader went away (a pipe to `head`): the program goes on unwatched

    def lines(self, part: Trace) -> Iterator[str]:
        """The lines of one part: its calls in order, and any finding outside them."""
        step: dict[int, int] = {}
        columns = _columns(part)
        for event in part.events:
            info = part.graph_tasks.get(event.graph_task)
            kind = event.kind
            if kind == "graph_task_start" and info is not None:
                step[event.graph_task] = 0
                if info.call is not None:
                    self.calls += 1
                yield _header(info)
            elif kind == "node_start":
                step[event.graph_task] = step.get(event.graph_task, 0) + 1
                yield _node_line(step[event.graph_task], event, info, columns[event.graph_task])
            elif kind == "anomaly":
                self.findings += 1
                yield _finding(event, info)
            elif kind in ("comm", "error", "reentrant_enter"):
                yield f"  {kind:<6} {_explained(event, info)}"
            elif kind == "graph_task_end" and info is not None:
                yield _footer(event, info, step.get(event.graph_task, 0), part)


def _header(info: GraphTaskInfo) -> str:
    if info.call is not None:
        what = f"backward call {info.call}"
    else:
        what = f"reentrant backward inside graph task {info.parent}"
    root = info.nodes.get(info.root)
    root_name = _node_name(root) if root is not None else "?"
    return (
        f"── {what} · graph task {info.id} · root {root_name} · {len(info.nodes)} nodes · "
        f"thread {printable(thread_label(info.thread))}"
    )


def _node_name(node: Any) -> str:
    """``MulBackward0``, or ``AccumulateGrad(w)`` for a leaf with a name; printable."""
    return one_line(_full_name(node), 80)


def _full_name(node: Any) -> str:
    """A node's whole printable name, with its module: ``AddmmBackward0 in encoder.0.fc``.

    A leaf named by its module's path (``AccumulateGrad(encoder.0.fc.weight)``)
    already says its module.
    """
    name = str(node.name)
    leaf = node.leaf
    if leaf is not None and leaf.name:
        name = f"{name.removeprefix('torch::autograd::')}({leaf.name})"
    module = node.scope[-1][0] if node.scope else None
    if module and not (leaf is not None and str(leaf.name).startswith(f"{module}.")):
        name = f"{name} in {module}"
    return printable(name)


# Note [Columns of run --print]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A node's line has columns (step, topological number, name, dependencies,
# thread) that line up down a call. Their widths are measured on the call
# itself, in terminal cells (a CJK module name takes two a character), since
# the whole call is known when it is printed: a GPT-2's `AddmmBackward0 in
# transformer.h.11.mlp.c_fc` and a toy's `MulBackward0` both line up. The name
# column stops at NAME_CELLS: a longer name is cut in its middle with `…`,
# keeping its op and its innermost modules, so one 100,000-character name
# neither widens every line nor runs off them. Names are printable text first
# (Note [Names are text]), so an escape is measured as the characters shown.

NAME_CELLS = 60
"""The widest a node's name is printed (Note [Columns of run --print])."""


@dataclass(frozen=True)
class _Columns:
    """The widths, in terminal cells, of a call's node-line columns."""

    step: int = 1
    topo: int = 1
    name: int = 1
    waited: int = 1


def _columns(part: Trace) -> dict[int, _Columns]:
    """Each graph task's column widths, measured on the node lines it prints."""
    from rich.cells import cell_len

    widths: dict[int, list[int]] = {}
    for event in part.events:
        if event.kind != "node_start":
            continue
        info = part.graph_tasks.get(event.graph_task)
        node = _node_of(event, info)
        seen = widths.setdefault(event.graph_task, [0, 1, 1, 1])
        seen[0] += 1
        seen[1] = max(seen[1], len(str(_topo(event))))
        seen[2] = max(seen[2], min(NAME_CELLS, cell_len(_line_name(event, node))))
        seen[3] = max(seen[3], len(str(node.dependencies if node is not None else "?")))
    columns: defaultdict[int, _Columns] = defaultdict(_Columns)
    for task, (steps, topo, name, waited) in widths.items():
        columns[task] = _Columns(len(str(steps)), topo, name, waited)
    return columns


def _node_of(event: TraceEvent, info: GraphTaskInfo | None) -> Any:
    return info.nodes.get(event.node_id) if info is not None and event.node_id else None


def _topo(event: TraceEvent) -> int | str:
    return event.topological_nr if event.topological_nr is not None else "?"


def _line_name(event: TraceEvent, node: Any) -> str:
    return _full_name(node) if node is not None else printable(event.node_name or "?")


def fit(text: str, cells: int) -> str:
    """``text`` padded with spaces to ``cells`` terminal cells, or cut in its middle with ``…``
    to fit them (Note [Columns of run --print])."""
    from rich.cells import cell_len, get_character_cell_size

    used = cell_len(text)
    if used <= cells:
        return text + " " * (cells - used)
    room = cells - 1  # the ellipsis
    head_room = room - room // 2
    head, taken = [], 0
    for char in text:
        size = get_character_cell_size(char)
        if taken + size > head_room:
            break
        head.append(char)
        taken += size
    tail: list[str] = []
    tail_room = room - taken
    for char in reversed(text):
        size = get_character_cell_size(char)
        if tail_room - size < 0:
            break
        tail.append(char)
        tail_room -= size
    return "".join(head) + "…" + "".join(reversed(tail)) + " " * tail_room


def _node_line(n: int, event: TraceEvent, info: GraphTaskInfo | None, columns: _Columns) -> str:
    node = _node_of(event, info)
    name = fit(_line_name(event, node), columns.name)
    waited = node.dependencies if node is not None else "?"
    return (
        f"  {n:>{columns.step}}  topo {_topo(event)!s:<{columns.topo}}  {name}  "
        f"waited for {waited!s:<{columns.waited}}  {printable(thread_label(event.thread))}"
    )


def _finding(event: TraceEvent, info: GraphTaskInfo | None) -> str:
    value = "Inf" if event.data.get("value") == "inf" else "NaN"
    return f"  {value:<6} {_explained(event, info)}"


def _explained(event: TraceEvent, info: GraphTaskInfo | None) -> str:
    from autograd_viz.draw.render.words import explain

    def label(node_id: int | None, fallback: str | None) -> str:
        node = info.nodes.get(node_id) if info is not None and node_id is not None else None
        if node is not None:
            return _node_name(node)
        return printable(fallback or "?")

    text = explain(event, event.data, label)
    if event.data.get("op"):
        text += f" (op {event.data['op']})"
    where = _where(event.data.get("traceback"))
    if where:
        text += f" at {where}"
    return one_line(printable(text), 240) + f" [{printable(thread_label(event.thread))}]"


_FRAME = re.compile(r'\s*File "(?P<file>.*)", line (?P<line>\d+)')


def _where(traceback: object) -> str | None:
    """``train.py:12``: the innermost frame of a recorded traceback, the program's line."""
    if not isinstance(traceback, list | tuple) or not traceback:
        return None
    found = _FRAME.match(str(traceback[-1]))
    return f"{found['file']}:{found['line']}" if found else None


def _footer(end: TraceEvent, info: GraphTaskInfo, steps: int, part: Trace) -> str:
    start = next(
        (e for e in part.events if e.kind == "graph_task_start" and e.graph_task == info.id), None
    )
    took = f", {(end.t_ns - start.t_ns) / 1e6:.2f} ms" if start is not None else ""
    if end.data.get("status") == "ok":
        return f"   done  {steps} node{'' if steps == 1 else 's'} ran{took}"
    message = one_line(printable(end.data.get("message", "")), 200)
    return f"   failed  {printable(end.data.get('exc_type'))}: {message} ({steps} nodes ran{took})"


@contextlib.contextmanager
def printing(
    printer: CallPrinter,
    max_values: int,
    calls: CallSelection | None = None,
    values: str = "all",
    observe: str = "nodes",
    output: str | None = None,
) -> Iterator[Recording]:
    """Print every recorded backward call inside the block as it ends (every source armed).

    The NaN checks of ``autograd-viz nan`` run alongside, collecting (they
    never stop the program), so that a NaN or Inf is a line where it was
    born, forward or backward. With ``output`` the calls printed are also
    written there as ``record`` writes them: each as it ends, or with
    ``calls.last`` the last N (up to the first call with a NaN or Inf) when the
    block ends, however it ends.

    Raises:
        OSError: ``output`` cannot be opened.
    """
    from autograd_viz.nan.watch import nan_checks
    from autograd_viz.trace.recording import Recording

    recording = Recording(
        max_values,
        calls,
        output,
        gated=False,
        values=values,
        observe=lambda part: printer(part, 0),
        watch=observe,
    )
    recording.forks_observe = True  # a forked child prints its own calls, headed by its pid
    with recording.running(), nan_checks(max_values=max_values):
        yield recording


def process_prefix(inherited_rank: str | None, top: int | None) -> Callable[[], str]:
    """The line heading of this process: none for the watching command's own process
    (pid ``top``) when it has no rank, ``[rank1]`` for a rank, ``[pid 4242]`` otherwise."""
    from autograd_viz.launch.processes import process_info

    def prefix() -> str:
        process = process_info(inherited_rank)
        if process["rank"] is not None:
            return f"[rank{process['rank']}] "
        return "" if os.getpid() == top else f"[pid {process['pid']}] "

    return prefix


def run_print(args: Any, script: str, script_args: list[str]) -> int:
    """``autograd-viz run --print SCRIPT``: the script's backward calls printed as they end.

    With ``-o`` they are written too, as ``record`` writes them (with ``--last N``
    the last N, when the script ends, raises or is stopped by SIGINT, SIGTERM or
    SIGHUP, or at the first call with a NaN or Inf); stopped by a signal, the
    tool then ends by it.

    Returns:
        The script's exit status, as ``python SCRIPT`` gives it (1 with its
        traceback on stderr when it raised).

    Raises:
        UsageError: ``--last`` without ``-o`` (it keeps the calls only to write them).
        CommandError: ``-o`` cannot be written.
    """
    from autograd_viz.cli.base import CommandError, UsageError, check_output, note
    from autograd_viz.cli.jobs import who
    from autograd_viz.cli.record import (
        Signalled,
        call_selection,
        end_by_signal,
        own_streamed_path,
        stopped_by_signals,
    )
    from autograd_viz.launch.processes import follow_children, read_settings
    from autograd_viz.launch.script import ScriptFailedError, run_script
    from autograd_viz.trace import DEFAULT_MAX_VALUES
    from autograd_viz.trace.text import count_words

    # --anomaly is the TUI's stop at a NaN; the lines say every NaN or Inf anyway.
    output: str | None = args.output
    if args.last and output is None:
        raise UsageError(
            "--last N with --print keeps the last calls only to write them: add -o TRACE "
            "(every call is printed as it ends either way)"
        )
    if output is not None:
        check_output(output)
    own = own_streamed_path(output)[0] if output is not None else None
    calls = call_selection(args)
    parent = read_settings()
    printer = CallPrinter(prefix=process_prefix(parent.rank if parent else None, os.getpid()))
    failure: ScriptFailedError | None = None
    status = 0
    stopped: int | None = None
    interrupted = False
    with contextlib.ExitStack() as stack:
        stack.enter_context(stopped_by_signals())
        try:
            recording = stack.enter_context(
                printing(printer, DEFAULT_MAX_VALUES, calls, args.values, args.observe, own)
            )
        except OSError as exc:
            raise CommandError(f"cannot write trace {own}: {exc.strerror or exc}") from None
        job = stack.enter_context(
            follow_children(
                "print",
                recording.trace,
                max_values=DEFAULT_MAX_VALUES,
                calls={"steps": calls.steps, "every": calls.every},
                values=args.values,
                observe=args.observe,
            )
        )
        try:
            status = run_script(script, script_args)
        except ScriptFailedError as exc:
            failure = exc
        except KeyboardInterrupt:
            interrupted = True
        except Signalled as exc:
            stopped = exc.signum
        children = job.reports()
    sys.stdout.flush()
    found = f", {printer.findings} NaN or Inf" if printer.findings else ""
    said = f"{_calls(printer.calls)} printed{found}"
    if children:
        count = len(children)
        said += (
            f"; {_calls(sum(child.graph_tasks for child in children))} by {count} child "
            f"process{'' if count == 1 else 'es'} ("
            + ", ".join(who(child.rank, child.world_size, child.pid) for child in children)
            + ")"
        )
    note(said)
    if own is not None:
        problem = recording.save_error or (recording.writer.error if recording.writer else None)
        if problem is not None:
            raise CommandError(f"cannot write trace {own}: {problem.strerror or problem}")
        kept = count_words(recording.stats().graph_tasks, "graph task")
        last = f"the last {kept}" if calls.last is not None else kept
        note(f"{last} saved to {own}; step them with 'autograd-viz replay {own}'")
    if stopped is not None:
        end_by_signal(stopped)
    if interrupted:
        raise KeyboardInterrupt
    if failure is not None:
        print(f"Traceback of {printable(script)}, which raised:", file=sys.stderr)
        print(printable(failure.script_traceback(), newlines=True), end="", file=sys.stderr)
        return 1
    return status


def _calls(count: int) -> str:
    return f"{count:,} backward call{'' if count == 1 else 's'}"
