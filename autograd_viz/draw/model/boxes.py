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

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from autograd_viz.draw.model.totals import BoxSummary

if TYPE_CHECKING:
    from autograd_viz.draw.model.graph_view import ViewNode


@dataclass(frozen=True, slots=True)
class ModuleBox:
    """A closed module call, a fold of sibling calls, or a folded chain, drawn as one node."""

    key: str
    """Its key in the drawing: ``m<scope>`` for a call, ``f<group>`` for a fold of calls,
    its first node's key for a chain."""
    name: str
    """What it is called (:attr:`Scope.name`, :attr:`FoldGroup.name`, or a chain's
    :func:`~autograd_viz.draw.model.chains.chain_name`): typed back, it names what it holds."""
    kind: str
    """The module's class name (``""`` if the trace does not say, and for a chain)."""
    count: int
    """How many repetitions it stands for: 1, or the fold's ``×count``."""
    scopes: tuple[int, ...]
    """The calls it stands for (none for a chain)."""
    group: int | None
    """The fold group, for a fold of calls."""
    members: tuple[str, ...]
    """Keys of the nodes inside it."""
    summary: BoxSummary
    """What they add up to at the step."""
    pattern: tuple[str, ...] = ()
    """For a chain: the node names of one repetition, in chain order, each with its side
    inputs (``"AddBackward0 +AccumulateGrad"``); empty for module calls."""
    shapes: bool = True
    """For a fold of calls: whether they were found alike with the shapes of their tensors;
    ``False`` where the trace did not record them (by their ops only)."""
    parameters: int = 0
    """How many of its nodes take a leaf tensor in (an ``AccumulateGrad``: a parameter, or an
    input that requires grad), all its repetitions together: a closed box draws them as
    one line, not as nodes."""
    joined: tuple[tuple[str, str], ...] = ()
    """The calls drawn in this call's box beside it, each as its name below their parent and
    its class (Note [A small call joins its neighbour] in :mod:`~autograd_viz.draw.model.joins`)."""


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


__all__ = ["ModuleBox", "box_node"]
