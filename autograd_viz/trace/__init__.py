"""The trace: the contract between the sources of events and the views.

Plain data (:mod:`~autograd_viz.trace.records`), its file format
(:mod:`~autograd_viz.trace.file`, validated by
:mod:`~autograd_viz.trace.schema`, its common records by
:mod:`~autograd_viz.trace.fast`) and replay
(:mod:`~autograd_viz.trace.replay`: the engine's state at any step). Nothing
here runs or watches an engine; that is :mod:`autograd_viz.sources`.
"""

from __future__ import annotations

from autograd_viz.trace.records import (
    DEFAULT_MAX_VALUES,
    GraphTaskInfo,
    LeafInfo,
    NodeInfo,
    Trace,
    TraceEvent,
    TraceFormatError,
    TraceStats,
    paused_gc,
)
from autograd_viz.trace.replay import ExecutionState, NodeState, NodeStatus
from autograd_viz.trace.summary import TensorSummary

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
