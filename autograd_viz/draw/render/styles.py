"""How the Graphviz drawings look: node colours by status, borders, edge and tensor colours.

Shared by :mod:`autograd_viz.draw.render.dot` (nodes, edges, the legend) and
:mod:`autograd_viz.draw.render.dot_clusters` (module boxes and clusters).
"""

from __future__ import annotations

from dataclasses import dataclass

from autograd_viz.trace.replay import NodeStatus

FONT = "Helvetica"
BORDER = "#374151"


@dataclass(frozen=True, slots=True)
class Style:
    """How one node status is drawn."""

    fill: str
    """Fill colour."""
    border: str = BORDER
    """Border colour."""
    penwidth: float = 1.0
    """Border width."""
    dashed: bool = False
    """Dashed border."""
    meaning: str = ""
    """What the legend says."""


STATUS_STYLES: dict[str, Style] = {
    "not run": Style("#ffffff", meaning="not run yet (before backward)"),
    NodeStatus.WAITING: Style("#ffffff", meaning="waiting: no gradient yet"),
    NodeStatus.PARTIAL: Style("#fef08a", meaning="partially filled: some gradients arrived"),
    NodeStatus.QUEUED: Style("#93c5fd", meaning="queued: every dependency arrived"),
    NodeStatus.RUNNING: Style("#fb923c", "#9a3412", 2.5, meaning="running"),
    NodeStatus.DONE: Style("#86efac", meaning="done"),
    NodeStatus.PRUNED: Style("#f3f4f6", "#9ca3af", dashed=True, meaning="pruned by exec_info"),
    NodeStatus.FAILED: Style("#fca5a5", "#b91c1c", 2.5, meaning="failed"),
}
"""Node colours by status (``"not run"`` is a graph drawn before any backward call)."""

CAPTURED_BORDER = "#1d4ed8"
PATH_COLOR = "#b91c1c"
"""Nodes and edges of a highlighted path (``to_dot(highlight=...)``)."""
PATH_NOTICE = "thick red: the path from the loss to the first NaN or Inf"

NON_FINITE = Style("#f0abfc", "#dc2626", 4.0, meaning="NaN or Inf in a gradient")
LEAF_FILL = "lightblue"
OUTPUT_FILL = "darkolivegreen1"
SAVED_FILL = "orange"
DELIVERED = "#111827"
PENDING = "#6b7280"
PRUNED_EDGE = "#9ca3af"
REENTRANT = "#7c3aed"
NO_GRADIENT = Style(
    "#fee2e2", "#b91c1c", 2.0, dashed=True, meaning="leaf that got no gradient (its tooltip: why)"
)
"""A leaf that got no gradient or only zeros (Note [Leaves without gradient in a picture])."""
CUT_EDGE = "#b91c1c"
"""The dashed edge from the root to parameters off the graph, labelled with the cut's line."""


__all__ = [
    "BORDER",
    "CAPTURED_BORDER",
    "CUT_EDGE",
    "DELIVERED",
    "FONT",
    "LEAF_FILL",
    "NON_FINITE",
    "NO_GRADIENT",
    "OUTPUT_FILL",
    "PATH_COLOR",
    "PATH_NOTICE",
    "PENDING",
    "PRUNED_EDGE",
    "REENTRANT",
    "SAVED_FILL",
    "STATUS_STYLES",
    "Style",
]
