"""The scheduler core (engine.scheduler) over its minimal node protocol.

The engine, the PyTorch bridge and replay all run these functions; here they
run over bare nodes that have nothing but the protocol (edges and two
numbers), so that nothing of the engine's Node is assumed. The engine's own
use is checked by every backward test; the bridge's against PyTorch in
tests/viz/sources.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

import engine
from engine.scheduler import (
    SHUTDOWN_PRIORITY,
    UINT64_MAX,
    WAKE_UP_PRIORITY,
    ExactQueueEntry,
    QueueEntry,
    arrive,
    compute_dependencies,
    init_to_execute,
    ready_entry,
    special_entry,
)


@dataclass(eq=False)
class Bare:
    """A node with only the scheduler's protocol."""

    name: str
    sequence_nr: int = 0
    _next_edges: list[BareEdge | None] = field(default_factory=list)
    topological_nr: int = 0
    num_inputs: int = 1

    def to(self, *targets: tuple[Bare, int] | None) -> Bare:
        self._next_edges = [None if t is None else BareEdge(*t) for t in targets]
        self.topological_nr = 1 + max(
            (e.function.topological_nr for e in self._next_edges if e is not None), default=-1
        )
        return self


@dataclass(frozen=True)
class BareEdge:
    function: Bare
    input_nr: int


def _diamond() -> dict[str, Bare]:
    leaf = Bare("leaf", UINT64_MAX)
    a = Bare("a", 1).to((leaf, 0))
    b = Bare("b", 2, num_inputs=2).to((leaf, 0), None)
    root = Bare("root", 3).to((a, 0), (b, 1), (b, 0))
    return {"leaf": leaf, "a": a, "b": b, "root": root}


def test_dependencies_count_every_arriving_edge_and_skip_none() -> None:
    g = _diamond()
    deps = compute_dependencies(g["root"])
    assert {n.name: c for n, c in deps.items()} == {"a": 1, "b": 2, "leaf": 2}


def test_dependencies_count_but_do_not_walk_below_min_topo_nr() -> None:
    g = _diamond()
    below = Bare("below").to((g["leaf"], 0))  # topological_nr 1
    g["a"].to((below, 0))  # a: 2
    root = Bare("root").to((g["a"], 0))
    deps = compute_dependencies(root, min_topo_nr=2)
    # ``below`` is counted (an edge from a arrives) but its own edges are not walked.
    assert {n.name: c for n, c in deps.items()} == {"a": 1, "below": 1}


def test_a_million_node_chain_is_counted_without_recursion() -> None:
    node = Bare("leaf")
    for i in range(1_000_000):
        nxt = Bare(str(i))
        nxt._next_edges = [BareEdge(node, 0)]
        nxt.topological_nr = i + 1
        node = nxt
    deps = compute_dependencies(node)
    assert len(deps) == 1_000_000 and set(deps.values()) == {1}


def test_init_to_execute_marks_paths_to_inputs_and_captures_for_grad() -> None:
    g = _diamond()
    # grad(root, a's input 0): a's slot is captured, a does not run; root leads to it.
    info = init_to_execute(g["root"], [BareEdge(g["a"], 0)], False, g["a"].topological_nr)
    assert info[g["root"]].needed and not info[g["a"]].needed
    assert info[g["a"]].captures == [(0, 0)]
    assert g["b"] not in info or not info[g["b"]].should_execute()
    # backward(inputs=leaf): every path to the leaf runs, the leaf itself too.
    info = init_to_execute(g["root"], [BareEdge(g["leaf"], 0)], True, 0)
    assert all(info[g[n]].needed for n in ("root", "a", "b", "leaf"))


def test_init_to_execute_needs_the_root_only_if_something_below_is() -> None:
    g = _diamond()
    stray = Bare("stray")
    info = init_to_execute(g["root"], [BareEdge(stray, 0)], True, 0)
    assert not info[g["root"]].needed and info[stray].needed


def test_arrive_counts_down_keeps_the_buffer_until_ready_and_skips_what_is_pruned() -> None:
    g = _diamond()
    deps = compute_dependencies(g["root"])
    not_ready: dict[Bare, list[object]] = {}
    count, buffer = arrive(deps, not_ready, {}, g["b"], 2)
    assert count == 1 and buffer == [None, None] and not_ready[g["b"]] is buffer
    assert buffer is not None
    buffer[1] = "grad"
    count, again = arrive(deps, not_ready, {}, g["b"], 2)
    assert count == 0 and again is buffer and g["b"] not in not_ready and g["b"] not in deps
    with pytest.raises(KeyError):
        arrive(deps, not_ready, {}, g["b"], 2)
    info = init_to_execute(g["root"], [BareEdge(g["a"], 0)], False, g["a"].topological_nr)
    deps = compute_dependencies(g["root"])
    assert arrive(deps, {}, info, g["b"], 2) == (1, None)  # b leads to no input: skipped


