"""What ``autograd-viz grads`` found: which parameters got no gradient and why, and the flow.

Plain data, the same for PyTorch and our engine: a :class:`CallGrads` per
backward call (its findings and its flow table), gathered into a
:class:`GradsReport` that merges a finding repeated call after call into one
line with its count, so a long run's report stays short and its memory bounded.

Note [Vanishing and exploding]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A module's gradient norm ``‖g‖`` is the norm of its own parameters' gradients
(not its children's) in one backward call; its ratio is ``‖g‖ / ‖w‖``, the
size of a plain SGD step of rate 1 beside the weights. In one call, a module
is flagged

* *vanishing* when ``‖g‖`` is below :data:`VANISHING` (10⁻⁴) times the largest
  ``‖g‖`` of the call's modules and its ratio below :data:`VANISHING` times the
  largest ratio, or its ratio below :data:`TINY_RATIO` (10⁻⁸): an optimizer
  step barely moves it while the others learn, the "my first layers learn
  nothing" of a deep sigmoid stack. Both, because a parameter of small norm
  gets a small gradient and may still move as much as any: a ConvNeXt's
  layer scale, initialized at 10⁻⁶, has ``‖g‖`` 10⁻⁴ of the head's and a
  ratio of 1.5, larger than the head's;
* *exploding* when ``‖g‖`` is not finite, or its ratio is above
  :data:`HUGE_RATIO` (10²): one step of a small learning rate would move the
  weights by more than their own size.

Vanishing is relative to the call's largest gradient, so that a model whose
loss is small everywhere is not flagged whole; exploding is absolute, because
gradients that decay geometrically with depth (the vanishing case) make every
relative measure call the last layers "exploding". Parameters of norm 0 (a
layer initialized at zero) have no ratio and are judged by ``‖g‖`` alone.
Under a ``GradScaler`` the gradients of a backward call are scaled: divide the
ratios by the scale.
"""

from __future__ import annotations

import linecache
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

FROZEN = "frozen"
"""``requires_grad`` is False: listed apart, often meant."""
NEVER_USED = "never used"
"""The module never ran, or ran and never read the parameter, in that forward."""
NO_GRAD = "used without grad"
"""Every use was under ``torch.no_grad()`` or ``inference_mode()``."""
CUT = "cut"
"""Its result was cut on the way to the loss (``.detach()``, ``.item()``, ...)."""
UNREACHED = "never reaches the loss"
"""Used with grad, but what it made was dropped before the loss."""
PRUNED = "pruned"
"""The call's ``inputs=`` (or ``grad()``) left it out: listed apart, meant."""
NO_GRADIENT = "no gradient from its node"
"""Reached, but the backward node before it returned no gradient for it."""
NOT_ON_GRAPH = "not on the graph"
"""Our engine: off the call's graph and under no cut (Note [Leaves on our engine])."""
ZEROS = "exact zeros"
"""It got a gradient, and every element of it is exactly zero."""

MISSING = (NEVER_USED, NO_GRAD, CUT, UNREACHED, NO_GRADIENT, NOT_ON_GRAPH)
"""The reasons of a trainable parameter that got no gradient (the exit status 1)."""

VANISHING = 1e-4
"""A module is vanishing below this times the call's largest module gradient norm."""
TINY_RATIO = 1e-8
"""A module is vanishing with a gradient to parameter norm ratio below this."""
HUGE_RATIO = 1e2
"""A module is exploding with a gradient to parameter norm ratio above this."""


@dataclass(frozen=True)
class Where:
    """A line of the program."""

    file: str
    line: int
    function: str

    @property
    def code(self) -> str:
        """The line's text, stripped (empty when the file cannot be read)."""
        return linecache.getline(self.file, self.line).strip()

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Finding:
    """One parameter that got no gradient (or only zeros) in a backward call, and why."""

    parameter: str
    """Its name as ``named_parameters()`` says it (``head.weight``), or the leaf's name."""
    module: str | None
    """The module that holds it (``head``), if any."""
    shape: tuple[int, ...]
    reason: str
    """One of :data:`FROZEN`, :data:`NEVER_USED`, :data:`NO_GRAD`, :data:`CUT`,
    :data:`UNREACHED`, :data:`PRUNED`, :data:`NO_GRADIENT`, :data:`ZEROS`."""
    why: str
    """The reason in words, with what the program did (``cut by .detach()``)."""
    where: Where | None = None
    """The line that explains it (the use, the cut, the node), if one does."""

    @property
    def missing(self) -> bool:
        """A trainable parameter that got no gradient (not frozen, pruned or zeros)."""
        return self.reason in MISSING


