"""One backward call's graph and what each node got, on either engine.

Both engines' nodes read alike (``next_functions``, ``name()``,
``register_hook(fn(grad_inputs, grad_outputs))``, an ``AccumulateGrad``'s
``variable``), so the walk, the hooks and the search for where a gradient
became zeros are written once; :class:`Stats` says how to read a gradient on
each (Note [Watching a backward call] in :mod:`autograd_viz.grads.torch_calls`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from autograd_viz.grads.report import (
    FROZEN,
    NO_GRADIENT,
    PRUNED,
    ZEROS,
    FlowRow,
    Where,
    flag_flow,
)


@dataclass(frozen=True)
class Stats:
    """How one engine's gradients and nodes are read."""

    root_node: Callable[[Any], Any]
    """The node a root tensor's gradient enters (``None``: it takes none)."""
    nonzero: Callable[[Any], Any]
    """A flag (read with ``bool`` when the call ends) that a gradient holds a non-zero."""
    squared_norm: Callable[[Any], Any]
    """A gradient's squared norm (read with ``float`` when the call ends), or ``None``."""
    quiet: Callable[[], AbstractContextManager[Any]]
    """A block in which reading a gradient records nothing (``no_grad``)."""
    where_made: Callable[[Any], Where | None]
    """The program's line that made a node, if known."""
    module_made: Callable[[Any], str | None]
    """The module (or scope) a node was made in, if known."""


class CallPlan:
    """One backward call: its graph from the roots, and what each node got.

    Args:
        kind: ``"backward"`` or ``"grad"``.
        roots: the tensors the call differentiates.
        inputs: its ``inputs=`` (``grad()``'s inputs), or ``None``.
        stats: how this engine's gradients are read.
    """

    def __init__(self, kind: str, roots: list[Any], inputs: list[Any] | None, stats: Stats) -> None:
        self.kind = kind
        self.roots = roots
        self.inputs = inputs
        self.stats = stats
        self.nodes: list[Any] = []
        self.index: dict[int, int] = {}
        self.parents: list[list[tuple[int, int]]] = []
        self.leaves: dict[int, int] = {}
        """``id`` of each leaf on the graph → its ``AccumulateGrad``'s index."""
        self.received: list[Any] = []
        self.produced: list[Any] = []
        self.norms: dict[int, Any] = {}
        self._walk()

    def _walk(self) -> None:
        stack = []
        for t in self.roots:
            node = self.stats.root_node(t)
            if node is not None and self._add(node):
                stack.append(node)
        while stack:  # iterative: a long chain does not reach the recursion limit
            node = stack.pop()
            i = self.index[id(node)]
            for slot, (child, _) in enumerate(node.next_functions):
                if child is None:
                    continue
                new = self._add(child)
                self.parents[self.index[id(child)]].append((i, slot))
                if new:
                    stack.append(child)
        self.received = [None] * len(self.nodes)
        self.produced = [None] * len(self.nodes)

    def _add(self, node: Any) -> bool:
        if id(node) in self.index:
            return False
        self.index[id(node)] = len(self.nodes)
        self.nodes.append(node)
        self.parents.append([])
        variable = getattr(node, "variable", None)
        if variable is not None:
            self.leaves[id(variable)] = len(self.nodes) - 1
        return True

    def hook(self) -> list[Any]:
        """Hook every node; the handles to remove when the call ends."""
        return [node.register_hook(self._hook_for(i)) for i, node in enumerate(self.nodes)]

    def _hook_for(self, i: int) -> Callable[[Any, Any], None]:
        accumulates = getattr(self.nodes[i], "variable", None) is not None
        stats = self.stats

        def hook(grad_inputs: Any, grad_outputs: Any) -> None:
            with stats.quiet():
                self.received[i] = [_flag(stats, g) for g in grad_outputs]
                self.produced[i] = [_flag(stats, g) for g in grad_inputs]
                if accumulates and grad_outputs and grad_outputs[0] is not None:
                    self.norms[i] = stats.squared_norm(grad_outputs[0])

        return hook

    def got(self, i: int) -> bool | None:
        """Whether node ``i`` ran and received a defined gradient (None: it did not run)."""
        received = self.received[i]
        if received is None:
            return None
        return any(r is not None for r in received)

    @staticmethod
    def nonzero(flags: list[Any] | None) -> bool:
        """Whether any of ``flags`` (as the hooks keep them) says non-zero."""
        return any(f is not None and bool(f) for f in flags or ())

    def norm2(self, i: int) -> float | None:
        """The squared norm node ``i`` (an ``AccumulateGrad``) received, if known."""
        value = self.norms.get(i)
        return None if value is None else float(value)

    def leaf_nodes(self) -> Iterator[tuple[Any, int]]:
        """``(leaf, AccumulateGrad index)`` of every leaf on the graph."""
        for node_index in self.leaves.values():
            yield self.nodes[node_index].variable, node_index


