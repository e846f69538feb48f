"""Where events come from.

Our engine emits its events through :mod:`engine.events`;
:mod:`~autograd_viz.sources.engine` reads its graph when a graph task starts.
:mod:`~autograd_viz.trace.recorder` turns any source's events into a
:class:`~autograd_viz.trace.Trace`. (A user's script is run by
:mod:`autograd_viz.launch`.)
"""

from __future__ import annotations
