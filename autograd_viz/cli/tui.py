"""The commands that open the TUI: ``demo``, ``run SCRIPT`` and ``replay TRACE``.

``demo`` and ``run`` are live: every engine event waits for the UI (see
:mod:`autograd_viz.live`). ``demo`` runs its program in a background thread;
``run`` runs the script on the main thread, as ``python`` would, with the TUI
on a thread beside it (see :mod:`autograd_viz.tui.beside`). ``run``
turns the NaN checks of ``autograd-viz nan`` on (collecting), so that a NaN or
Inf born in the forward pass is an event to stop at (``f``) and jump to (``a``). ``replay``
steps through a trace file. The TUI needs a terminal; without one, ``demo``
prints its walk-through instead, ``run`` prints each backward call as it ends
(as ``run --print`` does, :mod:`autograd_viz.cli.printing`) and ``replay``
says what to run.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import gc
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from autograd_viz.cli.base import (
    INTERRUPTED,
    PROG,
    ArgumentParser,
    CommandError,
    UsageError,
    add_call_option,
    check_output,
    load_trace,
    note,
    script_and_args,
    takes_a_script,
)
from autograd_viz.cli.record import add_call_options, call_selection
from autograd_viz.trace.text import printable

if TYPE_CHECKING:
    from autograd_viz.launch.processes import ChildReport
    from autograd_viz.live import LiveSession
    from autograd_viz.trace import Trace
    from autograd_viz.trace.calls import CallSelection
    from autograd_viz.tui.app import VizApp
    from autograd_viz.tui.driver import Driver, LiveDriver


def has_terminal() -> bool:
    """Whether stdin and stdout are both a terminal, as a full-screen app needs."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def run_demo(args: argparse.Namespace) -> int:
    """``autograd-viz demo``: the TUI live on the built-in example."""
    if args.print or not has_terminal():
        if not args.print:
            note("not a terminal: printing the walk-through (run it in a terminal for the TUI)")
        from autograd_viz.cli.walkthrough import run_demo as walkthrough

        return walkthrough(args)
    from autograd_viz.cli.demo_program import demo_program
    from autograd_viz.live import LiveSession
    from autograd_viz.tui.driver import LiveDriver

    # The process is the demo alone: what it builds is frozen once built (Note [What the app
    # built is frozen] in autograd_viz/tui/frozen.py).
    driver = LiveDriver(LiveSession(demo_program))
    return _open(driver, "demo: RNN cell + MLP on cpu, sim:0, sim:1", freeze=True)


def run_live(args: argparse.Namespace) -> int:
    """``autograd-viz run SCRIPT [ARGS...]``: the TUI live on a script's backward calls.

    The script runs on the main thread, the TUI beside it (Note [The program
    keeps the main thread] in :mod:`autograd_viz.tui.beside`). The exit status
    is the script's, as ``python SCRIPT`` gives it: its ``sys.exit`` code, or 1
    with its traceback when it raises; 130 when quitting interrupted it. With
    ``--last N`` the session keeps only the last N calls it gated (Note [A live
    flight recorder] in :mod:`autograd_viz.live.window`: it stops at the first NaN
    or Inf, as ``record --last`` does); with ``-o`` what it kept is written when the
    session ends, however it ends.
    """
    from autograd_viz.launch.script import ScriptNotFoundError, check_script
    from autograd_viz.live import LiveSession
    from autograd_viz.tui.driver import LiveDriver

    script, script_args = script_and_args(args, "run")
    try:
        check_script(script)
    except ScriptNotFoundError as exc:
        raise CommandError(str(exc)) from None
    if args.print or not has_terminal():
        if not args.print:
            note("not a terminal: printing each backward call (run it in a terminal for the TUI)")
        from autograd_viz.cli.printing import run_print

        return run_print(args, script, script_args)
    output: str | None = args.output
    if output is not None:
        check_output(output)
    calls = call_selection(args)
    if args.observe == "calls":
        raise UsageError(
            "the TUI steps a call node by node as it runs: --observe calls watches no node; "
            "use it with --print, or record with it and open the trace (tui TRACE)"
        )
    children = _Children(output, calls, args.values)
    session: LiveSession | None = None

    def recorder() -> _LiveNotes | None:  # the session's, once the program runs in it
        return _LiveNotes(session) if args.why and session is not None else None

    session = LiveSession(
        functools.partial(_run_checked, script, script_args, children, recorder),
        calls=calls,
        values=args.values,
    )
    children.trace = session.trace
    driver = LiveDriver(session, attached=True)
    driver.breakpoints.non_finite = args.anomaly
    return run_beside(driver, script, output=output, children=children)


