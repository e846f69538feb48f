"""Run a function our modes hand on as if from the line that called it, for its warnings.

Note [A warning keeps its line]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The NaN checks' function and dispatch modes run each torch function and op
from a frame of ours. A warning raised inside takes its place from the
Python frames around it: a C++ ``TORCH_WARN`` the innermost one, a
``warnings.warn(..., stacklevel=2)`` in torch's Python code (``F.mse_loss``)
the one above the function. Without the modes that is the line that called
the function; with them it was ours. So the warning named our file and line,
was filtered by our module's name (``ignore::DeprecationWarning`` hid what
``__main__`` shows) and was shown once for every place at once: two calls at
two lines warned twice without us, once with us.

So the modes call the function through a one-line trampoline whose code is
given the caller's file, line and function name, run in the caller's module
globals: a warning raised inside sees the caller's file, line, module (for the
filters) and ``__warningregistry__`` (for "once per place"), as without the
modes. The caller is the first frame outside ours and torch's mode plumbing
(``overrides.py``, ``_ops.py``, ``utils/_python_dispatch.py``, and the
``_disable_dynamo`` wrapper around ``__torch_dispatch__``), and, when the
function is torch Python code that handed itself to the mode, the frame that
called it. An aten op is called through its C++ operator, so that torch's
Python ``OpOverload.__call__`` is not the innermost frame either. A traceback
through the call shows the caller's line once more, for the trampoline.
"""

from __future__ import annotations

import itertools
import os
from types import CodeType, FrameType, FunctionType, TracebackType
from typing import Any

import torch
import torch._ops


def _call(f, a, k): return f(*a, **k)  # fmt: skip


_CODE = _call.__code__
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_PLUMBING_PREFIXES = (
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep,
)
_PLUMBING_FILES = frozenset(
    _TORCH + name
    for name in (
        "overrides.py",
        "_ops.py",
        os.path.join("utils", "_python_dispatch.py"),
        # torch._disable_dynamo's wrapper around a mode's __torch_dispatch__
        "_compile.py",
        os.path.join("_dynamo", "eval_frame.py"),
    )
)
_MAX_PLACES = 4096
"""Placed trampolines kept, one per calling line; past this many the cache starts again."""

_plumbing: dict[str, bool] = {}
_placed: dict[tuple[str, str, int], CodeType] = {}
"""The trampoline's code placed at each calling line (file, function, line): strings only,
nothing of the program's kept alive."""


def _is_plumbing(filename: str) -> bool:
    known = _plumbing.get(filename)
    if known is None:
        path = os.path.abspath(filename)
        known = _plumbing[filename] = path in _PLUMBING_FILES or path.startswith(_PLUMBING_PREFIXES)
    return known


def caller(frame: FrameType | None, func: Any) -> FrameType | None:
    """The frame that called ``func`` into a mode, from the mode's ``frame`` outwards."""
    while frame is not None and _is_plumbing(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is not None:
        own = getattr(getattr(func, "__wrapped__", func), "__code__", None)
        if frame.f_code is own or frame.f_code is getattr(func, "__code__", None):
            frame = frame.f_back  # torch Python code that handed itself to the mode
    return frame


def call_from(frame: FrameType | None, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` from a trampoline placed at ``frame``'s line (Note [A warning
    keeps its line]); a plain call when there is no frame to place it at."""
    if type(func) is torch._ops.OpOverload:
        func = func._op  # its C++ operator: no frame of torch's between
    lineno = frame.f_lineno if frame is not None else None
    if frame is None or not lineno:
        return func(*args, **kwargs)
    code = frame.f_code
    place = (code.co_filename, code.co_qualname, lineno)
    placed = _placed.get(place)
    if placed is None:
        if len(_placed) >= _MAX_PLACES:
            _placed.clear()
        placed = _placed[place] = _CODE.replace(
            co_filename=code.co_filename,
            co_firstlineno=lineno,
            co_name=code.co_name,
            co_qualname=code.co_qualname,
        )
    # The function is made at each call: kept, it would keep the caller's globals alive.
    return FunctionType(placed, frame.f_globals)(func, args, kwargs)


def is_placed(code: CodeType) -> bool:
    """Whether ``code`` is the trampoline, placed at some caller's line."""
    return code.co_code == _CODE.co_code and code.co_varnames == _CODE.co_varnames


def without_mode_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` as it would be without the checks' modes, for a program's traceback.

    Each trampoline goes, and so does each run of frames of ours and of torch's mode
    plumbing that the exception left through a frame after it; a run at the end is where
    the error was raised (a fault of ours, say) and stays.
    """
    entries: list[TracebackType] = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    if not entries:
        return None
    kept: list[TracebackType] = []
    run: list[TracebackType] = []
    ours_in_run = False
    for entry in entries:
        code = entry.tb_frame.f_code
        if is_placed(code):
            if not ours_in_run:
                kept.extend(run)
            run, ours_in_run = [], False
            continue
        if _is_plumbing(code.co_filename):
            run.append(entry)
            ours_in_run = ours_in_run or os.path.abspath(code.co_filename).startswith(
                _PLUMBING_PREFIXES
            )
            continue
        if not ours_in_run:
            kept.extend(run)
        run, ours_in_run = [], False
        kept.append(entry)
    kept.extend(run)  # where it was raised
    if not kept:
        return entries[0]
    for entry, after in itertools.pairwise(kept):
        entry.tb_next = after
    kept[-1].tb_next = None
    return kept[0]


__all__ = ["call_from", "caller", "is_placed", "without_mode_frames"]
