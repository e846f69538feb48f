"""The ``autograd-viz`` command line.

``autograd-viz demo`` walks through one backward pass of a small recurrent
cell (see ``autograd_viz.walkthrough``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

PROG = "autograd-viz"


class UsageError(Exception):
    """The command line was wrong: an unknown command, a missing or bad argument."""


class _Parser(argparse.ArgumentParser):
    """An argument parser that raises instead of printing usage and exiting.

    ``main`` turns the error into one line on stderr, so a typo gives one line
    to read instead of a usage block.
    """

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def run_demo(args: argparse.Namespace) -> int:
    """``autograd-viz demo``."""
    from autograd_viz.walkthrough import run_demo as walkthrough

    return walkthrough(args)


def build_parser() -> argparse.ArgumentParser:
    """The parser for every ``autograd-viz`` subcommand."""
    from autograd_viz import __version__

    parser = _Parser(
        prog=PROG,
        description="See, step through and debug a backward pass.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="walk through the backward pass of a small RNN cell, event by event",
        description="Build a small RNN cell, run its backward pass and show every engine step.",
    )
    demo.set_defaults(run=run_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``autograd-viz`` with ``argv`` (default: the process arguments).

    Returns:
        The exit status: 0 on success, 2 for a usage error, 130 when interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(f"{PROG}: error: {exc} (see '{PROG} --help')", file=sys.stderr)
        return 2
    run: Callable[[argparse.Namespace], int] | None = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 0
    try:
        return run(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`autograd-viz demo | head`); Python would
        # otherwise complain again while flushing stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