def run_beside(
    driver: LiveDriver,
    source: str,
    output: str | None = None,
    children: _Children | None = None,
) -> int:
    """Run the driver's program here, on the main thread, with the TUI on a thread beside it.

    Returns when both have ended: the program's exit status (see :func:`run_live`).
    While the TUI runs, the program's standard streams are its own (Note [The
    program writes to a terminal of its own] in :mod:`autograd_viz.tui.streams`,
    Note [The program reads through the prompt] in :mod:`autograd_viz.tui.program_input`);
    SIGTERM or SIGHUP ends both (Note [A signal ends the TUI first]).

    Args:
        driver: the live driver of an :meth:`~autograd_viz.live.LiveSession.attach`-able
            session.
        source: the script, as the TUI's title names it.
        output: where to write what the session kept once it ends, if anywhere.
        children: the program's child processes, followed as ``record`` follows them
            (Note [The TUI's program starts processes]); said once the session ends.

    Raises:
        CommandError: the TUI failed, or ``output`` could not be written.
    """
    from autograd_viz.cli.record import Signalled
    from autograd_viz.live import SessionCancelled
    from autograd_viz.tui.app import VizApp
    from autograd_viz.tui.beside import BesideDriver, end_program, leave_screen, streams_stay
    from autograd_viz.tui.program_input import ProgramInput, asked_in_tui
    from autograd_viz.tui.streams import ProgramStreams

    session = driver.session
    # The process is the tool and the script it runs, nothing else: what they built is frozen
    # once built (Note [What the app built is frozen] in autograd_viz/tui/frozen.py).
    app = VizApp(driver, source=source, freeze=True)
    app.driver_class = BesideDriver
    streams = app.streams = ProgramStreams(app.program_wrote)
    terminal_stdin = sys.stdin
    program_stdin = ProgramInput(app.program_reads, terminal_stdin)
    failed: list[BaseException] = []
    signals = _SignalsEndTui(app)

    def give_back() -> None:
        """The terminal's streams are the program's again; what it printed is written out."""
        program_stdin.tui_ended()
        if sys.stdin is program_stdin:  # unless the program set its own meanwhile
            sys.stdin = terminal_stdin
        streams.release(functools.partial(_write_output, app, descriptors=True))

    def tui() -> None:
        try:
            with streams_stay():
                app.run()
        except Exception as exc:  # noqa: BLE001 - said in one line once the program ends
            failed.append(exc)
        finally:
            app.stop_driver()  # cancels the session: nothing waits for the TUI any more
            give_back()
            if signals.signum is None:  # a signal's own unwinding is under way
                end_program(lambda: not session.finished)

    session.attach()
    thread = threading.Thread(target=tui, name="autograd-viz-tui", daemon=True)
    unsaved: str | None = None
    try:
        streams.take()
        sys.stdin = program_stdin
        with signals.taken(), asked_in_tui(program_stdin):
            thread.start()
            try:
                with signals.raising():
                    session.run()
            except Signalled:
                pass  # it came as the program ended
            _wait_for(thread, signals)
        if signals.signum is not None and thread.is_alive():
            leave_screen(app)  # the TUI did not end: the terminal is given back anyway
            give_back()
    finally:
        if not thread.is_alive():  # the TUI gave the streams back, or never started
            give_back()
        session.stop()
        # A program whose children made every call (torchrun) leaves no empty file of its own.
        theirs = children is not None and children.recorded and not session.trace.graph_tasks
        if output is not None and not theirs:
            unsaved = _save_session(session, output)
        if children is not None:
            children.say()
    if signals.signum is not None:
        if unsaved is not None:
            note(unsaved)
        _end_by_signal(signals.signum)
    if failed:
        raise CommandError(f"the TUI failed: {failed[0]!r}")
    if unsaved is not None:
        raise CommandError(unsaved)
    error = session.error
    if driver.interrupted:  # whatever the script did once cancelled is no failure of its own
        note(f"quit while {source} was running: it was interrupted")
        _exit_now(INTERRUPTED)
    if isinstance(error, KeyboardInterrupt | SessionCancelled):
        return INTERRUPTED
    if error is not None:
        sys.stdout.flush()
        sys.stderr.write(printable(script_traceback(error), newlines=True))
        return 1  # as python SCRIPT exits when it raises
    result = session.result
    return result if isinstance(result, int) else 0


