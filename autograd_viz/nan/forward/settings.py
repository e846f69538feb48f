"""What the forward NaN checks check: the settings every part of them is given.

The parts of the checks (births, ops, backward, compiled regions) each receive these
settings and the callbacks they need from the checker
(:class:`~autograd_viz.nan.forward.checks.TorchNanChecker`), never the checker
itself: arrows point one way, from the checker down to its parts and from every part
down to this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TorchChecks:
    """What :class:`TorchNanChecker` checks and what it does with a finding."""

    check_nan: bool = True
    """Flag NaN values."""
    check_inf: bool = True
    """Flag +Inf and -Inf values (intentional ``-inf`` excepted)."""
    forward: bool = True
    """Check every aten op's outputs, not only the backward nodes' outputs."""
    first: bool = False
    """Raise :class:`NonFiniteError` at the first finding instead of collecting them all: a
    forward birth where its values first reach something (Note [Stopping where a value
    reaches something] in ``births.py``)."""
    ignore: frozenset[str] = field(default_factory=frozenset)
    """Ops whose non-finite outputs are meant: ``masked_fill``, ``aten.log.default``, ..."""
    max_values: int = 16
    """Tensors up to this many elements keep their values in the events' summaries."""
    eager_compiled: bool = False
    """Run ``torch.compile``d code eagerly, so that the ops inside are checked one by one
    (results may then differ in the last bits; Note [Compiled regions] in
    ``sources/pytorch/compiled.py``)."""


__all__ = ["TorchChecks"]
