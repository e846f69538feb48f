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

Note [Births reached]
~~~~~~~~~~~~~~~~~~~~~
On PyTorch each forward birth has a number, and the checks say which births'
values reached the loss, a gradient, a parameter or the model's output
(Note [Lineage] in ``nan/forward/lineage.py``): a later event
names the number, in the same part or a later one. A birth never reached is
*contained*: counted, listed after the others, and no finding of the run. The
report heads with the first birth reached. The scan keeps the latest
``WAITING`` births not reached yet, so a value that reaches something much
later than it was born (a NaN kept in a buffer for a thousand steps) heads
the report through the finding where it arrived instead. The numbers reached
are kept only while a finding the report holds may still ask for them: a
value reaches something after it is born, so once a part is read, only the
births of the findings kept (listed, early, waiting) can be asked about.
A run that makes a new birth every step (a ``log(0)`` that reaches the loss
each time) holds the same few numbers at step 100 and at step 100,000.
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
    reached_births,
)
from autograd_viz.trace import Trace
from autograd_viz.trace.records import values_recorded

LISTED_SOURCES = 8
"""How many of the other findings born where they were found a report lists (``nan``'s)."""

EARLY = 16
"""How many of a run's first numbered births are kept to name the first contained one."""

WAITING = 1024
"""How many numbered births not reached yet are kept, the latest, for the report to head
with the one whose value reaches something later (Note [Births reached])."""


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
        self._calls = 0
        self._values: str | None = None  # the tier of the first part's header

    def add(self, part: Trace) -> None:
        """Read ``part``, the run's events that follow those read so far."""
        if self._values is None:
            self._values = values_recorded(part.header)
        runs = NodeRuns(part)
        offset = self.events
        self._anomalies.add(
            part,
            list(anomaly_findings(part, runs, offset)),
            self._ignored,
            reached_births(part),
        )
        if not self._anomalies.raw:  # no anomaly event yet: the gradients may be all there is
            leaves = self._values == "leaves"
            findings = list(gradient_findings(part, runs, offset, leaves))
            self._gradients.add(part, findings, self._ignored)
        self.events += len(part.events)
        # Backward calls, as `record` counts them: a reentrant backward (a checkpointed
        # block's) is a graph task inside its caller's call, not a call of its own.
        self._calls += sum(1 for g in part.graph_tasks.values() if g.parent is None)

    @property
    def held(self) -> int:
        """How many findings and birth numbers this scan holds: bounded by ``keep``,
        :data:`LISTED_SOURCES`, :data:`EARLY` and :data:`WAITING`, however long the run
        (Note [A run read a part at a time])."""
        return self._anomalies.held + self._gradients.held

    def report(self) -> NanReport:
        """The report on everything read so far."""
        tally = self._anomalies if self._anomalies.raw else self._gradients
        report = tally.report(self._calls, self._values or "all")
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
        # Numbered births (Note [Births reached]).
        self.reached: set[int] = set()  # births whose values reached something
        self.waiting: dict[int, Finding] = {}  # births not reached yet, the latest WAITING
        self.early: list[Finding] = []  # the first EARLY births, for the first contained
        self.births = 0
        self.births_reached = 0
        self.head: Finding | None = None  # the first birth reached
        self.head_path: tuple[NodeRef, ...] | None = None

    def add(
        self,
        part: Trace,
        found: list[Finding],
        ignored: frozenset[str],
        reached: Iterable[int] = (),
    ) -> None:
        self.raw += len(found)
        newly = set(reached) - self.reached
        self.reached |= newly
        findings = [f for f in found if not is_ignored(f, ignored)] if ignored else found
        for finding in findings:
            self._count(finding)
            if finding.phase == "forward":
                if finding.birth is not None and finding.born:
                    self._birth(finding)
                elif finding.born and self.forward is None:
                    self.forward = finding
            else:
                if self.backward is None:
                    self.backward = finding
                    self.backward_path = _path(part, finding) or ()
                # A leaf's gradient is no node's output: anomaly mode names none of them.
                leaf = finding.op == "accumulate_grad"
                if self.first_nan is None and finding.value == "nan" and not leaf:
                    self.first_nan = finding.node
        for number in newly:
            birth = self.waiting.pop(number, None)
            if birth is not None:
                self._reach(birth)
        if self.forward is not None and self.forward_path is None:
            self.forward_path = _path(part, self.forward)
        if self.head is not None and self.head_path is None:
            self.head_path = _path(part, self.head)
        if self.named is None and findings:
            self.named = anomaly_mode_event(part, findings)
        self._forget_reached()

    @property
    def held(self) -> int:
        """The findings and birth numbers held (:attr:`NanScan.held`)."""
        return len(self.findings) + len(self.early) + len(self.waiting) + len(self.reached)

    def _forget_reached(self) -> None:
        """Keep only the numbers reached that a kept finding may ask about (Note [Births
        reached]): a later part reaches only births already read, all of them kept
        here or dropped from the waiting ones for good."""
        asked = {f.birth for f in (*self.findings, *self.early) if f.birth is not None}
        self.reached &= asked

    def _birth(self, birth: Finding) -> None:
        """A numbered birth: reached already, or waiting to be (Note [Births reached])."""
        assert birth.birth is not None
        self.births += 1
        if len(self.early) < EARLY:
            self.early.append(birth)
        if birth.birth in self.reached:
            self._reach(birth)
            return
        self.waiting[birth.birth] = birth
        if len(self.waiting) > WAITING:
            del self.waiting[next(iter(self.waiting))]

    def _reach(self, birth: Finding) -> None:
        self.births_reached += 1
        if self.head is None or birth.event_index < self.head.event_index:
            self.head = birth
            self.head_path = None

    def _contained(self, finding: Finding) -> bool:
        return finding.birth is not None and finding.birth not in self.reached

    def _count(self, finding: Finding) -> None:
        self.count += 1
        self.born += finding.born
        if self.keep is None or len(self.findings) < self.keep:
            self.findings.append(finding)
            self.born_kept += finding.born
        elif finding.born and self.born_kept <= LISTED_SOURCES:  # one more: it may be the first
            self.findings.append(finding)
            self.born_kept += 1

    def report(self, calls: int, values: str) -> NanReport:
        path: tuple[NodeRef, ...] = ()
        born = [f for f in (self.head, self.forward) if f is not None]
        if born:
            first: Finding | None = min(born, key=lambda f: f.event_index)
            path = (self.head_path if first is self.head else self.forward_path) or ()
        else:
            first = self.backward
            path = self.backward_path
        named = self.named if self.named is not None else self.first_nan
        findings = tuple(
            dataclasses.replace(f, contained=True) if self._contained(f) else f
            for f in self.findings
        )
        contained = [f for f in (*self.early, *self.waiting.values()) if self._contained(f)]
        return NanReport(
            first,
            named,
            path,
            findings,
            calls,
            values,
            unlisted=self.count - len(findings),
            unlisted_born=self.born - self.born_kept,
            contained=self.births - self.births_reached,
            first_contained=next(
                (f for f in findings if f.contained), contained[0] if contained else None
            ),
        )


def _path(part: Trace, finding: Finding) -> tuple[NodeRef, ...] | None:
    """The path to ``finding``'s node from the root of its graph task in ``part``, ``()`` if
    the root does not reach it; ``None`` when no graph task of ``part`` holds the node."""
    task = graph_task_of(part, finding)
    return None if task is None else path_from_root(task, finding.node.id)


def find_nans(trace: Trace, ignore: Iterable[str] = ()) -> NanReport:
    """Find where the non-finite values of ``trace`` were born, and why.

    Args:
        trace: a trace, best recorded under ``detect_anomaly(check_inf=True,
            check_forward=True, mode="collect")`` (or ``autograd_viz.watch_nan()``).
        ignore: ops whose findings are left out (``log``, ``aten.log.default``).

    Returns:
        The report; its ``first`` is ``None`` when nothing was found.
    """
    scan = NanScan(ignore)
    scan.add(trace)
    return scan.report()