def _wait_for(thread: threading.Thread, signals: _SignalsEndTui) -> None:
    """Wait for the TUI: until ``q`` once the program has ended, a while once a signal came.

    Nothing raises in here: a ``join`` that an exception interrupts marks a thread
    that still runs as ended (CPython 3.11).
    """
    deadline: float | None = None
    while thread.is_alive():
        if signals.signum is not None:
            deadline = deadline or time.monotonic() + SIGNAL_WAIT_S
            if time.monotonic() > deadline:
                return
        thread.join(0.1)


SIGNAL_WAIT_S = 5.0
"""How long a TUI ended by a signal may take to give the terminal back before it is taken."""


class _SignalsEndTui:
    """SIGTERM and SIGHUP end the TUI, then the program, then the tool by the same signal.

    Note [A signal ends the TUI first]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    Killed by SIGTERM while the TUI was up, the tool left the terminal in the
    alternate screen, the cursor hidden and the keyboard raw. A signal whose
    handler is the default one (death) is taken while the TUI runs: it asks the
    app to exit (the terminal is the user's again, what the program printed is
    written out), stops the program as an exception (``Signalled``, which its
    ``finally`` blocks see, as ``record`` does), writes ``-o``, and ends the tool
    by that same signal, so whoever sent it sees the status it expects. A handler
    the program installs replaces ours, as it would without us, and a signal
    ignored by whoever started us stays ignored.
    """

    def __init__(self, app: VizApp) -> None:
        self._app = app
        self._raising = False
        self.signum: int | None = None
        """The signal that ended the TUI, if one did."""

    @contextlib.contextmanager
    def taken(self) -> Iterator[None]:
        """While the block runs, the signals are ours."""
        taken: dict[int, Any] = {}
        for name in ("SIGTERM", "SIGHUP"):
            signum = getattr(signal, name, None)
            if signum is not None and signal.getsignal(signum) == signal.SIG_DFL:
                taken[signum] = signal.signal(signum, self._handle)
        try:
            yield
        finally:
            for signum, handler in taken.items():
                if signal.getsignal(signum) == self._handle:
                    signal.signal(signum, handler)

    @contextlib.contextmanager
    def raising(self) -> Iterator[None]:
        """While the block runs (the program), a signal raises ``Signalled`` in it."""
        self._raising = True
        try:
            yield
        finally:
            self._raising = False

    def _handle(self, signum: int, _frame: object) -> None:
        from autograd_viz.cli.record import Signalled

        if self.signum is None:
            self.signum = signum
            # The app's own thread stops the session, which opens the gates and answers the
            # reads: this thread may hold their locks, interrupted where it stood.
            self._app.exit_from_thread()
        if self._raising:
            raise Signalled(signum)


def _end_by_signal(signum: int) -> NoReturn:
    """End this process by ``signum``, as the script would have ended without us."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # the signal is blocked: end as a shell would say it ended


def _save_session(session: LiveSession, output: str) -> str | None:
    """Write what ``session`` kept to ``output`` and say so; the error line if it failed."""
    trace = session.trace
    try:
        trace.save(output)
    except OSError as exc:
        return f"cannot write trace {output}: {exc.strerror or exc}"
    calls = sum(1 for info in trace.graph_tasks.values() if info.parent is None)
    kept = f"the last {calls:,}" if session.dropped else f"{calls:,}"
    found = ", up to the first NaN or Inf," if session.finding is not None else ""
    note(
        f"{kept} backward call{'' if calls == 1 else 's'}{found} saved to {output}; "
        f"step {'it' if calls == 1 else 'them'} with '{PROG} replay {output}'"
    )
    return None


def _exit_now(status: int) -> NoReturn:
    """End the process as the user asked, without Python's slow teardown of every module.

    The script has unwound (its ``finally`` blocks ran); its ``atexit`` handlers
    run and what it printed is flushed, as at a normal exit. The teardown left out
    takes half a second with NumPy, Rich and Textual loaded, and ``q`` ends the
    tool at once (Note [The program keeps the main thread]).
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


