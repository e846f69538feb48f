"""What a picture draws, as plain values: boxes, frames, stacks, tensors, and their totals.

The view model's vocabulary, imported by every part of it and importing none:
a :class:`ModuleBox` (a closed call, a fold of calls, a folded chain), a
:class:`Cluster` (an open call, drawn as a frame), a :class:`Stack` (a fold
drawn as one of its calls), a :class:`TensorBox` (a forward tensor beside the
graph), and the :class:`BoxSummary` each says its nodes add up to, in one
:class:`BoxStatus`. :mod:`~autograd_viz.draw.model.graph_view` holds the nodes
and edges that carry them; the modules that make them
(:mod:`~autograd_viz.draw.model.totals`, :mod:`~autograd_viz.draw.model.stacks`,
:mod:`~autograd_viz.draw.model.module_picture`) import them from here.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from autograd_viz.trace.replay import NodeStatus
from autograd_viz.trace.summary import TensorSummary


class BoxStatus(enum.StrEnum):
    """Where the nodes inside a box stand, in one word."""

    NOT_STARTED = "not started"
    """No node inside has received a gradient (or the graph has not run)."""
    RUNNING = "running"
    """Some nodes have run or received gradients, others not yet."""
    DONE = "done"
    """Every node inside that runs has run."""
    FAILED = "failed"
    """A node inside failed, or holds a NaN or Inf gradient."""


@dataclass(frozen=True, slots=True)
class BoxSummary:
    """What the nodes inside a box or cluster add up to at one step."""

    nodes: int
    """How many nodes."""
    sequence_nrs: tuple[int, int]
    """Smallest and largest sequence number, leaves' ``AccumulateGrad`` (``UINT64_MAX``)
    left out; ``(UINT64_MAX, UINT64_MAX)`` when they are all there is."""
    topological_nrs: tuple[int, int]
    """Smallest and largest topological number."""
    remaining: int
    """Dependencies still to come, summed over the nodes."""
    dependencies: int
    """Dependencies, summed over the nodes."""
    inputs: int
    """Edges into the box from outside it."""
    waiting_inputs: int
    """Of those, how many have not delivered their gradient (pruned ones not counted)."""
    statuses: Mapping[str, int]
    """How many nodes are in each status (``"not run"`` before backward)."""
    non_finite: int
    """Nodes holding a NaN or Inf gradient."""
    status: BoxStatus
    """All of it in one word."""

    @property
    def node_status(self) -> NodeStatus | None:
        """The node status a box is coloured like: the most urgent among its nodes."""
        return drawn_status(self.statuses)


NOT_SUMMED = BoxSummary(
    nodes=0,
    sequence_nrs=(0, 0),
    topological_nrs=(0, 0),
    remaining=0,
    dependencies=0,
    inputs=0,
    waiting_inputs=0,
    statuses={},
    non_finite=0,
    status=BoxStatus.NOT_STARTED,
)
"""The summary of every box and cluster ``showing.apply`` makes with ``summed=False``: nothing
added up, for a view that says what its boxes hold in its own way (the TUI reads their
nodes' times from the trace)."""


def drawn_status(statuses: Mapping[str, int]) -> NodeStatus | None:
    """The one status nodes in ``statuses`` are drawn with together: the most urgent."""
    for status in (NodeStatus.FAILED, NodeStatus.RUNNING, NodeStatus.QUEUED, NodeStatus.PARTIAL):
        if statuses.get(status.value):
            return status
    counted = {s for s, n in statuses.items() if n}
    if not counted or counted == {"not run"}:
        return None
    if len(counted) == 1:
        return NodeStatus(counted.pop())
    if NodeStatus.DONE.value in counted and NodeStatus.WAITING.value in counted:
        return NodeStatus.PARTIAL
    if counted <= {NodeStatus.DONE.value, NodeStatus.PRUNED.value}:
        return NodeStatus.DONE
    return NodeStatus.WAITING


@dataclass(frozen=True, slots=True)
class TensorBox:
    """A forward tensor drawn beside the graph: a leaf, an output or a saved tensor."""

    key: str
    """Its name in the drawing."""
    kind: str
    """``"leaf"``, ``"output"`` or ``"saved"``."""
    node: str
    """Key of the node it hangs from."""
    title: str
    """What it is called: the tensor's name, ``output 0``, ``saved 1``."""
    summary: TensorSummary | None
    """The values drawn with ``values=True``: a leaf's ``.grad``, a saved tensor."""
    shape: tuple[int, ...]
    """The tensor's shape."""
    dtype: str
    """NumPy's name for its dtype."""
    why: str | None = None
    """A leaf that got no gradient (or zeros) in the call: why, and the line (Note [Leaves
    without gradient in a picture] in :mod:`autograd_viz.draw.model.no_gradient`)."""
    cut: str | None = None
    """A leaf off the graph: what its edge from the root says (``cut at model.py:28``)."""


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


@dataclass(frozen=True, slots=True)
class Stack:
    """What a stack's frame says: the fold it draws and where its calls stand."""

    group: int
    """The fold group (:attr:`FoldGroup.index`)."""
    name: str
    """The fold's name (``blocks.{0..11}``): typed back, it names the fold."""
    kind: str
    """Its calls' class name."""
    count: int
    """How many calls it stands for (the ``× 12``)."""
    drawn: str
    """The name of the call drawn inside."""
    statuses: tuple[tuple[BoxStatus, int], ...]
    """How many calls stand at each status, in the order of :class:`BoxStatus`."""
    summary: BoxSummary
    """What every node of every call adds up to at the step."""
    hidden: int
    """How many nodes the calls not drawn hold (each stands in for one drawn)."""
    shapes: bool = True
    """Whether its calls were found alike with their tensors' shapes."""


@dataclass(frozen=True, slots=True)
class Cluster:
    """An open module call, drawn around what it holds."""

    key: str
    """``c<scope>``."""
    scope: int
    """The call."""
    parent: str | None
    """The enclosing cluster's key, or ``None`` at the top."""
    name: str
    """:attr:`Scope.name`."""
    kind: str
    """The module's class name."""
    summary: BoxSummary
    """What every node inside it adds up to at the step."""
    stands_for: str = ""
    """For a call drawn open while its fold's other calls are a box: the fold it is one call
    of, ``blocks.{0..11} × 12`` (Note [A fold shows its inside once] in choosing.py)."""
    stack: Stack | None = None
    """For the call a stack draws: the stack, drawn around it (Note [A fold is drawn as a
    stack] in :mod:`~autograd_viz.draw.model.stacks`)."""
    parameters: tuple[str, ...] = ()
    """The parameters of the call itself that its label counts instead of drawing their
    nodes, by their names below it (Note [Parameters in a frame's label] in compact.py)."""
