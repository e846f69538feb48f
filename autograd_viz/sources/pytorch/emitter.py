"""Emitting one watched graph task's events: one by one, or in batches for recorders."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from autograd_viz.sources.batches import batch_max_values, hand_over
from autograd_viz.sources.pytorch.held import hold_or_none
from autograd_viz.sources.pytorch.node import TorchNode
from autograd_viz.sources.pytorch.summary import resolved_summary, summaries_of, summary_of
from engine.events import HUB, thread_name


class Emitter:
    """Emits one graph task's events: one by one, or as rows in batches (Note [Batched events]).

    Rows are built while the listeners subscribed when the graph task started
    all take batches; they go to those listeners (the ones still subscribed)
    and to no other. When the listeners change, the rows built so far are
    handed over and the rest of the graph task is emitted one by one.

    Args:
        graph_task: the graph task's id.
    """

    __slots__ = (
        "clock",
        "data",
        "graph_task",
        "keep_all",
        "keep_leaves",
        "listeners",
        "max_values",
        "rows",
        "thread",
    )

    def __init__(self, graph_task: int) -> None:
        self.graph_task = graph_task
        self.listeners = HUB.listeners
        """The listeners rows are built for."""
        self.max_values = batch_max_values(self.listeners)
        """The ``max_values`` rows are built with; ``None`` when emitting one by one."""
        values = getattr(self.listeners[0], "values", "all") if self.listeners else "all"
        if self.max_values is None:
            values = "all"  # one by one, each listener keeps what its tier keeps
        self.keep_leaves: bool = values != "none"
        """Summarize leaves' gradients (the recorders' tier, Note [Values tiers])."""
        self.keep_all: bool = values not in ("none", "leaves")
        """Summarize every gradient."""
        self.rows: list[tuple[Any, ...]] = []
        """The events built, as rows of their fields but the data (Note [Rows apart from their
        data])."""
        self.data: list[dict[str, Any]] = []
        """Each row's data."""
        self.thread = thread_name()
        """Where every node of the graph task runs (Note [Device threads] in ``chokepoint.py``)."""
        self.clock: Callable[[], int] = _clock
        """The rows' time: now, or for derived calls the call's end (``call_level.py``)."""

    def __call__(self, kind: str, node: TorchNode | None, data: dict[str, Any]) -> None:
        """Emit one event of the graph task (nothing when nobody listens)."""
        hub = HUB
        if not hub.active:
            return
        if self.max_values is not None:
            if hub.listeners is self.listeners:
                self.row(kind, node, data)
                return
            self.flush()  # the listeners changed: one by one from now on
            self.max_values = None
        hub.emit_data(kind, "cpu", self.graph_task, node, data)

    def building(self) -> bool:
        """Whether rows are built now, for the listeners subscribed now (:meth:`row` may add)."""
        return self.max_values is not None and HUB.active and HUB.listeners is self.listeners

    def row(
        self, kind: str, node: TorchNode | None, data: dict[str, Any], t_ns: int | None = None
    ) -> None:
        """Add one event as a row, at ``t_ns`` or now; only while :meth:`building`.

        Called without the checks for the derived events a node's outputs make (four
        or five a node), checked once for them all.
        """
        # A row: Event's fields in its order but the data, which goes beside it
        # (Note [Rows of events] in engine/events.py; Note [Rows apart from their data]).
        when = self.clock() if t_ns is None else t_ns
        if node is None:
            row: tuple[Any, ...] = (
                kind, next(HUB.seq), when, self.thread, "cpu", self.graph_task,
                None, None, None, None,
            )  # fmt: skip
        else:
            row = (
                kind, next(HUB.seq), when, self.thread, "cpu", self.graph_task,
                node._id, node._name, node.sequence_nr, node.topological_nr,
            )  # fmt: skip
        self.rows.append(row)
        self.data.append(data)

    def at(self, kind: str, node: TorchNode, data: dict[str, Any], t_ns: int) -> None:
        """Emit one event of the graph task that happened at ``t_ns`` (in rows; else now).

        For a node start its post hook sees (Note [One hook per node] in ``watch.py``).
        """
        if self.building():
            self.row(kind, node, data, t_ns)
            return
        self(kind, node, data)

    def flush(self) -> None:
        """Hand the rows built so far to the listeners they were built for."""
        rows, data = self.rows, self.data
        if rows:
            self.rows, self.data = [], []
            hand_over(rows, self.listeners, data)

    def summary(self, tensor: torch.Tensor | None, hold: bool = False) -> Any:
        """A summary for an event: lazy one by one, resolved in rows.

        ``hold``: in rows, the tensor may be held until the call ends, nothing
        changing it meanwhile (Note [Held gradients] in ``held.py``).
        """
        if tensor is None:
            return None
        max_values = self.max_values
        if max_values is None:
            return summary_of(tensor)
        return resolved_summary(tensor, max_values, hold)

    def keeps(self, node: TorchNode) -> bool:
        """Whether ``node``'s gradients are summarized at the recorders' tier."""
        return self.keep_all or (self.keep_leaves and node.variable is not None)

    def summaries_if(self, keep: bool, tensors: Any, hold: tuple[Any, ...] = ()) -> Any:
        """:meth:`summaries` if ``keep``, else ``None`` for each tensor."""
        if keep:
            return self.summaries(tensors, hold)
        return nones(len(tensors))

    def summaries(self, tensors: Any, hold: tuple[Any, ...] = ()) -> Any:
        """:meth:`summary` of each tensor: a list one by one, a tuple in rows.

        Args:
            tensors: the tensors (``None`` for an undefined gradient).
            hold: in rows, for each tensor the graph's description of it if it
                may be held until the call ends, else ``None``; empty: none
                may (Note [Held gradients] in ``held.py``).
        """
        max_values = self.max_values
        if max_values is None:
            return summaries_of(tensors)
        if not hold:
            return tuple([None if t is None else resolved_summary(t, max_values) for t in tensors])
        found: list[Any] = []
        metas = len(hold)
        for i, tensor in enumerate(tensors):
            summary: Any = None
            if tensor is not None:
                meta = hold[i] if i < metas else None
                if meta is not None:
                    summary = hold_or_none(tensor, meta, max_values)
                if summary is None:
                    summary = resolved_summary(tensor, max_values)
            found.append(summary)
        return tuple(found)


