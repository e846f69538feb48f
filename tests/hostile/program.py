"""A program whose every name is hostile, recorded into a trace.

One hostile string is used for everything a program can name: a custom
Function subclass, a leaf tensor, the thread that calls backward, and the
message of an exception raised in backward.
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Any

import engine
from autograd_viz import record
from autograd_viz.trace import Trace


def function_named(name: str, *, fails: bool = False, nan: bool = False) -> type[engine.Function]:
    """A Function subclass called ``name`` (NUL and lone surrogates as ``?``).

    Its backward doubles the gradient; with ``fails`` it raises ``ValueError(name)``,
    with ``nan`` it returns NaN.
    """

    def forward(ctx: Any, x: engine.Tensor) -> engine.Tensor:
        return x * 2.0

    def backward(ctx: Any, grad: engine.Tensor) -> engine.Tensor:
        if fails:
            raise ValueError(name)
        return grad * (math.nan if nan else 2.0)

    attrs = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return type(class_name(name), (engine.Function,), attrs)


def class_name(name: str) -> str:
    """``name`` as a class name: anything but NUL and lone surrogates, which become ``?``."""
    return "".join("?" if c == "\x00" or "\ud800" <= c <= "\udfff" else c for c in name)


def hostile_program(name: str) -> None:
    """Two backward calls named ``name`` everywhere: one on a thread called ``name``, one failing."""
    x = engine.tensor([1.0, 2.0], requires_grad=True, name=name)
    y = function_named(name).apply(x * 3.0)
    worker = threading.Thread(target=lambda: y.sum().backward(), name=name)
    worker.start()
    worker.join()
    z = engine.tensor([1.0], requires_grad=True, name=name)
    with contextlib.suppress(ValueError):
        function_named(name, fails=True).apply(z).sum().backward()


def hostile_trace(name: str) -> Trace:
    """The trace of :func:`hostile_program`."""
    with record() as trace:
        hostile_program(name)
    return trace


def nan_program(name: str) -> None:
    """A backward whose Function ``name`` returns NaN, under anomaly mode (it collects)."""
    x = engine.tensor([1.0, 2.0], requires_grad=True, name=name)
    with engine.detect_anomaly(check_inf=True, mode="collect"):
        function_named(name, nan=True).apply(x).sum().backward()


def script_text(program: str, name: str) -> str:
    """A script that runs ``program`` of this module on ``name`` (written as a literal)."""
    return f"from tests.hostile.program import {program}\n{program}({name!r})\n"
