"""Where a PyTorch node was made: the user's line and the module running.

The NaN checks (:mod:`~autograd_viz.nan.forward.checks`) tag each new
node with an :class:`Origin` in its own ``metadata``; reports and the TUI
read it back with :func:`node_origin`. "The user's line" is the first frame
that is not PyTorch's, ours (autograd-viz or the engine), ``runpy`` or frozen.
"""

from __future__ import annotations

import linecache
import os
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

import engine

ORIGIN_KEY = "autograd_viz.origin"
"""The key of a node's ``metadata`` under which its :class:`Origin` is kept."""
HOOKED_OUTPUT_KEY = "autograd_viz.hooked_output"
"""The key of a module output's node's ``metadata`` under which the :class:`Origin` of the
module call is kept, when that call's backward hooks wrap its outputs in one more node
(Note [Where a module call ends] in ``module_call_ends.py``): that node's origin."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where the forward op that made a node was called."""

    file: str
    """The user's file."""
    line: int
    """The line in it."""
    function: str
    """The function the line is in."""
    module: str | None
    """The qualified name of the module that was running, if any."""

    def formatted(self) -> list[str]:
        """The frame as :func:`traceback.format_list` writes it."""
        code = linecache.getline(self.file, self.line).strip()
        text = f'  File "{self.file}", line {self.line}, in {self.function}\n'
        return [text + (f"    {code}\n" if code else "")]


_NOT_USER_DIRS = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep
    for path in (torch.__file__, engine.__file__, sys.modules["autograd_viz"].__file__ or "")
)
_user_files: dict[str, bool] = {}


def _is_user_frame(filename: str) -> bool:
    """Not torch, not autograd-viz or our engine, not runpy or a frozen module."""
    mine = _user_files.get(filename)
    if mine is None:
        mine = not (
            filename.startswith("<")
            or filename.endswith("runpy.py")
            or os.path.abspath(filename).startswith(_NOT_USER_DIRS)
        )
        _user_files[filename] = mine
    return mine


def user_frames(frame: FrameType | None) -> Iterator[FrameType]:
    """The frames of the user's code from ``frame`` outwards (not torch, autograd-viz, runpy)."""
    while frame is not None:
        if _is_user_frame(frame.f_code.co_filename):
            yield frame
        frame = frame.f_back


def user_stack() -> list[str]:
    """The user's frames of the current stack, formatted, outermost first."""
    frames = list(user_frames(sys._getframe(1)))
    summary = traceback.StackSummary.extract(
        ((f, f.f_lineno) for f in reversed(frames)), lookup_lines=True
    )
    return summary.format()


def node_origin(fn: Any) -> Origin | None:
    """Where the forward op that made the PyTorch node ``fn`` was called, if it was checked."""
    origin = fn.metadata.get(ORIGIN_KEY)
    if origin is None and fn.name() == "BackwardHookFunctionBackward":
        # The output side of a module's backward hooks: made once its forward hooks ran.
        for next_fn, _nr in fn.next_functions:
            if next_fn is not None:
                origin = next_fn.metadata.get(HOOKED_OUTPUT_KEY)
                if origin is not None:
                    break
    return origin if isinstance(origin, Origin) else None


__all__ = ["HOOKED_OUTPUT_KEY", "ORIGIN_KEY", "Origin", "node_origin", "user_frames", "user_stack"]