@dataclass(frozen=True)
class FlowRow:
    """One module's gradient in one backward call (Note [Vanishing and exploding])."""

    module: str
    grad_norm: float
    """The norm of its own parameters' gradients in this call."""
    param_norm: float
    """The norm of those parameters."""
    parameters: int
    """How many of its parameters got a gradient."""
    flag: str | None = None
    """``"vanishing"``, ``"exploding"`` or ``None``."""

    @property
    def ratio(self) -> float:
        """``grad_norm / param_norm`` (infinite for parameters of norm 0 with a gradient)."""
        if self.param_norm == 0:
            return math.inf if self.grad_norm else 0.0
        return self.grad_norm / self.param_norm


def flag_flow(rows: Iterable[FlowRow]) -> list[FlowRow]:
    """``rows`` with their flags set (Note [Vanishing and exploding])."""
    rows = list(rows)
    finite = [r.grad_norm for r in rows if math.isfinite(r.grad_norm)]
    largest = max(finite) if len(finite) >= 2 else None
    ratios = [r.ratio for r in rows if r.param_norm > 0 and math.isfinite(r.ratio)]
    largest_ratio = max(ratios) if ratios else 0.0
    flagged = []
    for row in rows:
        g, weighed = row.grad_norm, row.param_norm > 0
        flag = None
        if not math.isfinite(g) or (weighed and row.ratio > HUGE_RATIO):
            flag = "exploding"
        elif (weighed and row.ratio < TINY_RATIO) or (
            largest
            and g < VANISHING * largest
            and not (weighed and row.ratio >= VANISHING * largest_ratio)
        ):
            flag = "vanishing"
        flagged.append(FlowRow(row.module, row.grad_norm, row.param_norm, row.parameters, flag))
    return flagged


@dataclass
class CallGrads:
    """What one backward call gave the parameters of the modules its forward ran."""

    index: int
    """The call's number in the watched run (0 first), as ``record`` numbers calls."""
    kind: str
    """``"backward"`` (``.backward()``, ``torch.autograd.backward``) or ``"grad"``."""
    where: Where | None
    """The line of the call."""
    findings: list[Finding] = field(default_factory=list)
    """Every parameter that got no gradient or only zeros, frozen and pruned ones included."""
    flow: list[FlowRow] = field(default_factory=list)
    """Each module's gradient norm in this call, flagged."""
    parameters: int = 0
    """How many parameters the call's modules hold (all of them looked at)."""
    flow_left_out: int = 0
    """Parameters left out of :attr:`flow`: what nested backward calls gave them cannot be
    told apart (added to a ``.grad`` they had, or recorded as several gradients: Note [Nested
    backward calls] in ``torch_calls.py``)."""


@dataclass(frozen=True)
class Repeated:
    """A finding, with the calls it was made in."""

    finding: Finding
    first_call: int
    calls: int
    """In how many calls it was made."""


@dataclass
class GradsReport:
    """Every call's findings merged, and the flow of every call (bounded, see below).

    Args:
        keep_flow: how many calls' flow tables are kept for ``--plot`` (the
            first ones; later calls are still read for findings).
    """

    keep_flow: int = 10_000
    calls: int = 0
    """Backward calls read."""
    parameters: int = 0
    """The most parameters a call looked at."""
    merged: dict[tuple[object, ...], Repeated] = field(default_factory=dict)
    flows: list[tuple[int, list[FlowRow]]] = field(default_factory=list)
    """``(call, flow table)`` of the first :attr:`keep_flow` calls that had one."""
    last: CallGrads | None = None
    """The last call read, whole."""
    rank: int | None = None
    """The rank of the process (under ``torch.distributed``), if any."""
    from_trace: bool = False
    """Read from a recorded trace, which says less (:mod:`autograd_viz.grads.trace_report`)."""

    def add(self, call: CallGrads) -> None:
        """Read one more call."""
        self.calls += 1
        self.parameters = max(self.parameters, call.parameters)
        for finding in call.findings:
            key = (finding.parameter, finding.reason, finding.why, finding.where)
            seen = self.merged.get(key)
            if seen is None:
                self.merged[key] = Repeated(finding, call.index, 1)
            else:
                self.merged[key] = Repeated(finding, seen.first_call, seen.calls + 1)
        if call.flow and len(self.flows) < self.keep_flow:
            self.flows.append((call.index, call.flow))
        self.last = call

    def findings(self, *reasons: str) -> list[Repeated]:
        """The merged findings with one of ``reasons`` (all when none is given), in order."""
        return [r for r in self.merged.values() if not reasons or r.finding.reason in reasons]

    @property
    def missing(self) -> list[Repeated]:
        """Trainable parameters that got no gradient in some call."""
        return self.findings(*MISSING)

    @property
    def found(self) -> bool:
        """Whether a trainable parameter got no gradient in some call (exit status 1)."""
        return bool(self.missing)

    def flagged(self) -> list[tuple[int, FlowRow]]:
        """Every flagged module of every kept call, ``(call, row)``."""
        return [(call, row) for call, rows in self.flows for row in rows if row.flag]
