"""The PyTorch bridge: PyTorch's own backward, as a source of our engine's events.

Armed with :func:`watch_torch`, every ``Tensor.backward``,
``torch.autograd.backward`` and ``torch.autograd.grad`` call made while
somebody listens to :data:`engine.events.HUB` becomes a graph task whose
events have the kinds and data fields our engine's have, so
``autograd_viz.record()``, replay and the views work on an unmodified
PyTorch program. What PyTorch shows through hooks is observed; what it does
unseen between two nodes is derived by replaying its bookkeeping, marked
``"derived": True`` and checked against what is observed next (a
``derived_mismatch`` event and a :class:`DerivedMismatchWarning` when PyTorch
disagrees).

Example:
    >>> import autograd_viz
    >>> from autograd_viz.sources.pytorch import watch_torch
    >>> with watch_torch(), autograd_viz.record() as trace:
    ...     loss.backward()

The modules, in the order a backward call meets them:

- :mod:`~autograd_viz.sources.pytorch.chokepoint`: :func:`watch_torch` and the
  patched chokepoint, which turns a call into a graph task;
- :mod:`~autograd_viz.sources.pytorch.graph`: the graph walked from the
  roots, with PyTorch's numbers (``topological_nr``, dependencies, pruning),
  and its snapshot for a trace;
- :mod:`~autograd_viz.sources.pytorch.saved`: the snapshot's saved tensors,
  read without running a saved-tensors hook (a checkpoint never recomputes);
- :mod:`~autograd_viz.sources.pytorch.leaf_names`: leaves named as the user knows
  them (:func:`name`, a module's qualified parameter names, the shape);
- :mod:`~autograd_viz.sources.pytorch.watch`: the hooks and the observed
  events of one graph task;
- :mod:`~autograd_viz.sources.pytorch.bookkeeping`: the derived events and
  their checks;
- :mod:`~autograd_viz.sources.pytorch.summary`: tensor summaries that hold no
  gradient.

Only this package imports torch; importing it without PyTorch installed raises
PyTorch's own ImportError.
"""

from __future__ import annotations

from autograd_viz.sources.pytorch.bookkeeping import (
    DERIVED_MISMATCH,
    DerivedMismatchWarning,
)
from autograd_viz.sources.pytorch.chokepoint import TorchWatch, watch_torch
from autograd_viz.sources.pytorch.graph import ACCUMULATE_GRAD, GRAPH_ROOT
from autograd_viz.sources.pytorch.leaf_names import name
from autograd_viz.sources.pytorch.node import node_id

__all__ = [
    "ACCUMULATE_GRAD",
    "DERIVED_MISMATCH",
    "GRAPH_ROOT",
    "DerivedMismatchWarning",
    "TorchWatch",
    "name",
    "node_id",
    "watch_torch",
]
