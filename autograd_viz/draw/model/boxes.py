"""A box: one drawn node that stands for several nodes, with a name that reads back.

Every fold of every view is one of these: a closed module call, a fold of
alike sibling calls (``transformer.h.{0..11}`` ×12), and a repeated chain
(``(TanhBackward0, AddBackward0, MmBackward0) #93..#6`` ×30) that
:func:`autograd_viz.draw.model.chains.collapse` folds where no module encloses it.
A box says what it is called, how many repetitions it stands for, what it
holds and what that adds up to at the step; its name, typed back into
``--around``, ``--expand`` or the TUI's ``/``, names what it holds
(:mod:`autograd_viz.draw.model.targets`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autograd_viz.draw.model.graph_view import ViewNode
from autograd_viz.draw.model.drawn import ModuleBox


def box_node(first: ViewNode, box: ModuleBox) -> ViewNode:
    """The drawn node standing for ``box``: its first node's device and graph task, the box's key.

    What belongs to one node (its slots, outputs, error, thread) is cleared;
    the status and the dependencies still to come are the box's summary's.
    """
    return replace(
        first,
        key=box.key,
        status=box.summary.node_status,
        remaining=box.summary.remaining,
        slots=(),
        outputs=None,
        captured=False,
        error=None,
        thread=None,
        released=False,
        box=box,
    )


__all__ = ["box_node"]
