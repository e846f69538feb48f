"""Running a user's Python script as ``__main__``, the way ``python SCRIPT ARGS`` would.

The commands that watch a script (``autograd-viz record``, and later ``run``,
``dot`` and ``nan``) share :func:`run_script`: it sets ``sys.argv``, puts
the script's directory first on ``sys.path``, runs the script and restores
both. What the script does wrong comes back as one of two exceptions, so each
command can report it in its own words:

* :class:`ScriptNotFoundError`: there is no script to run at that path;
* :class:`ScriptFailedError`: the script ran and raised; it carries the
  script's exception and its traceback without our own frames.

``SystemExit`` from the script is not an error: its code is the return value.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import os
import sys
import traceback
import types
from collections.abc import Sequence

from autograd_viz.sources.tracebacks import trim_traceback


class ScriptNotFoundError(Exception):
    """The script path does not exist, or is not a regular file."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"cannot run {path}: {problem}")
        self.path = path
        """The path as the user gave it."""
        self.problem = problem
        """What is wrong with it, such as ``"no such file"``."""


class ScriptFailedError(Exception):
    """The script raised an exception (other than ``SystemExit``)."""

    def __init__(self, path: str, exception: BaseException) -> None:
        super().__init__(f"{path} raised {describe(exception)}")
        self.path = path
        """The script, as the user named it."""
        self.exception = exception
        """The script's own exception, with its traceback trimmed to the script's frames."""

    def script_traceback(self) -> str:
        """The script's traceback as Python would print it, starting at the script."""
        exc = self.exception
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def describe(exception: BaseException) -> str:
    """``ExcType: first line of the message`` (just the type when there is no message)."""
    lines = str(exception).strip().splitlines()
    name = type(exception).__name__
    return f"{name}: {lines[0]}" if lines else name


def check_script(path: str) -> None:
    """Make sure ``path`` is a script that can be run.

    Raises:
        ScriptNotFoundError: ``path`` does not exist, is a directory, or is not
            a regular file.
    """
    if os.path.isdir(path):
        raise ScriptNotFoundError(path, "it is a directory; expected a Python script")
    if not os.path.exists(path):
        raise ScriptNotFoundError(path, "no such file")
    if not os.path.isfile(path):
        raise ScriptNotFoundError(path, "not a regular file")


def run_script(path: str, args: Sequence[str] = ()) -> int:
    """Run the script at ``path`` as ``__main__`` with ``sys.argv = [path, *args]``.

    The script's directory is first on ``sys.path`` while it runs, as with
    ``python SCRIPT``; ``sys.argv`` and ``sys.path`` are restored afterwards.
    ``KeyboardInterrupt`` passes through.

    Args:
        path: the script file.
        args: the script's command-line arguments.

    Returns:
        The exit status: 0 when the script ends normally, else its
        ``SystemExit`` code. A non-integer code is printed to stderr and gives
        1, as Python does.

    Raises:
        ScriptNotFoundError: there is no script file at ``path``.
        ScriptFailedError: the script raised; the original exception is its
            ``exception`` attribute and its ``__cause__``.
    """
    check_script(path)
    saved_argv = sys.argv
    saved_path = list(sys.path)
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        _run_main(path)
    except SystemExit as exc:
        return _exit_status(exc.code)
    except Exception as exc:
        _trim(exc)
        raise ScriptFailedError(path, exc) from exc
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return 0


def _run_main(path: str) -> None:
    """Run the file at ``path`` as ``python PATH`` does: compiled under its absolute path
    (so ``__file__``, its frames and its warnings name it whatever the working directory;
    ``sys.argv[0]`` stays as given), in a fresh module that is ``__main__`` while it runs."""
    filename = os.path.abspath(path)
    with open(filename, "rb") as file:
        source = file.read()
    code = compile(source, filename, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=filename,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", filename),
        __package__=None,
        __spec__=None,
        __builtins__=builtins,
    )
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _trim(exc: BaseException) -> None:
    """Drop the leading frames of this module and our tools' frames from ``exc``'s traceback
    and its chain's (Note [A traceback as without us] in
    :mod:`autograd_viz.sources.tracebacks`): the script's frames remain.

    A script that does not compile has no frame of its own; its ``SyntaxError``
    names the file and line itself.
    """
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__") == __name__:
        tb = tb.tb_next
    exc.__traceback__ = tb
    trim_traceback(exc)
