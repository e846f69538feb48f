"""The picture functions of the public API, for tensors as well as traces.

:func:`to_dot` draws what :func:`autograd_viz.draw.render.dot.to_dot` draws (a
trace at any step, an execution state) and also tensors whose graph has not
run yet, ours or PyTorch's: their source reads the graph
(:func:`autograd_viz.sources.engine.unrun_graph`,
:func:`autograd_viz.sources.pytorch.graph.unrun_graph`) as a trace type, which
the view model draws like any other. It sits above both rooms, so that the
views read trace types only.
"""

from __future__ import annotations

import functools
import sys
from types import FrameType
from typing import Any

import graphviz

from autograd_viz.draw.render import dot

__all__ = ["graph_of", "to_dot"]


@functools.wraps(dot.to_dot)
def to_dot(target: Any, step: int | None = None, **options: Any) -> graphviz.Digraph:
    return dot.to_dot(graph_of(target, sys._getframe(1)), step, **options)


def graph_of(target: Any, frame: FrameType | None = None) -> Any:
    """``target`` as a view reads it: tensors (ours or PyTorch's, one or a sequence) as
    their :class:`~autograd_viz.trace.records.UnrunGraph`, anything else unchanged.

    ``frame`` is where PyTorch's parameters are named from (the caller's).
    """
    from engine import Tensor

    # PyTorch is looked for only when the program imported it (Note [Arming without
    # importing torch] in autograd_viz/sources/arming.py).
    torch = sys.modules.get("torch")
    torch_tensor = getattr(torch, "Tensor", None) if torch is not None else None
    kinds = tuple(k for k in (Tensor, torch_tensor) if k is not None)
    tensors = [target] if isinstance(target, kinds) else target
    if not (isinstance(tensors, list | tuple) and tensors):
        return target
    for kind in kinds:
        if all(isinstance(t, kind) for t in tensors):
            if kind is Tensor:
                from autograd_viz.sources.engine import unrun_graph

                return unrun_graph(tensors)
            from autograd_viz.sources.pytorch.graph import unrun_graph as torch_graph

            return torch_graph(tensors, frame if frame is not None else sys._getframe(1))
    return target