def script_traceback(error: BaseException) -> str:
    """``error`` with its traceback as Python prints it, from the script's first frame."""
    tb = error.__traceback__
    while tb is not None and _ours(tb.tb_frame.f_globals.get("__name__")):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))


def _ours(module: object) -> bool:
    return isinstance(module, str) and (
        module in ("runpy", "functools") or module.split(".")[0] == "autograd_viz"
    )


def _write_output(app: VizApp, *, descriptors: bool = False) -> None:
    """What the program printed while the TUI was up, now that the screen is back.

    With ``descriptors``, it goes back where it was taken from, descriptor 1 or 2
    (Note [The program writes to a terminal of its own]), whatever ``sys.stdout``
    the program has set meanwhile.
    """
    while app.output:
        to_stderr, text = app.output.pop(0)
        if descriptors:
            encoding = getattr(sys.__stdout__, "encoding", None) or "utf-8"
            _write_all(2 if to_stderr else 1, text.encode(encoding, "replace"))
        else:
            (sys.stderr if to_stderr else sys.stdout).write(text)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(fd, data) :]


def _run_checked(
    script: str,
    args: list[str],
    children: _Children | None = None,
    recorder: Callable[[], _LiveNotes | None] = lambda: None,
) -> int:
    """Run the script with the NaN checks on, so that ``f`` stops at a forward finding too,
    its child processes followed (Note [The TUI's program starts processes]) and, with a
    ``recorder`` (``run --why``), each call's gradient findings noted into it."""
    from autograd_viz.grads.recorded import explaining
    from autograd_viz.launch.script import ScriptFailedError, run_script
    from autograd_viz.nan.watch import nan_checks

    noter = recorder()
    with (
        nan_checks(),
        children.followed() if children else contextlib.nullcontext(),
        explaining(noter) if noter is not None else contextlib.nullcontext(),
    ):
        try:
            return run_script(script, args)
        except ScriptFailedError as exc:
            raise exc.exception from None


class _LiveNotes:
    """Notes what a watch finds after a call (``run --why``) into the live session's trace.

    A live session records each event on the thread that lets it through, not on the
    program's, so the call a note is about is named: the last call of the program the
    session recorded, which is the one that just returned (the program's calls are gated
    one at a time).
    """

    def __init__(self, session: LiveSession) -> None:
        self._session = session

    def note_call(self, kind: str, data: dict[str, Any], graph_task: int | None = None) -> bool:
        trace = self._session.trace
        with trace.lock:
            calls = [info.id for info in trace.graph_tasks.values() if info.parent is None]
        if not calls:
            return False
        return self._session.recorder.note_call(kind, data, graph_task or calls[-1])


