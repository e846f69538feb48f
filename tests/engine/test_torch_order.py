"""Nodes run in PyTorch's order, ties in the ready queue included (Note [Ties in heap order])."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine
from engine import events

Label = tuple[str, int]
"""A node as both engines agree on it: ``("leaf", i)`` or ``(name, rank of its sequence_nr)``."""


def _labels(root: Any, leaves: list[Any], sequence_nr: Callable[[Any], int]) -> dict[int, Any]:
    """Every node reachable from ``root`` by ``id``, with its :data:`Label` as ``(node, label)``."""
    nodes: list[Any] = []
    seen: set[int] = set()
    stack = [root.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        stack.extend(fn for fn, _ in node.next_functions)
    leaf_index = {id(leaf): i for i, leaf in enumerate(leaves)}
    ops = sorted((n for n in nodes if not hasattr(n, "variable")), key=sequence_nr)
    labels: dict[int, Any] = {
        id(n): (n, (n.name().removeprefix("torch::autograd::"), rank)) for rank, n in enumerate(ops)
    }
    for n in nodes:
        if hasattr(n, "variable"):
            labels[id(n)] = (n, ("leaf", leaf_index[id(n.variable)]))
    return labels


def _run_order(root: Any, leaves: list[Any], sequence_nr: Callable[[Any], int]) -> list[Label]:
    """Backward from ``root`` with a prehook on every node; the nodes, labelled, in run order."""
    order: list[Label] = []
    handles = [
        node.register_prehook(lambda grads, label=label: order.append(label))  # type: ignore[misc]
        for node, label in _labels(root, leaves, sequence_nr).values()
    ]
    root.backward()
    for handle in handles:
        handle.remove()
    return order


def _event_order(root: Any, leaves: list[Any]) -> list[Label]:
    """Backward from ``root`` with no hook, watched through the engine's ``node_start`` events."""
    by_id = {
        n.node_id: label for n, label in _labels(root, leaves, lambda n: n.sequence_nr).values()
    }
    order: list[Label] = []

    def listener(event: events.Event) -> None:
        if event.kind == "node_start" and event.node_id in by_id:
            order.append(by_id[event.node_id])

    with events.listen(listener):
        root.backward()
    return order


def _leaf_order(root: Any, leaves: list[Any]) -> list[int]:
    """Backward from ``root`` with a hook on every leaf only: the leaves in accumulation order.

    The other nodes have no hook, so they take the plain path (Note [The plain path]), whose
    pushes and pops must leave the queue's ties as PyTorch's do.
    """
    order: list[int] = []
    for i, leaf in enumerate(leaves):
        leaf.register_hook(lambda grad, i=i: order.append(i))  # type: ignore[misc]
    root.backward()
    return order


def _both(program: Callable[[Any, list[Any]], Any], arrays: list[Any], torch: Any) -> None:
    def run(m: Any, order: Callable[[Any, list[Any]], Any]) -> tuple[Any, list[Any]]:
        leaves = [m.tensor(a, requires_grad=True) for a in arrays]
        return order(program(m, leaves), leaves), leaves

    expected, theirs = run(torch, lambda r, xs: _run_order(r, xs, lambda n: n._sequence_nr()))
    got, ours = run(engine, lambda r, xs: _run_order(r, xs, lambda n: n.sequence_nr))
    assert got == expected
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5)
    assert run(engine, _leaf_order)[0] == run(torch, _leaf_order)[0]
    assert run(engine, _event_order)[0] == expected


@pytest.mark.oracle
@pytest.mark.parametrize("leaves", [2, 3, 5, 8, 13])
def test_leaves_ready_together_run_in_pytorchs_heap_order(torch: Any, leaves: int) -> None:
    arrays = [np.full(2, i + 1.0, dtype=np.float32) for i in range(leaves)]
    _both(lambda m, xs: m.cat(xs).sum(), arrays, torch)


def test_five_and_eight_ties_pop_as_std_priority_queue() -> None:
    for count, expected in ((5, [0, 2, 4, 1, 3]), (8, [0, 2, 6, 5, 7, 4, 1, 3])):
        xs = [engine.tensor([1.0], requires_grad=True) for _ in range(count)]
        order = _run_order(engine.cat(xs).sum(), xs, lambda n: n.sequence_nr)
        assert order[2:] == [("leaf", i) for i in expected]


def _random_program(seed: int, leaves: int) -> Callable[[Any, list[Any]], Any]:
    """The same random program of unary and binary ops for either library."""
    rng = random.Random(seed)
    steps: list[tuple[str, int, int]] = []
    pool = leaves
    for _ in range(rng.randint(3, 14)):
        op = rng.choice(["add", "mul", "sub", "tanh", "scale", "cat"])
        steps.append((op, *sorted(rng.randrange(pool) for _ in range(2))))
        pool += 1

    def program(m: Any, xs: list[Any]) -> Any:
        values = list(xs)
        used: set[int] = set()
        for op, i, j in steps:
            a, b = values[i], values[j]
            used.update((i, j))
            if op == "add":
                out = a + b
            elif op == "mul":
                out = a * b
            elif op == "sub":
                out = a - b
            elif op == "tanh":
                out = a.tanh()
            elif op == "scale":
                out = a * 0.5
            else:
                out = m.cat([a, b])[:2]
            values.append(out)
        unused = [v for k, v in enumerate(values) if k not in used and k >= len(xs)]
        return m.cat([v for v in unused] + list(xs)).sum()

    return program


@pytest.mark.oracle
@pytest.mark.parametrize("seed", range(200))
def test_random_programs_run_nodes_in_pytorchs_order(torch: Any, seed: int) -> None:
    leaves = 2 + seed % 11
    arrays = [np.linspace(-1, 1, 2, dtype=np.float32) + 0.1 * i for i in range(leaves)]
    _both(_random_program(seed, leaves), arrays, torch)
