"""Every choice a reader makes about one picture, as one value.

``autograd_viz.to_dot``, ``autograd_viz.animate``, ``autograd-viz dot`` and
``animate`` take the same choices (what to show: a neighbourhood, a level, what
is opened, folded chains, a node budget; how to label it: saved tensors,
gradient values, the legend, a highlighted path). They are written once, here,
and passed down as a :class:`ViewOptions`: the public functions spell them as
keywords, everything below takes the value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ViewOptions:
    """What a picture shows and how its nodes are labelled (see :func:`autograd_viz.to_dot`)."""

    around: int | str | None = None
    """Draw only what is near this: a node id, ``Name #id``, a node name, a parameter's
    name, a module path or a fold (a module is drawn whole)."""
    depth: int = 2
    """With :attr:`around`, how many edges away to go."""
    collapse: bool = False
    """Fold repeated chains that no module encloses into one box with a count."""
    max_nodes: int | None = None
    """Draw at most this many nodes, nearest the root; a notice counts the rest."""
    level: int | None = None
    """Open modules this deep (1: the outermost); by default the deepest level that keeps
    the picture within its box budget."""
    expand: tuple[str, ...] = ()
    """Modules (or folds, or nodes) to draw opened; ``"all"``: every node."""
    leaves: bool = False
    """Draw every fold as one box, without opening one representative call."""
    highlight: tuple[int, ...] = ()
    """Node ids along a path, drawn thick red with their modules open."""
    saved: bool = False
    """Draw each node's saved tensors."""
    values: bool = False
    """Write gradient summaries on nodes and edges."""
    legend: bool = True
    """Draw the legend of statuses."""

    def __post_init__(self) -> None:
        # Callers pass lists and single names; the value holds tuples (it is hashable and
        # nobody's list changes it later).
        expand: str | Sequence[str] = self.expand
        if isinstance(expand, str):
            object.__setattr__(self, "expand", (expand,))
        elif not isinstance(expand, tuple):
            object.__setattr__(self, "expand", tuple(expand))
        if not isinstance(self.highlight, tuple):
            object.__setattr__(self, "highlight", tuple(self.highlight))
