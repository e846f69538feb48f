"""The trace: the contract between the sources of events and the views.

Plain data (:mod:`~autograd_viz.trace.records`; the :class:`Trace` users hold,
in :mod:`~autograd_viz.trace.document`, adds loading, saving and replay), its file format
(:mod:`~autograd_viz.trace.file`, written by :mod:`~autograd_viz.trace.writing`
and read by the readers of :mod:`~autograd_viz.trace.schema`, compiled by
:mod:`~autograd_viz.trace.fast`) and replay (:mod:`~autograd_viz.trace.replay`:
the engine's state at any step). Nothing
here runs or watches an engine; that is :mod:`autograd_viz.sources`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autograd_viz.trace.document import Trace
from autograd_viz.trace.records import (
    DEFAULT_MAX_VALUES,
    GraphTaskInfo,
    LeafInfo,
    NodeInfo,
    TraceEvent,
    TraceFormatError,
    TraceStats,
    paused_gc,
)
from autograd_viz.trace.summary import TensorSummary

if TYPE_CHECKING:
    from autograd_viz.trace.replay import ExecutionState, NodeState, NodeStatus

__all__ = [
    "DEFAULT_MAX_VALUES",
    "ExecutionState",
    "GraphTaskInfo",
    "LeafInfo",
    "NodeInfo",
    "NodeState",
    "NodeStatus",
    "TensorSummary",
    "Trace",
    "TraceEvent",
    "TraceFormatError",
    "TraceStats",
    "paused_gc",
]


_REPLAY = ("ExecutionState", "NodeState", "NodeStatus")


def __getattr__(attribute: str) -> Any:
    """Replay's names, imported on first use: a recording process never replays
    (Note [Lazy top-level names] in :mod:`autograd_viz`)."""
    if attribute not in _REPLAY:
        raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
    from autograd_viz.trace import replay

    value = getattr(replay, attribute)
    globals()[attribute] = value
    return value
