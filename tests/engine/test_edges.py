"""Edges as nodes keep them (Notes [A node is its own first edge] and [Edges in the node's own
slots] in engine.graph)."""

from __future__ import annotations

import gc
from typing import Any

import engine
from engine.graph import Edge, Node, edge_to
from engine.ops.shape import cat


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


def test_a_chain_leaves_one_object_per_node_for_the_collector() -> None:
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
    # Each step makes two nodes, their edges in their slots: no tuple, no Edge objects.
    assert tracked <= 2 * steps + 50, tracked / (2 * steps)
    y.backward()
    assert abs(float(x.grad.numpy()[0]) - 1.0001 ** (steps + 1)) < 1e-9 * 1.0001**steps  # type: ignore[union-attr]


def test_an_add_tree_leaves_one_object_per_node_for_the_collector() -> None:
    x = engine.tensor([1.0], dtype=engine.float64, requires_grad=True)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        before = len(gc.get_objects())
        parts = [x * float(i) for i in range(512)]
        while len(parts) > 1:
            parts = [a + b for a, b in zip(parts[::2], parts[1::2], strict=True)]
        gc.collect()  # the lists of parts are gone; what is left is the graph
        tracked = len(gc.get_objects()) - before
    finally:
        if was_enabled:
            gc.enable()
    # 1023 nodes (512 muls, 511 adds of two edges) and the root tensor.
    assert tracked <= 1023 + 50, tracked
    parts[0].backward()
    assert x.grad is not None and x.grad.tolist() == [sum(range(512))]


def test_nodes_of_zero_to_many_edges_give_them_back_in_order() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    w = engine.tensor([3.0, 4.0], requires_grad=True)
    leaf = x._get_grad_accumulator()
    assert leaf._num_edges == 0 and leaf._next_edges == () and leaf.num_outputs == 0
    one, two = x.exp().grad_fn, (x * w).grad_fn
    assert isinstance(one, Node) and isinstance(two, Node)
    assert one._next_edges == (leaf,) and one.num_outputs == 1
    assert two._next_edges == (leaf, w._get_grad_accumulator()) and two.num_outputs == 2
    a, c, d = x * 1.0, w * 2.0, x.exp()
    many = cat([a, x.detach(), c, d]).grad_fn
    assert isinstance(many, Node) and isinstance(c.grad_fn, Node)
    assert many._next_edges == (a.grad_fn, None, c.grad_fn, d.grad_fn)
    assert many.num_outputs == 4 and many.next_edge(2) == Edge(c.grad_fn, 0)
    assert many.next_functions == ((a.grad_fn, 0), (None, 0), (c.grad_fn, 0), (d.grad_fn, 0))


def test_connecting_a_node_again_drops_the_edges_it_no_longer_has() -> None:
    x = engine.tensor([1.0], requires_grad=True)
    node = cat([x * 1.0, x * 2.0, x * 3.0]).grad_fn
    assert isinstance(node, Node)
    assert node.num_outputs == 3
    node._next_edges = (None,)
    assert node._next_edges == (None,) and node.next_functions == ((None, 0),)
    assert node._edge1 is None and node._edges is None  # nothing kept alive past the edges
    node.set_next_edges([])
    assert node._next_edges == () and node._edge0 is None


def test_a_node_of_a_tensor_and_a_number_counts_one_route() -> None:
    """Note [A number's edge in the count]: -2 in ``_num_edges``; every reader sees two edges."""
    from engine.scheduler import ONE_AND_A_NUMBER

    x = engine.tensor([1.0, 2.0], requires_grad=True)
    w = engine.tensor([3.0, 4.0])  # no grad: a second edge of None by another way
    for node in ((x * 2.0).grad_fn, (x + 1.5).grad_fn, (x - 1.5).grad_fn, (x / 2.0).grad_fn):
        assert isinstance(node, Node)
        assert node._num_edges == ONE_AND_A_NUMBER
        assert node.num_outputs == 2
        assert node.next_functions == ((x._get_grad_accumulator(), 0), (None, 0))
        assert node._next_edges[1] is None and node.next_edge(1) is None
        assert node.should_compute_output(0) and not node.should_compute_output(1)
    constant = (x * w).grad_fn
    assert isinstance(constant, Node)
    assert constant._num_edges == 2 and constant._edge1 is None  # the hot loops take it as two
    assert constant.next_functions == ((x._get_grad_accumulator(), 0), (None, 0))
    # Connected again through the setter, the same edges get the same count.
    constant._next_edges = constant._next_edges
    assert constant._num_edges == ONE_AND_A_NUMBER and constant.num_outputs == 2
    constant._next_edges = (None, constant._edge0)
    assert constant._num_edges == 2 and constant._next_edges[0] is None
    # Gradients through both kinds, both paths (the listener sends every node the general way).
    for listen in (False, True):
        a = engine.tensor([1.0, 2.0], requires_grad=True)
        loss = ((a * 2.0 + 1.5) * w - a * 0.5).sum()
        seen: list[object] = []
        if listen:
            with engine.events.listen(seen.append):
                loss.backward()
            assert seen
        else:
            loss.backward()
        assert a.grad.data.tolist() == [5.5, 7.5]
