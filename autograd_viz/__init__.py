"""autograd-viz: see, step through and debug a backward pass.

Record every backward call into a :class:`Trace`, replay any step as an
:class:`ExecutionState`, draw any step with :func:`to_dot`, or pause a
running backward with a :class:`LiveSession`, animate it with :func:`animate`
(inline in a notebook), or find where a NaN was born
with :func:`watch_nan`, or say why a parameter got no gradient with
:func:`watch_grads`. Works on our engine and on PyTorch's.

Note [Lazy top-level names]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
Every process of a watched job imports this package before its first line
runs (Note [Children armed by the environment] in
:mod:`autograd_viz.launch.processes`), and a child needs only the
recorder. The names below are imported on first use (PEP 562), so a child
does not pay for Graphviz, the drawing and the replay modules it never
calls: ``import autograd_viz`` imports nothing but this module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from autograd_viz.version import __version__

if TYPE_CHECKING:
    from autograd_viz.draw.render.inline import animate
    from autograd_viz.drawing import to_dot
    from autograd_viz.grads.watch import watch_grads
    from autograd_viz.live import Breakpoint, LiveSession, SessionCancelled
    from autograd_viz.nan.watch import watch_nan
    from autograd_viz.sources.names import name
    from autograd_viz.trace import GraphTaskInfo, NodeInfo, Trace, TraceEvent, TraceFormatError
    from autograd_viz.trace.recorder import Recorder
    from autograd_viz.trace.recording import record
    from autograd_viz.trace.replay import ExecutionState, NodeState, NodeStatus

_WHERE: dict[str, str] = {
    "Breakpoint": "autograd_viz.live",
    "ExecutionState": "autograd_viz.trace.replay",
    "GraphTaskInfo": "autograd_viz.trace",
    "LiveSession": "autograd_viz.live",
    "NodeInfo": "autograd_viz.trace",
    "NodeState": "autograd_viz.trace.replay",
    "NodeStatus": "autograd_viz.trace.replay",
    "Recorder": "autograd_viz.trace.recorder",
    "SessionCancelled": "autograd_viz.live",
    "Trace": "autograd_viz.trace",
    "TraceEvent": "autograd_viz.trace",
    "TraceFormatError": "autograd_viz.trace",
    "animate": "autograd_viz.draw.render.inline",
    "name": "autograd_viz.sources.names",
    "record": "autograd_viz.trace.recording",
    "to_dot": "autograd_viz.drawing",
    "watch_nan": "autograd_viz.nan.watch",
    "watch_grads": "autograd_viz.grads.watch",
}
"""The module each public name comes from (Note [Lazy top-level names])."""

__all__ = [
    "Breakpoint",
    "ExecutionState",
    "GraphTaskInfo",
    "LiveSession",
    "NodeInfo",
    "NodeState",
    "NodeStatus",
    "Recorder",
    "SessionCancelled",
    "Trace",
    "TraceEvent",
    "TraceFormatError",
    "__version__",
    "animate",
    "name",
    "record",
    "to_dot",
    "watch_grads",
    "watch_nan",
]


def __getattr__(attribute: str) -> Any:
    """Import a public name on first use, then keep it as an ordinary attribute."""
    module = _WHERE.get(attribute)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
    value = getattr(importlib.import_module(module), attribute)
    globals()[attribute] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
