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
Python ``OpOverload.__call__`` is not the innermost frame either. The
trampoline, torch's mode plumbing and our frames leave a program's traceback
(Note [A traceback as without us] in ``autograd_viz/sources/tracebacks.py``,
where the trampoline and the plumbing are defined).
"""

from __future__ import annotations

from types import CodeType, FrameType, FunctionType
from typing import Any

import torch
import torch._ops

from autograd_viz.sources.tracebacks import TRAMPOLINE, is_plumbing

_MAX_PLACES = 4096
"""Placed trampolines kept, one per calling line; past this many the cache starts again."""

_placed: dict[tuple[str, str, int], CodeType] = {}
"""The trampoline's code placed at each calling line (file, function, line): strings only,
nothing of the program's kept alive."""


def caller(frame: FrameType | None, func: Any) -> FrameType | None:
    """The frame that called ``func`` into a mode, from the mode's ``frame`` outwards."""
    while frame is not None and is_plumbing(frame.f_code.co_filename):
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
        placed = _placed[place] = TRAMPOLINE.replace(
            co_filename=code.co_filename,
            co_firstlineno=lineno,
            co_name=code.co_name,
            co_qualname=code.co_qualname,
        )
    # The function is made at each call: kept, it would keep the caller's globals alive.
    return FunctionType(placed, frame.f_globals)(func, args, kwargs)


__all__ = ["call_from", "caller"]