def test_ready_entries_order_shutdown_wake_up_depth_then_sequence_nr() -> None:
    entries = [
        ready_entry(0, 5, "seq 5"),
        ready_entry(0, UINT64_MAX, "accumulate"),
        ready_entry(1, 2, "depth 1"),
        ready_entry(2, 1, "depth 2"),
        ready_entry(0, 2**60, "huge nr"),
        special_entry(WAKE_UP_PRIORITY, "wake-up"),
        special_entry(SHUTDOWN_PRIORITY, "shutdown"),
        ready_entry(1, UINT64_MAX, "depth 1 accumulate"),
    ]
    random.Random(0).shuffle(entries)
    heapq.heapify(entries)
    order = [heapq.heappop(entries).task for _ in range(len(entries))]
    assert order == [
        "shutdown",
        "wake-up",
        "depth 2",
        "depth 1 accumulate",
        "depth 1",
        "accumulate",
        "huge nr",
        "seq 5",
    ]


@pytest.mark.parametrize(("count", "order"), [(5, [1, 3, 5, 2, 4]), (8, [1, 3, 7, 6, 8, 5, 2, 4])])
def test_equal_priorities_pop_in_heap_order(count: int, order: list[int]) -> None:
    heap: list[QueueEntry | ExactQueueEntry] = []
    for i in range(1, count + 1):
        heapq.heappush(heap, ready_entry(0, UINT64_MAX, i))
    assert [heapq.heappop(heap).task for _ in range(count)] == order


def test_the_engine_counts_its_graph_with_the_scheduler() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x + x).sum()
    assert y.grad_fn is not None
    deps = compute_dependencies(y.grad_fn)
    names = sorted((n.name(), c) for n, c in deps.items())
    assert names == [("AccumulateGrad", 3), ("AddBackward0", 1), ("MulBackward0", 1)]  # x*x: two


def _counted_through_the_property(root: Any, min_topo_nr: int = 0) -> dict[Any, int]:
    """compute_dependencies' walk, reading every node through ``_next_edges`` (no slots)."""
    dependencies: dict[Any, int] = {}
    stack = [root]
    while stack:
        fn = stack.pop()
        if min_topo_nr and fn.topological_nr < min_topo_nr:
            continue
        for edge in fn._next_edges:
            if edge is None:
                continue
            nxt = edge.function
            if nxt in dependencies:
                dependencies[nxt] += 1
            else:
                dependencies[nxt] = 1
                stack.append(nxt)
    return dependencies


class _Three(engine.Function):
    """Three outputs: edges to a node's inputs 1 and 2, not only 0."""

    @staticmethod
    def forward(ctx: object, a: engine.Tensor) -> tuple[engine.Tensor, ...]:
        return engine.tensor(a.data * 2.0), engine.tensor(a.data * 3.0), engine.tensor(a.data)

    @staticmethod
    def backward(ctx: object, *grads: engine.Tensor) -> engine.Tensor:
        return grads[0] * 2.0 + grads[1] * 3.0 + grads[2]


@pytest.mark.parametrize("min_topo", [0, 2, 4])
def test_the_slot_walk_counts_and_orders_as_the_property_walk(min_topo: int) -> None:
    """One edge, a number's None second edge, two, three, and edges to outputs past 0."""
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = engine.tensor([0.5, 0.25, 2.0], requires_grad=True)
    parts = _Three.apply(x * 2.0)
    y = engine.stack([parts[2], parts[0], parts[1]]).sum(0)  # three edges
    z = (y * w + 1.0).exp() - y  # two edges each
    loss = engine.cat([z, -z, z * x, parts[1] * 5.0]).sum()  # one edge, to input 1
    root = loss.grad_fn
    assert root is not None
    got = compute_dependencies(root, min_topo)
    want = _counted_through_the_property(root, min_topo)
    assert list(got.items()) == list(want.items())  # the same counts, inserted in the same order
    assert len(got) > 8
