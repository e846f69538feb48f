"""Edges as nodes keep them (Note [A node is its own first edge] in engine.graph)."""

from __future__ import annotations

import gc
from typing import Any

import engine
from engine.graph import Edge, edge_to


class Twice(engine.Function):
    """One node with two outputs: x and 2x."""

    @staticmethod
    def forward(ctx: Any, x: engine.Tensor) -> tuple[engine.Tensor, engine.Tensor]:
        return x * 1.0, x * 2.0

    @staticmethod
    def backward(ctx: Any, ga: engine.Tensor, gb: engine.Tensor) -> engine.Tensor:
        return ga + gb * 2.0


def test_an_edge_to_input_0_is_the_node_and_public_edges_are_edge_objects() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    a, b = Twice.apply(x)  # one node, two outputs: b is its input 1
    y = a * b
    mul = y.grad_fn
    split = a.grad_fn
    assert mul._next_edges[0] is split  # input 0 of split: the node itself
    second = mul._next_edges[1]
    assert type(second) is Edge and second.function is split and second.input_nr == 1
    assert mul.next_edges == (Edge(split, 0), Edge(split, 1))
    assert mul.next_functions == ((split, 0), (split, 1))
    y.sum().backward()
    assert x.grad is not None  # d(2x^2)/dx = 4x
    assert x.grad.numpy().tolist() == [4.0, 8.0]
    assert edge_to(split, 0) is split and edge_to(split, 1) == Edge(split, 1)


def test_set_next_edges_keeps_an_edge_to_input_0_as_the_node() -> None:
    x = engine.tensor([1.0], requires_grad=True)
    y = x * 3.0
    node = engine.graph.GraphRoot([Edge(y.grad_fn, 0)], [None])  # type: ignore[arg-type]
    assert node._next_edges == (y.grad_fn,)


def test_a_chain_leaves_two_objects_per_node_for_the_collector() -> None:
    x = engine.tensor([1.0], dtype=engine.float64, requires_grad=True)
    y = x * 1.0001 + 0.0
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        before = len(gc.get_objects())
        steps = 2000
        for _ in range(steps):
            y = y * 1.0001 + 0.0
        tracked = len(gc.get_objects()) - before
    finally:
        if was_enabled:
            gc.enable()
    # Each step makes two nodes, each with its edges tuple; no Edge objects.
    assert tracked <= 2 * 2 * steps + 50, tracked / (2 * steps)
    y.backward()
    assert abs(float(x.grad.numpy()[0]) - 1.0001 ** (steps + 1)) < 1e-9 * 1.0001**steps  # type: ignore[union-attr]
