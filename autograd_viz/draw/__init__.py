"""The Graphviz family: the graph of any step as DOT, SVG, PNG, frames and animations.

:mod:`~autograd_viz.draw.graph_view` turns a trace's state at a step into a
drawable view; :mod:`~autograd_viz.draw.select` cuts big graphs down to a
readable part; :mod:`~autograd_viz.draw.dot` writes DOT and renders it;
:mod:`~autograd_viz.draw.frames` and :mod:`~autograd_viz.draw.animate` draw
one frame per step.
"""

from __future__ import annotations

from autograd_viz.draw.dot import to_dot

__all__ = ["to_dot"]
