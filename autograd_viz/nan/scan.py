"""A run read for NaNs a part at a time: the report of :func:`find_nans` in bounded memory.

Note [A run read a part at a time]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
``autograd-viz nan`` follows a training run of any length, and a NaN in
step 12,000 spreads into every step after it: keeping the whole run until it
ends, to read it once, grows without bound. A :class:`NanScan` takes the run
as the recorder hands it on (each part holds whole backward calls and the
forward work before them, Note [Streamed traces]) and keeps only what the
report says:

* the first forward value born non-finite and the first backward finding,
  each with the path from its call's root (Note [First non-finite value]
  chooses between them at the end); a forward finding's node is in a graph
  task that starts after it, so its path may come from a later part;
* the node anomaly mode would name: the first ``anomaly`` event that says
  NaN, else the first backward finding of a NaN;
* the findings themselves up to ``keep`` of them, and past that only those
  created there while fewer than the report lists are kept; the rest are
  counted (:attr:`NanReport.unlisted`).

Every finding is read from its own part: a node's events and its graph task
are in the part of the call that ran it, and one op's forward outputs are
checked together, so a finding never straddles two parts. The report is the
one :func:`find_nans` gives on the whole run: the same first finding, cause,
path and counts. :func:`find_nans` is a scan of one part that keeps every
finding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from autograd_viz.nan.report import (
    Finding,
    NanReport,
    NodeRef,
    NodeRuns,
    anomaly_findings,
    anomaly_mode_event,
    gradient_findings,
    graph_task_of,
    ignored_ops,
    is_ignored,
    path_from_root,
)
from autograd_viz.trace import Trace
from autograd_viz.trace.records import values_recorded

LISTED_SOURCES = 8
"""How many of the other findings born where they were found a report lists (``nan``'s)."""


class NanScan:
    """The findings of a run, read a part at a time (Note [A run read a part at a time]).

    Args:
        ignore: ops whose findings are left out (``log``, ``aten.log.default``).
        keep: how many findings :attr:`NanReport.findings` holds at most (beyond
            them, those born until :data:`LISTED_SOURCES` are held); ``None``
            keeps every one.
    """

    def __init__(self, ignore: Iterable[str] = (), keep: int | None = None) -> None:
        self._ignored = ignored_ops(ignore)
        # One tally per way of finding: anomaly events, or (a trace recorded without
        # anomaly mode) gradients that are not finite; the first that found any is used.
        self._anomalies = _Tally(keep)
        self._gradients = _Tally(keep)
        self.events = 0
        """Events read so far: the next part's first event has this index in the run."""
        self._graph_tasks = 0
        self._values: str | None = None  # the tier of the first part's header

    def add(self, part: Trace) -> None:
        """Read ``part``, the run's events that follow those read so far."""
        if self._values is None:
            self._values = values_recorded(part.header)
        runs = NodeRuns(part)
        offset = self.events
        self._anomalies.add(part, list(anomaly_findings(part, runs, offset)), self._ignored)
        if not self._anomalies.raw:  # no anomaly event yet: the gradients may be all there is
            leaves = self._values == "leaves"
            findings = list(gradient_findings(part, runs, offset, leaves))
            self._gradients.add(part, findings, self._ignored)
        self.events += len(part.events)
        self._graph_tasks += len(part.graph_tasks)

    def report(self) -> NanReport:
        """The report on everything read so far."""
        tally = self._anomalies if self._anomalies.raw else self._gradients
        report = tally.report(self._graph_tasks, self._values or "all")
        if self._values == "none" and not self._anomalies.raw:
            return dataclasses.replace(report, unchecked=True)
        return report


class _Tally:
    """What the report keeps of the findings of one way of finding them."""

    def __init__(self, keep: int | None) -> None:
        self.keep = keep
        self.raw = 0  # findings, ignored ones included
        self.findings: list[Finding] = []
        self.count = 0
        self.born = 0
        self.born_kept = 0
        self.forward: Finding | None = None  # the first forward finding born non-finite
        self.forward_path: tuple[NodeRef, ...] | None = None  # None: its graph task is to come
        self.backward: Finding | None = None  # the first backward finding
        self.backward_path: tuple[NodeRef, ...] = ()
        self.named: NodeRef | None = None  # anomaly mode's node, from an event
        self.first_nan: NodeRef | None = None  # the first backward finding of a NaN

    def add(self, part: Trace, found: list[Finding], ignored: frozenset[str]) -> None:
        self.raw += len(found)
        findings = [f for f in found if not is_ignored(f, ignored)] if ignored else found
        for finding in findings:
            self._count(finding)
            if finding.phase == "forward":
                if finding.born and self.forward is None:
                    self.forward = finding
            else:
                if self.backward is None:
                    self.backward = finding
                    self.backward_path = _path(part, finding) or ()
                # A leaf's gradient is no node's output: anomaly mode names none of them.
                leaf = finding.op == "accumulate_grad"
                if self.first_nan is None and finding.value == "nan" and not leaf:
                    self.first_nan = finding.node
        if self.forward is not None and self.forward_path is None:
            self.forward_path = _path(part, self.forward)
        if self.named is None and findings:
            self.named = anomaly_mode_event(part, findings)

    def _count(self, finding: Finding) -> None:
        self.count += 1
        self.born += finding.born
        if self.keep is None or len(self.findings) < self.keep:
            self.findings.append(finding)
            self.born_kept += finding.born
        elif finding.born and self.born_kept <= LISTED_SOURCES:  # one more: it may be the first
            self.findings.append(finding)
            self.born_kept += 1

    def report(self, graph_tasks: int, values: str) -> NanReport:
        first = self.forward if self.forward is not None else self.backward
        if first is None:
            path: tuple[NodeRef, ...] = ()
        elif first is self.forward:
            path = self.forward_path or ()
        else:
            path = self.backward_path
        named = self.named if self.named is not None else self.first_nan
        findings = tuple(self.findings)
        return NanReport(
            first,
            named,
            path,
            findings,
            graph_tasks,
            values,
            unlisted=self.count - len(findings),
            unlisted_born=self.born - self.born_kept,
        )


def _path(part: Trace, finding: Finding) -> tuple[NodeRef, ...] | None:
    """The path to ``finding``'s node from the root of its graph task in ``part``, ``()`` if
    the root does not reach it; ``None`` when no graph task of ``part`` holds the node."""
    task = graph_task_of(part, finding)
    return None if task is None else path_from_root(task, finding.node.id)