class _Children:
    """The processes the TUI's program starts, recorded as ``record`` records them.

    Note [The TUI's program starts processes]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    The TUI steps one process: the program's own. Its children (torchrun's
    workers, ``torch.multiprocessing.spawn``'s ranks, ``multiprocessing``'s
    spawned processes) are armed through the environment as ``record`` arms
    them (Note [Children armed by the environment] in
    :mod:`autograd_viz.launch.processes`): each records its own calls, with
    the session's ``--steps``, ``--every``, ``--last`` and ``--values``, and
    with ``-o T.jsonl`` writes them to its own file (``T.rank1.jsonl``), which
    ``replay`` opens beside the others. Without ``-o`` nothing of theirs is
    kept, and one line says how many calls they made and how to keep them. A
    forked child is the program's copy, without a TUI: it runs unwatched and
    says so (Note [Whose work a session gates] in :mod:`autograd_viz.live.gate`).
    """

    def __init__(self, output: str | None, calls: CallSelection, values: str | None) -> None:
        self.output = output
        self.calls = calls
        self.values = values or "all"
        self.trace: Trace | None = None
        """The session's trace, which a forked child empties (it records nothing there)."""
        self.reports: list[ChildReport] = []
        self.unfinished: list[tuple[int, str]] = []
        self.running: list[tuple[int, str]] = []

    @contextlib.contextmanager
    def followed(self) -> Iterator[None]:
        """Follow the children started inside the block; read what they left as it ends."""
        from autograd_viz.cli.record import Signalled
        from autograd_viz.launch.processes import follow_children
        from autograd_viz.trace import DEFAULT_MAX_VALUES, Trace

        calls = self.calls
        with follow_children(
            "record",
            self.trace if self.trace is not None else Trace(),
            self.output,
            DEFAULT_MAX_VALUES,
            calls={"steps": calls.steps, "every": calls.every, "last": calls.last},
            values=self.values,
        ) as job:
            try:
                yield
            except (KeyboardInterrupt, Signalled):
                job.settle()  # Ctrl-C or a signal: it reached the children, which are saving
                raise
            finally:
                self.reports = job.reports()
                self.unfinished = job.unfinished()
                self.running = job.running()

    @property
    def recorded(self) -> bool:
        """Whether a child recorded, or still records (Note [Children that outlive the script]
        in :mod:`autograd_viz.launch.processes`)."""
        return bool(self.reports or self.unfinished or self.running)

    def say(self) -> None:
        """One line per child's trace, or one line for them all without ``-o``."""
        from autograd_viz.cli.record import say_running
        from autograd_viz.trace.text import count_words, shown

        reports = self.reports
        if reports and self.output is None:
            calls = sum(child.graph_tasks for child in reports)
            note(
                f"{count_words(len(reports), 'child process', 'child processes')} made "
                f"{count_words(calls, 'graph task')} of backward work, not shown (the TUI "
                "steps this process): add -o TRACE to keep each one's trace"
            )
            return
        for child in reports:
            note(
                f"{_who(child)} recorded {count_words(child.graph_tasks, 'graph task')} to "
                f"{shown(child.path)}"
            )
        for pid, path in self.unfinished:
            note(
                f"process {pid} ended before finishing its trace; the calls it wrote are in "
                f"{shown(path)}"
            )
        say_running(self.running)
        if len(reports) > 1:
            paths = " ".join(shown(child.path) for child in reports)
            note(f"step them side by side with '{PROG} replay {paths}'")


def _who(child: ChildReport) -> str:
    """``rank 1 of 2``, or ``process 4242`` without a rank."""
    if child.rank is None:
        return f"process {child.pid}"
    size = f" of {child.world_size}" if child.world_size is not None else ""
    return f"rank {child.rank}{size}"


def run_replay(args: argparse.Namespace) -> int:
    """``autograd-viz replay TRACE [TRACE ...]``: the TUI on recorded traces, ``R`` switching."""
    from autograd_viz.tui.driver import ReplayDriver

    paths: list[str] = args.trace
    if not has_terminal():
        for path in paths:
            load_trace(path, args.call)  # what is wrong with a file comes first, terminal or not
        _need_terminal(f"'{PROG} dot {paths[0]} -o graph.svg --step K' draws one step")
    processes = []
    for path in paths:
        trace = load_for_replay(path, args.call)
        processes.append((_process_title(path, trace), ReplayDriver(trace)))
    # The process is the app alone: what it builds is frozen once built (Note [What the app
    # built is frozen] in autograd_viz/tui/frozen.py).
    if len(processes) == 1:
        return _open(processes[0][1], paths[0], freeze=True)
    return _open(processes[0][1], processes[0][0], processes, freeze=True)


def _process_title(path: str, trace: Trace) -> str:
    """``t.rank1.jsonl · rank 1 of 2``: a trace file and the process it says it is."""
    process = trace.header.get("process")
    if not isinstance(process, dict) or process.get("rank") is None:
        return path
    size = process.get("world_size")
    return f"{path} · rank {process['rank']}" + (f" of {size}" if size is not None else "")


def load_for_replay(path: str, call: int | None = None) -> Trace:
    """Load the trace ``replay`` shows, to keep for the rest of the process.

    Note [A replayed trace skips the collector]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    A big trace is millions of objects (events, summaries, their tuples) that
    live as long as the app and are never in a reference cycle. Python's
    cyclic collector would still scan them all: once when the load ends (all
    of them are new), and again as they age into older generations while the
    app starts: half a second before a 100,000-event trace's first screen.
    They are loaded with the collector off and then frozen (``gc.freeze``)
    before it can run: it never looks at them again, and collects whatever the
    app makes after as usual. Freezing is for a process that keeps what it
    froze, as ``replay`` does; a library call (``Trace.load``) only pauses the
    collector while it reads.

    Raises:
        CommandError: the file cannot be read or is not a valid trace.
    """
    from autograd_viz.trace.records import paused_gc

    with paused_gc():  # counted with every other pause, so none switches it back on early
        trace = load_trace(path, call)
        gc.freeze()
    return trace