_clock = time.perf_counter_ns

# Note [Objects a recorded call keeps]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Every container a recorded call leaves alive (until its trace goes) is
# tracked by Python's cyclic collector, and each costs about a microsecond
# of collections over a run: the trace's objects survive the young
# collections, are promoted, and make the next full collection (of every
# object of the process) come sooner ("The collector's share" in
# docs/performance.md). A tuple or dict that holds only plain values leaves
# the collector once a collection has seen it, and a dict made holding only
# such values is never tracked. So the plain tuples a call would make again
# and again are shared: the ``None`` of each gradient of a tier that keeps no
# values (:func:`nones`), the input slots of a node (``_input_slots`` in
# graph.py); their event data dicts are then not tracked at all.

# Note [Rows apart from their data]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A row that held its data dict would stay tracked until the call ends: CPython
# stops following a tuple of plain values at the first collection that sees it,
# but never one that holds a dict, tracked or not. Rows are alive for the whole
# call, so a young collection during it moved them to the oldest generation
# (more than 800 per collection on a GRUCell ×20, a quarter of all it moved).
# So the emitter keeps each row's fields and its data in two lists, the
# recorder takes them so (``take_events(rows, data)``, Note [Batched events])
# and the trace keeps them so until read (Note [Rows until read]): no tuple
# holds a dict, and data dicts of plain values are never tracked.

_NONES = tuple((None,) * n for n in range(65))


def nones(n: int) -> tuple[None, ...]:
    """``(None,) * n``, shared (Note [Objects a recorded call keeps])."""
    return _NONES[n] if n < 65 else (None,) * n
