"""What every ``autograd-viz`` command shares: its errors, its parser, its helpers.

A user mistake (a missing file, a bad trace, a script that raises) ends in one
line on stderr, ``autograd-viz: error: ...``, and a non-zero exit status:
commands raise :class:`UsageError` or :class:`CommandError` and
:func:`autograd_viz.cli.main.main` prints it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from autograd_viz.trace.text import one_line

if TYPE_CHECKING:
    from rich.console import Console

    from autograd_viz.trace import Trace

PROG = "autograd-viz"

ERROR_LIMIT = 2000
"""The longest error line printed, in characters (a name may be 100,000 long)."""


# Note [Exit statuses]
# ~~~~~~~~~~~~~~~~~~~~
# One table for every command (README.md, "Exit statuses"):
#
#   0    done: the script ended with status 0; `nan` found no NaN or Inf
#   1    `nan`: a NaN or Inf was found
#   2    the command line was wrong (USAGE)
#   3    autograd-viz failed: a trace it cannot read, a file it cannot write (TOOL_FAILED)
#   4    `nan`, `dot`, `animate`: the script failed before there was anything to show
#   130  interrupted (Ctrl+C, or `q` in `run` while the script ran)
#
# `run` and `record` are `python SCRIPT` with autograd-viz watching: they exit
# with the script's own status, as python would (its `sys.exit` code, 1 with
# its traceback when it raises); a status of theirs is then only 2, 3 or 130
# when the script itself did not fail.

OK = 0
FOUND = 1
USAGE = 2
TOOL_FAILED = 3
SCRIPT_FAILED = 4
INTERRUPTED = 130


class UsageError(Exception):
    """The command line was wrong: an unknown command, a missing or bad argument."""


class CommandError(Exception):
    """A command could not do its job; the message is the one line ``main`` prints."""

    status = TOOL_FAILED
    """The exit status ``main`` returns (Note [Exit statuses])."""


class ScriptError(CommandError):
    """The script failed (raised, or exited with a non-zero status) where that ends the command.

    Args:
        message: the one line ``main`` prints.
        status: the exit status, :data:`SCRIPT_FAILED` unless the command passes the
            script's own status on (``record`` exits 1, as ``python`` does).
    """

    def __init__(self, message: str, status: int = SCRIPT_FAILED) -> None:
        super().__init__(message)
        self.status = status


class ArgumentParser(argparse.ArgumentParser):
    """An argument parser that raises instead of printing usage and exiting.

    ``main`` turns the error into one line on stderr, so a typo gives one line
    to read instead of a usage block.
    """

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


# Note [Options and the script's arguments]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# One rule in every command that runs a script (`run`, `record`, `nan`, `dot`,
# `animate`): autograd-viz's options may come before or after SCRIPT, and
# every other word after SCRIPT is the script's; after a `--`, every word is
# the script's. So `nan SCRIPT -o t.jsonl` saves the trace, and
# `record SCRIPT -- -o out.pt` hands `-o out.pt` to the script. A word is
# never silently taken by one side in one command and by the other in
# another.


def options_only(add: Callable[[argparse.ArgumentParser], None]) -> argparse.ArgumentParser:
    """A parser of a command's options alone (``add`` adds them), for those after SCRIPT."""
    parser = ArgumentParser(prog=PROG, add_help=False)
    add(parser)
    return parser


def takes_a_script(
    parser: argparse.ArgumentParser,
    add_options: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
) -> None:
    """Make ``parser`` a command that runs ``SCRIPT [ARGS ...]``: its options (before or
    after SCRIPT, Note [Options and the script's arguments]), the script's own words, and
    ``run``, which does the command."""
    add_options(parser)
    parser.add_argument("script_and_args", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS ...]")
    parser.set_defaults(run=run, option_parser=options_only(add_options))


def split_options(
    words: Sequence[str], parser: argparse.ArgumentParser
) -> tuple[list[str], list[str]]:
    """``parser``'s options anywhere up to a ``--``, apart from the other words.

    Returns:
        The options with their values, and the rest (SCRIPT and its arguments), in order.
    """
    arity = {
        option: 0 if action.nargs == 0 else 1
        for action in parser._actions
        for option in action.option_strings
        if action.dest != "help"
    }
    ours: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            rest.extend(words[i + 1 :])
            break
        name = word.split("=", 1)[0]
        if name in arity and (name == word or arity[name]):
            take = 1 if "=" in word else 1 + arity[name]
            ours.extend(words[i : i + take])
            i += take
            continue
        rest.append(word)
        i += 1
    return ours, rest


