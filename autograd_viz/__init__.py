"""autograd-viz: see, step through and debug a backward pass.

Record every backward call into a :class:`Trace`, replay any step as an
:class:`ExecutionState`, draw any step with :func:`to_dot`, or pause a
running backward with a :class:`LiveSession`, or find where a NaN was born
with :func:`watch_nan`. Works on our engine and on PyTorch's.
"""

from __future__ import annotations

from autograd_viz.draw.dot import to_dot
from autograd_viz.live import Breakpoint, LiveSession, SessionCancelled
from autograd_viz.nan.watch import watch_nan
from autograd_viz.sources.names import name
from autograd_viz.sources.recorder import Recorder, record
from autograd_viz.trace import GraphTaskInfo, NodeInfo, Trace, TraceEvent, TraceFormatError
from autograd_viz.trace.replay import ExecutionState, NodeState, NodeStatus
from autograd_viz.version import __version__

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
    "name",
    "record",
    "to_dot",
    "watch_nan",
]
