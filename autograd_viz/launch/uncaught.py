"""A watched child's uncaught error printed as plain Python prints it, without our frames.

See Note [A child's uncaught error]; the trimming itself is
:func:`~autograd_viz.sources.tracebacks.trim_traceback`'s.
"""

from __future__ import annotations

import contextlib
import sys
from types import TracebackType
from typing import Any

from autograd_viz.sources.tracebacks import trim_traceback

# Note [A child's uncaught error]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A watched child process (Note [Children armed by the environment] in
# ``launch/processes.py``) holds its watching until it exits, which is after
# Python has printed an error that nobody caught: no block of ours is left for
# the error to pass through on its way out. So the child trims it where it is
# printed. On the main thread Python hands it to ``sys.excepthook``, on another
# thread to ``threading.excepthook``: each is wrapped once, at the child's
# start-up, by a hook that trims the error's traceback and hands it to the hook
# that was there before (the program's, or Python's), which prints it as it
# would unwatched. A hook the program sets later replaces ours, as it would
# replace Python's. A ``multiprocessing`` child's target never reaches
# ``sys.excepthook``: ``Process._bootstrap`` catches the error and prints it
# with ``traceback.print_exc()``. So the child's process object gets a ``run``
# of its own (:func:`trim_process_run`) that trims what leaves the real
# ``run`` and raises it on: the wrapper's own frame goes with the trim and a
# bare ``raise`` adds none, so ``_bootstrap`` prints plain Python's frames.
# It is set as the process object starts: by a wrapper of
# ``BaseProcess._bootstrap`` in a child watched from its start-up (a spawned
# child runs no after-fork hooks), whose frame is above the one that prints,
# so never printed; or by the after-fork hook of a child forked from a
# watching process, which runs right before ``run``.
# ``torch.multiprocessing.spawn``'s ``_wrap`` catches its function's error
# inside ``run`` and formats it for the parent, which raises it: that
# function gets the same wrapper.

_trims_uncaught = False
"""Whether this process's ``sys.excepthook`` and ``threading.excepthook`` trim (once set, a
fork inherits them)."""


def trim_uncaught() -> None:
    """Trim the traceback of an error nobody catches before Python prints it, in this process.

    See Note [A child's uncaught error]. Safe to call more than once.
    """
    global _trims_uncaught
    if _trims_uncaught:
        return
    _trims_uncaught = True
    import threading
    from multiprocessing import process

    sys.excepthook = _trimming_excepthook(sys.excepthook)
    threading.excepthook = _trimming_thread_excepthook(threading.excepthook)
    bootstrap = process.BaseProcess._bootstrap  # type: ignore[attr-defined]

    def _bootstrap(self: Any, *args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):  # nothing of ours may stop the child's start
            trim_process_run(self)
        return bootstrap(self, *args, **kwargs)

    process.BaseProcess._bootstrap = _bootstrap  # type: ignore[attr-defined]


def _trimmed(exc: BaseException | None, tb: TracebackType | None) -> TracebackType | None:
    """``tb`` trimmed, when it is the traceback of ``exc`` (then ``exc``'s chain is too)."""
    if exc is None or tb is None or tb is not exc.__traceback__:
        return tb  # a hook called by hand with another traceback: passed on as it came
    try:
        trim_traceback(exc)
    except Exception:  # noqa: BLE001 - the error is printed whatever happens here
        return tb
    return exc.__traceback__


def _trimming_excepthook(previous: Any) -> Any:
    def excepthook(
        exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        previous(exc_type, exc, _trimmed(exc, tb))

    return excepthook


def _trimming_thread_excepthook(previous: Any) -> Any:
    import threading

    def excepthook(args: Any) -> None:
        tb = _trimmed(args.exc_value, args.exc_traceback)
        if tb is not args.exc_traceback:
            args = threading.ExceptHookArgs([args.exc_type, args.exc_value, tb, args.thread])
        previous(args)

    return excepthook


def trim_process_run(process: Any) -> None:
    """Make ``process`` (a ``multiprocessing`` process object, in its own child) trim what
    leaves its ``run`` (Note [A child's uncaught error]). Safe to call more than once."""
    run = process.run
    if getattr(run, "_trims", False):
        return
    process.run = _trimming(run)
    target = getattr(process, "_target", None)
    args = getattr(process, "_args", None)
    spawned = getattr(target, "__module__", None) == "torch.multiprocessing.spawn"
    if spawned and getattr(target, "__name__", None) == "_wrap" and args and callable(args[0]):
        process._args = (_trimming(args[0]), *args[1:])


def _trimming(function: Any) -> Any:
    def trims(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except BaseException as exc:
            with contextlib.suppress(Exception):  # the error goes on whatever happens here
                trim_traceback(exc)
            raise

    trims._trims = True  # type: ignore[attr-defined]
    return trims


__all__ = ["trim_process_run", "trim_uncaught"]