def _need_terminal(hint: str) -> None:
    if not has_terminal():
        raise CommandError(f"the TUI needs a terminal (stdin and stdout); {hint}")


def _open(
    driver: Driver,
    source: str,
    processes: Sequence[tuple[str, Driver]] = (),
    *,
    freeze: bool = False,
) -> int:
    from autograd_viz.tui.app import VizApp

    app = VizApp(driver, source=source, processes=processes, freeze=freeze)
    try:
        result = app.run()
    finally:
        app.stop_driver()
        _write_output(app)
    return result or 0


def add_run_options(run: argparse.ArgumentParser) -> None:
    """``run``'s options (before or after SCRIPT, Note [Options and the script's arguments])."""
    run.add_argument(
        "--anomaly",
        action="store_true",
        help="stop at the first NaN or Inf: 'c' pauses where it is born, forward or backward "
        "(as pressing f does; the checks are those of 'autograd-viz nan')",
    )
    run.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="TRACE",
        help="when the session ends, write the calls it kept to TRACE (to replay later)",
    )
    run.add_argument(
        "--why",
        action="store_true",
        help="after each backward call, find which parameters got no gradient and why, and "
        "each module's gradient norm (as autograd-viz grads does), for the inspector and the "
        "call picker to show",
    )
    run.add_argument(
        "--print",
        action="store_true",
        help="no TUI: print each backward call as it ends, a line per node (topological "
        "number, gradients waited for, thread) and per NaN or Inf; child processes print "
        "too, each line headed by its rank ([rank1]); the default without a terminal",
    )
    add_call_options(
        run,
        last="a flight recorder: keep only the last N calls, so the TUI follows a long run in "
        "bounded memory and steps back over those N; as record --last, it stops at the first "
        "NaN or Inf (c and e stop there) and keeps its call and the N-1 before it, then records "
        "no more (with -o, the calls kept are what is written)",
    )


def add_tui_commands(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    """Add ``demo``, ``run`` and ``replay`` to the command line."""
    demo = commands.add_parser(
        "demo",
        help="open the TUI live on a built-in example (an RNN cell and a two-device MLP)",
        description=(
            "Run a built-in example live in the TUI: the RNN cell of PyTorch's dynamic-graph "
            "example on the CPU, and an MLP split over two simulated devices whose "
            "checkpointed layer calls backward reentrantly. Step through every engine event."
        ),
    )
    demo.add_argument(
        "--print",
        action="store_true",
        help="print a walk-through of an RNN cell's backward pass instead of opening the TUI",
    )
    demo.set_defaults(run=run_demo)

    run = commands.add_parser(
        "run",
        usage=(
            f"{PROG} run [-h] [--anomaly] [-o TRACE] [--steps LIST] [--every N] [--last N] "
            "[--values {none,leaves,all}] [--observe {nodes,calls}] SCRIPT [ARGS ...]"
        ),
        help="open the TUI live on every backward call a Python script makes",
        description=(
            "Run SCRIPT as __main__ with ARGS, on the main thread as python would, with the "
            "TUI beside it; each engine event waits in the TUI until you step. Quitting "
            "cancels a backward pass in progress and interrupts the script. Options may come "
            "before or after SCRIPT; every other word after SCRIPT is the script's (after a "
            "'--', every word is). The exit status is the script's, as python gives it."
        ),
    )
    takes_a_script(run, add_run_options, run_live)

    replay = commands.add_parser(
        "replay",
        help="open the TUI on a trace recorded with 'autograd-viz record'",
        description="Step forward and back through a recorded trace in the TUI.",
    )
    replay.add_argument(
        "trace",
        nargs="+",
        metavar="TRACE",
        help="a trace file from 'autograd-viz record'; several (one per rank: t.rank0.jsonl "
        "t.rank1.jsonl) open together, and R switches between them",
    )
    add_call_option(replay)
    replay.set_defaults(run=run_replay)
