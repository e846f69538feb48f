"""Saying a thing once per process: the warnings of a watcher that goes on watching.

Note [Warnings point at the program]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A watcher's one-line warning ("cannot watch X") is said from deep inside a
call the program made: a hook PyTorch runs, a module's ``__call__``, the
recorder's callback. A fixed ``stacklevel`` points at whichever frame happens
to sit that many levels out, often one of PyTorch's files or ours, which says
nothing to the user. :func:`program_stacklevel` instead walks out of the
library code (``torch``, ``autograd_viz``, ``engine``, and the standard
library's plumbing that runs between them: ``contextlib``, ``importlib``,
``threading``) to the first frame of the program's own, the line it would
search for. A thread that PyTorch or a backend started may hold no frame of
the program's at all: the warning then points where it is said.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import threading
import warnings
from types import FrameType

_AUTOGRAD_VIZ = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""This package's directory (``autograd_viz``), whose frames are the watcher's."""

said: set[str] = set()
"""The messages said so far (bounded: see :data:`MAX_SAID`)."""

MAX_SAID = 1000
"""How many distinct messages are remembered; past that, a message may be said again."""


def warn_once(message: str) -> None:
    """Warn ``message`` as a ``RuntimeWarning``, unless this process said it already.

    The warning points at the program's line that called into the watcher
    (Note [Warnings point at the program]).
    """
    if message in said:
        return
    if len(said) >= MAX_SAID:  # however many distinct errors a long run meets
        said.clear()
    said.add(message)
    warnings.warn(message, RuntimeWarning, stacklevel=program_stacklevel())


def program_stacklevel(default: int = 2) -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the function that calls this, pointing at
    the first frame outside the libraries (Note [Warnings point at the program]).

    Args:
        default: the level to use when every frame is a library's (a hook on a
            thread PyTorch or a backend started).
    """
    frame: FrameType | None = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame is not None:
        if not _in_library(frame.f_code.co_filename):
            return level
        frame = frame.f_back
        level += 1
    return default


def _in_library(filename: str) -> bool:
    torch = sys.modules.get("torch")
    torch_dir = os.path.dirname(torch.__file__ or "") if torch is not None else None
    return _library_file(filename, torch_dir)


@functools.lru_cache(maxsize=4096)
def _library_file(filename: str, torch_dir: str | None) -> bool:
    if filename.startswith("<frozen "):
        return True  # the import system
    path = os.path.realpath(filename)
    dirs, files = _library_places(torch_dir)
    return path in files or any(path.startswith(d) for d in dirs)


@functools.lru_cache(maxsize=4)
def _library_places(torch_dir: str | None) -> tuple[tuple[str, ...], frozenset[str]]:
    """The libraries' directories (each ending with a separator) and single files."""
    import engine

    packages = [engine.__file__, importlib.__file__]
    dirs = [os.path.dirname(f) for f in packages if f]
    dirs.append(_AUTOGRAD_VIZ)
    if torch_dir:
        dirs.append(torch_dir)
    files = frozenset(os.path.realpath(f) for f in (contextlib.__file__, threading.__file__) if f)
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs), files
