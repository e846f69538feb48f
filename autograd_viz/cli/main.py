"""The ``autograd-viz`` command line: one parser, one module per command family.

* ``demo``, ``run SCRIPT`` and ``replay TRACE`` open the TUI
  (:mod:`autograd_viz.cli.tui`); ``demo --print`` walks through one backward
  pass of a small recurrent cell in plain text (:mod:`autograd_viz.cli.walkthrough`).
* ``record`` and ``timeline`` (:mod:`autograd_viz.cli.record`).
* ``dot`` and ``animate`` (:mod:`autograd_viz.cli.graph`).
* ``nan`` (:mod:`autograd_viz.cli.nan`).
* ``grads`` (:mod:`autograd_viz.cli.grads`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from autograd_viz.cli.base import (
    INTERRUPTED,
    PROG,
    TOOL_FAILED,
    USAGE,
    ArgumentParser,
    CommandError,
    UsageError,
    error_line,
)


def build_parser() -> argparse.ArgumentParser:
    """The parser for every ``autograd-viz`` subcommand."""
    from autograd_viz.cli.grads import add_grads_command
    from autograd_viz.cli.graph import add_graph_commands
    from autograd_viz.cli.nan import add_nan_command
    from autograd_viz.cli.record import add_record_commands
    from autograd_viz.cli.tui import add_tui_commands
    from autograd_viz.version import __version__

    parser = ArgumentParser(
        prog=PROG,
        description="See, step through and debug a backward pass.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_tui_commands(commands)

    add_record_commands(commands)
    add_graph_commands(commands)
    add_nan_command(commands)
    add_grads_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``autograd-viz`` with ``argv`` (default: the process arguments).

    Returns:
        The exit status (Note [Exit statuses] in :mod:`autograd_viz.cli.base`): 0
        done, 1 ``nan`` found one, 2 a usage error, 3 the tool failed, 4 the
        script failed, 130 interrupted; ``run`` and ``record`` return the
        script's own status, as ``python`` would.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(f"{PROG}: error: {error_line(exc)} (see '{PROG} --help')", file=sys.stderr)
        return USAGE
    run: Callable[[argparse.Namespace], int] | None = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 0
    try:
        return run(args)
    except UsageError as exc:
        print(f"{PROG}: error: {error_line(exc)} (see '{PROG} --help')", file=sys.stderr)
        return USAGE
    except CommandError as exc:
        print(f"{PROG}: error: {error_line(exc)}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`autograd-viz demo | head`); Python would
        # otherwise complain again while flushing stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return TOOL_FAILED
