"""Gradient health: why a parameter got no gradient, and how gradients flow per module.

:func:`~autograd_viz.grads.watch.watch_grads` watches a block of code (PyTorch
or our engine) and after each backward call reports every parameter of the
modules the forward ran that got no gradient, or one of exact zeros, with the
reason and the program's line, and each module's gradient norm
(:mod:`autograd_viz.grads.report`). ``autograd-viz grads SCRIPT`` runs a
script under it.
"""

from __future__ import annotations

from autograd_viz.grads.report import CallGrads, Finding, FlowRow, GradsReport, Where
from autograd_viz.grads.watch import GradsWatch, watch_grads

__all__ = ["CallGrads", "Finding", "FlowRow", "GradsReport", "GradsWatch", "Where", "watch_grads"]
