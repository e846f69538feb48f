"""Pictures of a backward pass: what to show (:mod:`.model`), and how to draw it (:mod:`.render`).

:mod:`autograd_viz.draw.model` decides what a picture shows at one step of a
trace: the graph as a :class:`~autograd_viz.draw.model.graph_view.GraphView`,
the model's module calls as a tree with folds, which calls are open, what a
name typed back resolves to, and what a closed box adds up to; one
:class:`~autograd_viz.draw.model.options.ViewOptions` carries every choice.
It reads trace types only. :mod:`autograd_viz.draw.render` draws that choice:
DOT and SVG through Graphviz, frames, the HTML animation page, and the plain
words a step is described in. ``model`` never imports ``render``.
"""

from __future__ import annotations

from autograd_viz.draw.render.dot import save, to_dot

__all__ = ["save", "to_dot"]
