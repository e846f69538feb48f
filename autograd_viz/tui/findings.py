"""NaN analysis for the inspector: what ``autograd-viz nan`` finds, at a node, up to a step."""

from __future__ import annotations

from autograd_viz.nan.report import Finding
from autograd_viz.trace import Trace


class NanFindings:
    """The findings of :func:`~autograd_viz.nan.report.find_nans` on a trace, made again only
    when the trace changed (a live trace grows, ``run --last`` forgets calls), asked for by node."""

    def __init__(self) -> None:
        self._report: tuple[Trace, tuple[int, int], tuple[Finding, ...]] | None = None

    def at(self, trace: Trace, task_id: int, node_id: int, step: int) -> tuple[Finding, ...]:
        """What is found at ``node_id`` of graph task ``task_id`` before ``step``: NaN or Inf,
        and why (a forward anomaly, in no graph task, counts for every task)."""
        from autograd_viz.nan.scan import find_nans

        events = trace.events  # its first event changes when run --last forgets a call
        key = (len(events), events[0].seq if events else -1)
        report = self._report
        if report is None or report[0] is not trace or report[1] != key:
            report = self._report = (trace, key, find_nans(trace).findings)
        return tuple(
            f
            for f in report[2]
            if f.node.id == node_id and f.graph_task in (task_id, 0) and f.event_index < step
        )