Found = Callable[..., None]
"""``found(reason, why, where=None)``: one finding for the parameter a loop is at."""


def settled_before_the_call(
    found: Found,
    requires_grad: bool,
    key: int,
    inputs: dict[int, int] | None,
    api: str,
    where: Where | None,
) -> bool:
    """Frozen, or pruned by the call's ``inputs=`` (``api`` names the call that prunes):
    the first reasons, on every engine (Note [The reasons, in order] in ``torch_calls.py``)."""
    if not requires_grad:
        found(FROZEN, "requires_grad is False")
        return True
    if inputs is not None and key not in inputs:
        found(PRUNED, f"{api} left it out", where)
        return True
    return False


class Flow:
    """Each module's gradient and parameter norms in one call, summed over its parameters."""

    def __init__(self) -> None:
        self._sums: dict[str, list[float]] = {}

    def add(self, module: str, grad_norm2: float, param_norm2: float) -> None:
        entry = self._sums.setdefault(module, [0.0, 0.0, 0])
        entry[0] += grad_norm2
        entry[1] += param_norm2
        entry[2] += 1

    def rows(self) -> list[FlowRow]:
        """The table's rows, vanishing and exploding flagged."""
        return flag_flow(
            FlowRow(m, math.sqrt(g2), math.sqrt(w2), int(n))
            for m, (g2, w2, n) in self._sums.items()
        )


def gradient_of(
    plan: CallPlan,
    key: int,
    grads: list[Any] | None,
    inputs: dict[int, int] | None,
    nonzero: Callable[[Any], bool],
) -> tuple[bool | None, bool, int | None, float | None]:
    """What the call gave the leaf ``key``: ``(got, non-zero, its AccumulateGrad, squared
    norm)``; ``got`` is ``None`` when the leaf's node did not run. A ``grad()`` call's result
    is read from ``grads`` (with ``nonzero`` of the engine's tensors), a ``backward()``'s
    from the hooks; only the latter has a norm for the flow."""
    acc = plan.leaves.get(key)
    if grads is not None and inputs is not None:
        g = grads[inputs[key]]
        return g is not None, g is not None and nonzero(g), acc, None
    if acc is None:
        return None, False, None, None
    got = plan.got(acc)
    if not got:
        return got, False, acc, None
    return got, plan.nonzero(plan.received[acc]), acc, plan.norm2(acc)


def settled_by_its_gradient(
    plan: CallPlan, found: Found, got: bool | None, nonzero: bool, acc: int | None
) -> bool:
    """All zeros (and where they began), or on the graph with no gradient (and which node
    gave none); ``False`` when the leaf was not on the call's graph at all."""
    if got:
        if not nonzero:
            why, at = zeros_born_at(plan, acc) if acc is not None else ("", None)
            found(ZEROS, why or "every element of its gradient is exactly zero", at)
        return True
    if acc is not None:
        why, at = no_gradient_from(plan, acc)
        found(NO_GRADIENT, why, at)
        return True
    return False


def _flag(stats: Stats, g: Any) -> Any:
    return None if g is None else stats.nonzero(g)


def no_gradient_from(plan: CallPlan, acc: int) -> tuple[str, Where | None]:
    """Which node before the ``AccumulateGrad`` at ``acc`` returned no gradient for it."""
    for parent, slot in plan.parents[acc]:
        produced = plan.produced[parent]
        if produced is not None and produced[slot] is None:
            node = plan.nodes[parent]
            return f"{node.name()} returned no gradient for it", plan.stats.where_made(node)
    return "its AccumulateGrad was on the graph but received no gradient", None


def zeros_born_at(plan: CallPlan, acc: int) -> tuple[str, Where | None]:
    """Where the gradient of the leaf at node ``acc`` became all zeros: the nearest node that
    received a non-zero gradient and gave it zeros, walking from the leaf towards the roots."""
    seen = {acc}
    queue = deque([acc])
    passed_nonzero = False
    while queue:
        child = queue.popleft()
        if not plan.parents[child] and child != acc:
            return "the gradient given to the backward call is all zeros", None
        for parent, slot in plan.parents[child]:
            produced = plan.produced[parent]
            if produced is None:
                continue  # that node did not run in this call
            if produced[slot] is not None and bool(produced[slot]):
                passed_nonzero = True
                continue
            if plan.nonzero(plan.received[parent]):
                node = plan.nodes[parent]
                module = plan.stats.module_made(node)
                inside = f" in {module}" if module else ""
                return (
                    f"every path to it multiplied by zero: the gradient became all zeros "
                    f"at {node.name()}{inside}",
                    plan.stats.where_made(node),
                )
            if parent not in seen:
                seen.add(parent)
                queue.append(parent)
    if passed_nonzero:
        return "the gradients that reach it cancel out exactly", None
    return "every element of its gradient is exactly zero", None
