"""``autograd_viz.watch_nan()``: check a block of code for NaN and Inf, on either engine.

Around a training step, it records what runs, with every check on: our
engine's anomaly mode at its fullest (``detect_anomaly(check_inf=True,
check_forward=True)``), and for PyTorch the bridge (backward) with
:class:`~autograd_viz.nan.forward.checks.TorchNanChecker` (every aten
op). Afterwards :attr:`NanWatch.report` says where the first NaN or Inf was
born, and why::

    with autograd_viz.watch_nan() as watch:
        loss = model(x).loss
        loss.backward()
    if watch.found:
        print(watch.report.first.cause, watch.report.first.source)

With ``first=True`` the first finding raises instead, as anomaly mode does
(``RuntimeError``; from PyTorch code a
:class:`~autograd_viz.nan.forward.checks.NonFiniteError`, a subclass).

Note [Arming the PyTorch checks]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Code on our engine alone must never import PyTorch. The checker is armed at
once when ``torch`` is already imported, else right after the watched
code's own ``import torch``, through the one import hook the bridge uses too
(:func:`autograd_viz.sources.import_hooks.armed_on_this_thread`). PyTorch's
modes belong to a thread: the checker watches the thread that entered
``watch_nan`` and is armed only from it. :func:`torch_checks` is the one place that does this.
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from autograd_viz.nan.report import NanReport
from autograd_viz.nan.scan import NanScan, find_nans
from autograd_viz.nan.unrecorded import LeafCheck, MissedFinding
from autograd_viz.sources.import_hooks import armed_on_this_thread
from autograd_viz.sources.tracebacks import trim_traceback
from autograd_viz.trace import Trace
from autograd_viz.trace.calls import CallSelection
from autograd_viz.trace.recording import Recording
from autograd_viz.trace.records import DEFAULT_MAX_VALUES
from engine.anomaly import detect_anomaly
from engine.calls import CALLS

KEPT_FINDINGS = 100
"""How many findings a report of a run read as it went lists in full (the rest are counted)."""

_FINDING = re.compile(r"Function '[^']*' (returned|produced) (nan|inf) values")


class NanWatch:
    """What :func:`watch_nan` saw: the trace and, once asked, the report."""

    def __init__(
        self,
        trace: Trace,
        ignore: frozenset[str],
        recording: Recording | None = None,
        scan: NanScan | None = None,
        leaves: LeafCheck | None = None,
    ) -> None:
        self.trace = trace
        """Everything recorded inside the block (with ``last``, filled when it ends;
        with ``keep_trace=False``, only the calls in flight)."""
        self.recording = recording
        """The recording behind :attr:`trace`: which calls it kept, where it wrote them."""
        self._ignore = ignore
        self._scan = scan
        self._leaves = leaves
        self._report: tuple[int, NanReport] | None = None

    @property
    def missed(self) -> MissedFinding | None:
        """The first NaN or Inf that reached a parameter's gradient in a backward call that
        ``steps``/``every`` left out (Note [Checking calls not recorded]); not in
        :attr:`report`, which reads the calls recorded."""
        return None if self._leaves is None else self._leaves.missed

    def report_fields(self) -> dict[str, Any]:
        """What this process says in its report to a command watching it from another process
        (:class:`~autograd_viz.launch.processes.ChildReport`'s fields) beside its trace: the
        finding at the parameters, which no event of the trace holds."""
        missed = self.missed
        return {} if missed is None else {"missed": dataclasses.asdict(missed)}

    @property
    def recorded(self) -> bool:
        """Whether anything was recorded (a trace read as it went holds nothing at the end)."""
        return bool(self.trace.events) or (self._scan is not None and self._scan.events > 0)

    @property
    def report(self) -> NanReport:
        """Where the first NaN or Inf was born, and why (recomputed when the trace grew;
        with ``keep_trace=False``, over the calls that have ended)."""
        if self._scan is not None:
            return self._scan.report()
        length = len(self.trace.events)
        if self._report is None or self._report[0] != length:
            self._report = (length, find_nans(self.trace, self._ignore))
        return self._report[1]

    def _repr_html_(self) -> str:
        """A notebook shows the report as ``autograd-viz nan`` prints it."""
        from autograd_viz.nan.text import report_text

        return report_text(self.report, html=True)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        from autograd_viz.nan.text import report_text

        printer.text(report_text(self.report).rstrip("\n"))

    @property
    def found(self) -> bool:
        """Whether a NaN or Inf was found, in a call recorded or, at a leaf, in one not."""
        return self.report.first is not None or self.missed is not None


@contextmanager
def watch_nan(
    *,
    first: bool = False,
    forward: bool = True,
    inf: bool = True,
    ignore: Iterable[str] = (),
    max_values: int = DEFAULT_MAX_VALUES,
    eager_compiled: bool = False,
    steps: str | Iterable[int] | None = None,
    every: int | None = None,
    last: int | None = None,
    output: str | os.PathLike[str] | None = None,
    values: str = "all",
    keep_trace: bool = True,
) -> Iterator[NanWatch]:
    """Check everything the block runs for NaN (and Inf), on our engine and on PyTorch.

    Every op and every backward call is checked; ``steps``, ``every`` and
    ``last`` choose which backward calls are recorded, as for
    :func:`~autograd_viz.trace.recorder.record`. The backward of a call that
    ``steps`` or ``every`` leaves out is checked where its gradients reach the
    parameters (:attr:`NanWatch.missed`; Note [Checking calls not recorded]
    in :mod:`autograd_viz.nan.unrecorded`). With ``last`` (a flight
    recorder, for a long run) recording stops at the first backward call that
    holds a finding: the trace holds that call and the ``last - 1`` before it.

    Args:
        first: raise at the first finding (``RuntimeError``, as anomaly mode
            does) instead of collecting every one.
        forward: check each op's output as it is made, not only backward outputs.
        inf: flag +Inf and -Inf as well as NaN (an intentional ``-inf``, such as
            a masked attention score, is never flagged; see docs/nan.md).
        ignore: ops that make non-finite values on purpose (``masked_fill``,
            ``aten.log.default``): not reported.
        max_values: tensors up to this many elements keep their values in the trace.
        eager_compiled: run ``torch.compile``d code eagerly, so that each op inside
            is checked (results may then differ in the last bits). By default
            compiled code runs compiled, checked at its inputs and outputs.
        steps: record only these backward calls (``"10-12,100"``, or ints).
        every: record only calls 0, N, 2N, ...
        last: keep only the last N recorded calls, up to the one with the first finding.
        output: also write the trace there when the block ends (with ``last``,
            at once when a finding is made; with ``keep_trace=False``, each call
            as it ends).
        keep_trace: keep every recorded call in :attr:`NanWatch.trace`. With
            ``False`` (and no ``last``) each call is read for the report when it
            ends and dropped, so memory stays flat however long the run (Note
            [A run read a part at a time] in :mod:`autograd_viz.nan.scan`); the
            report lists the first findings and counts the rest.
        values: which gradients the trace summarizes, as for ``record``: the
            checks run and their findings are kept whole at every tier; the
            report's causes and paths read the other summaries, so ``leaves``
            and ``none`` report less (Note [Values tiers]).

    Yields:
        A :class:`NanWatch`; read its ``report`` inside or after the block.

    Raises:
        RuntimeError: with ``first=True``, at the first NaN or Inf.
    """
    ignored = frozenset(ignore)
    calls = CallSelection(steps, every, last)
    streamed = not keep_trace and last is None
    scan = NanScan(ignored, keep=KEPT_FINDINGS) if streamed else None
    # Not gated: the checks report through events, in calls that are not recorded too.
    recording = Recording(
        max_values,
        calls,
        output if last is not None or streamed else None,
        gated=False,
        observe=scan.add if scan is not None else None,
        values=values,
    )
    leaves = LeafCheck(recording.recorder, calls, inf) if calls.filters else None
    try:
        with (
            recording.running(),
            _watching_calls(leaves),
            nan_checks(
                first=first,
                forward=forward,
                inf=inf,
                ignore=ignored,
                max_values=max_values,
                eager_compiled=eager_compiled,
            ),
        ):
            yield NanWatch(recording.trace, ignored, recording, scan, leaves)
    finally:
        if output is not None and last is None and not streamed:
            recording.trace.save(output)


@contextmanager
def _watching_calls(leaves: LeafCheck | None) -> Iterator[None]:
    """Tell ``leaves`` of each backward call (after the recorder, already told), if any."""
    if leaves is None:
        yield
        return
    CALLS.add(leaves)
    try:
        yield
    finally:
        CALLS.remove(leaves)
        leaves.close()


@contextmanager
def nan_checks(
    *,
    first: bool = False,
    forward: bool = True,
    inf: bool = True,
    ignore: Iterable[str] = (),
    max_values: int = DEFAULT_MAX_VALUES,
    eager_compiled: bool = False,
) -> Iterator[None]:
    """The checks of :func:`watch_nan` without its recording: findings are ``anomaly`` events.

    For whoever already listens to the events (a live session: its ``f``
    then stops at a forward finding too). The arguments are :func:`watch_nan`'s.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anomaly mode's "this will be slow" warning
        anomaly = detect_anomaly(
            check_inf=inf, check_forward=forward, mode="raise" if first else "collect"
        )
    settings = {
        "check_inf": inf,
        "forward": forward,
        "first": first,
        "ignore": frozenset(ignore),
        "max_values": max_values,
        "eager_compiled": eager_compiled,
    }
    with anomaly, torch_checks(settings):
        yield


def stopped_at_finding(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``first=True`` check stopping the program, not a bug of its own."""
    if type(exc).__name__ == "NonFiniteError":
        return True
    return isinstance(exc, RuntimeError) and _FINDING.match(str(exc)) is not None


# -- arming the PyTorch side (Note [Arming the PyTorch checks]) -----------------------------


@contextmanager
def torch_checks(settings: dict[str, Any]) -> Iterator[None]:
    """Check PyTorch's ops on this thread inside the block, from now or from ``import torch``.

    Args:
        settings: the keyword arguments of
            :class:`~autograd_viz.nan.forward.checks.TorchChecks`.
    """

    def arm() -> Callable[[], None]:
        from autograd_viz.nan.forward.checks import TorchChecks, TorchNanChecker

        checker = TorchNanChecker(TorchChecks(**settings))
        checker.__enter__()
        return lambda: checker.__exit__(None, None, None)

    with armed_on_this_thread(arm):
        try:
            yield
        except BaseException as exc:
            trim_traceback(exc)  # Note [A traceback as without us]
            raise