def script_and_args(args: argparse.Namespace, command: str) -> tuple[str, list[str]]:
    """SCRIPT and its ARGS from ``args.script_and_args``, the command's options taken out.

    The command's options after SCRIPT are parsed into ``args`` with
    ``args.option_parser`` (Note [Options and the script's arguments]); a
    leading ``--`` (``record -o t.jsonl -- SCRIPT``), which argparse keeps, is dropped.

    Raises:
        UsageError: SCRIPT is missing, or an option after it is wrong.
    """
    words = list(args.script_and_args)
    if words[:1] == ["--"]:
        del words[0]
    parser: argparse.ArgumentParser | None = getattr(args, "option_parser", None)
    if parser is not None:
        ours, words = split_options(words, parser)
        refuse_twice(ours, parser, args)
        parser.parse_args(ours, namespace=args)
    if not words:
        raise UsageError(f"{command}: missing SCRIPT, the Python script to run")
    return words[0], words[1:]


def refuse_twice(
    after: Sequence[str], parser: argparse.ArgumentParser, args: argparse.Namespace
) -> None:
    """An option that takes one value, given before SCRIPT and again after it, is an error."""
    for action in parser._actions:
        if action.nargs == 0 or isinstance(action, argparse._AppendAction):
            continue  # a flag twice says it twice; a repeatable option adds
        given = [w for w in after if w.split("=", 1)[0] in action.option_strings]
        if given and getattr(args, action.dest, action.default) != action.default:
            option = given[0].split("=", 1)[0]
            raise UsageError(
                f"{option} is given before SCRIPT and again after it; give it once "
                "(after a '--', it is the script's)"
            )


def load_trace(path: str, call: int | None = None) -> Trace:
    """Load a trace file; what is wrong with it becomes the one line ``main`` prints.

    Args:
        path: the trace file.
        call: load only this backward call (``--call K``), reading only its
            part of the file (Note [Seeking a call] in ``trace/index.py``).

    Raises:
        CommandError: the file cannot be read, is not a valid trace, or has no such call.
    """
    from autograd_viz.trace import Trace, TraceFormatError
    from autograd_viz.trace.index import CallNotFoundError, load_call

    try:
        if call is not None:
            trace = load_call(path, call)
        else:
            progress = _LoadProgress(path) if sys.stderr.isatty() else None
            trace = Trace.load(path, progress=progress)
    except CallNotFoundError as exc:
        raise CommandError(f"{path}: {exc.args[0]}") from None
    except TraceFormatError as exc:
        raise CommandError(f"invalid trace file {exc}") from None
    except OSError as exc:
        raise CommandError(f"cannot read trace {path}: {exc.strerror or exc}") from None
    if trace.tail_cut:
        note(
            f"{path} ends in the middle of a line (its recording was stopped while writing): "
            f"the last {trace.tail_cut:,} bytes, a backward call that had not finished, are "
            "left out; every finished call is loaded"
        )
    return trace


class _LoadProgress:
    """``reading TRACE: 42% of 169 MB`` on stderr, on one line, for a file that takes a while."""

    SHOWN_FROM = 16 << 20
    """Smaller files load in well under a second: nothing is shown."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.shown = False

    def __call__(self, done: int, size: int) -> None:
        if size < self.SHOWN_FROM:
            return
        if done >= size:
            if self.shown:
                sys.stderr.write("\r\033[K")  # the line goes; the TUI comes
                sys.stderr.flush()
            return
        self.shown = True
        sys.stderr.write(
            f"\r{PROG}: reading {one_line(self.path)}: {100 * done // size}% of {size >> 20} MB"
        )
        sys.stderr.flush()


def check_output(path: str) -> None:
    """Fail before doing any work when ``path`` cannot be an output file."""
    if os.path.isdir(path):
        raise CommandError(f"cannot write {path}: it is a directory")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CommandError(f"cannot write {path}: directory {directory} does not exist")


def error_line(message: object) -> str:
    """One line of a message for stderr: control characters escaped, cut to a readable length."""
    return one_line(message, ERROR_LIMIT)


def rich_console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def note(message: str) -> None:
    """A line on stderr about what happened (names in it are shown escaped)."""
    print(f"{PROG}: {error_line(message)}", file=sys.stderr)


def add_call_option(parser: argparse.ArgumentParser) -> None:
    """``--call K``: open one backward call of a long trace, reading only its part."""
    parser.add_argument(
        "--call",
        type=_call_number,
        default=None,
        metavar="K",
        help="only backward call K of the run (as record numbered it: --every 100 keeps "
        "0, 100, ...), read without the rest of the file",
    )


def integer_at_least(least: int, what: str) -> Callable[[str], int]:
    """An argparse ``type``: an integer of at least ``least``, else an error that says it
    expected ``what``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


_call_number = integer_at_least(0, "a call number (0 or more)")
positive = integer_at_least(1, "a positive integer")
