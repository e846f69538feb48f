"""The record of one PyTorch node in a graph task, and the id it keeps across backward calls.

:class:`TorchNode` gives a node of PyTorch's backward graph what the event hub
and the scheduler read (``_id``, ``name()``, numbers, edges); the graph walk
in ``graph.py`` makes them and fills them in. It depends on no module-call
bookkeeping, so that the modules that read nodes can import it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from autograd_viz.sources.pytorch.hooks import UserHook
from engine.graph import new_node_id

_ID_KEY = "autograd_viz.node_id"

# Note [Node ids]
# ~~~~~~~~~~~~~~~
# A PyTorch node is always the same Python object, but it cannot be weakly
# referenced and id() is reused after it is freed. Its id is therefore kept
# in the node's own ``metadata`` dict (PyTorch's place for per-node user
# data), which lives and dies with the node: the same node keeps its id over
# several backward calls (retain_graph) and no table grows. The ids come from
# our engine's counter, so a trace of a program that uses both engines never
# gives two nodes one id.


def node_id(fn: Any) -> int:
    """The process-unique id of a PyTorch node (Note [Node ids])."""
    metadata = fn.metadata
    nid = metadata.get(_ID_KEY)
    if nid is None:
        nid = metadata[_ID_KEY] = new_node_id()
    return int(nid)


class TorchEdge(NamedTuple):
    """Where a gradient goes: input ``input_nr`` of ``function`` (the scheduler's edge)."""

    function: TorchNode
    input_nr: int


class TorchNode:
    """A PyTorch node as the event hub reads it (``_id``, ``name()``, numbers) plus its edges.

    One per node and graph task; ``fn`` is ``None`` for the ``GraphRoot`` of a
    call with several roots, which PyTorch makes in C++ and never shows.
    """

    __slots__ = (
        "_id",
        "_name",
        "_next_edges",
        "calls",
        "device",
        "fn",
        "holds",
        "holds_out",
        "hooks",
        "inputs",
        "kind",
        "leaf_aliases",
        "leaf_name",
        "num_inputs",
        "sequence_nr",
        "topological_nr",
        "variable",
        "watch",
    )

    def __init__(self, fn: Any, name: str, sequence_nr: int, device: str) -> None:
        self.fn = fn
        """The PyTorch node (``None`` for a ``GraphRoot``)."""
        self.kind: type = type(fn)
        """The PyTorch node's class (a plan made again for a graph of the same shape
        checks it: Note [Plans made again] in ``graph.py``)."""
        self._id = new_node_id() if fn is None else node_id(fn)
        self._name = name
        self.sequence_nr = sequence_nr
        """PyTorch's ``_sequence_nr()``; 2**64-1 for ``AccumulateGrad``."""
        self.topological_nr = 0
        """The longest path to a leaf, computed by :func:`plan_graph_task`."""
        self.device = device
        """The device of its first input slot: where PyTorch runs it."""
        self._next_edges: list[TorchEdge | None] = []
        """Per output: the node it feeds and that node's input slot, or ``None``."""
        self.num_inputs = 0
        """How many input slots its buffer has."""
        self.inputs: tuple[tuple[tuple[int, ...], str, str], ...] | None = None
        """``(shape, dtype, device)`` of each input slot, as the graph walk read them."""
        self.variable: torch.Tensor | None = None
        """For ``AccumulateGrad``: the leaf."""
        self.leaf_name: str | None = None
        """For ``AccumulateGrad``: the leaf's name."""
        self.leaf_aliases: tuple[str, ...] = ()
        """For ``AccumulateGrad`` of a parameter modules share: its other names."""
        self.hooks: tuple[UserHook, ...] = ()
        """The user's hooks on it (Note [Seeing the user's hooks] in ``hooks.py``)."""
        # Typed loosely: ``Calls`` lives in modules.py, which imports this module.
        self.calls: tuple[Any, ...] | None = ()
        """The module calls that made it (``Calls`` of modules.py), outermost first; ``None``
        when nobody followed them (:func:`~autograd_viz.sources.pytorch.module_calls.calls_of`)."""
        self.holds: tuple[Any, ...] | None = None
        """Per input slot, how a gradient there may be held until the call ends (empty:
        none may); ``None`` until asked (Note [Held gradients] in ``held.py``)."""
        self.holds_out: tuple[Any, ...] | None = None
        """The same per output; ``None`` until asked."""
        self.watch: Any = None
        """The watch whose post hook this node is while its call runs."""

    def __call__(self, outputs: tuple[Any, ...], inputs: tuple[Any, ...]) -> None:
        self.watch.ran(self, outputs, inputs)

    @property
    def next_edges(self) -> list[TorchEdge | None]:
        """Per output: the edge to the node it feeds, or ``None``."""
        return self._next_edges

    def name(self) -> str:
        """``MulBackward0``, ``AccumulateGrad``, ... (read by the event hub)."""
        return self._name

    def __repr__(self) -> str:
        return f"<TorchNode {self._id} {self._name}>"
