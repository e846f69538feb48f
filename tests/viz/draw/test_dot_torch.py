"""``to_dot`` on a PyTorch tensor: the graph before backward, numbered as PyTorch's engine would."""

from __future__ import annotations

import re

import pytest

import autograd_viz
from autograd_viz.draw.model.graph_view import GraphViewError, from_graph
from autograd_viz.sources.pytorch.graph import unrun_graph

torch = pytest.importorskip("torch")
nn = torch.nn


def _longest_path_to_a_leaf(fn: object, memo: dict[int, int]) -> int:
    key = id(fn)
    if key not in memo:
        children = [f for f, _ in fn.next_functions if f is not None]  # type: ignore[attr-defined]
        memo[key] = (
            0 if not children else 1 + max(_longest_path_to_a_leaf(f, memo) for f in children)
        )
    return memo[key]


def _pytorch_graph(root: object) -> dict[int, object]:
    seen: dict[int, object] = {}
    stack = [root]
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen[id(fn)] = fn
        stack += [f for f, _ in fn.next_functions if f is not None]  # type: ignore[attr-defined]
    return seen


def test_an_mlp_is_drawn_with_pytorchs_numbers_and_its_parameters_by_name() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1))
    loss = model(torch.randn(2, 4)).sum()
    view = from_graph(unrun_graph([loss]))
    graph = _pytorch_graph(loss.grad_fn)
    assert len(view.nodes) == len(graph)
    memo: dict[int, int] = {}
    by_name: dict[str, list[tuple[int, int]]] = {}
    for fn in graph.values():
        name = fn.name().replace("torch::autograd::", "")  # type: ignore[attr-defined]
        by_name.setdefault(name, []).append(
            (fn._sequence_nr(), _longest_path_to_a_leaf(fn, memo))  # type: ignore[attr-defined]
        )
    drawn: dict[str, list[tuple[int, int]]] = {}
    for node in view.nodes.values():
        drawn.setdefault(node.info.name, []).append(
            (node.info.sequence_nr, node.info.topological_nr)
        )
    assert {k: sorted(v) for k, v in drawn.items()} == {k: sorted(v) for k, v in by_name.items()}
    leaves = {box.title for box in view.boxes if box.kind == "leaf"}
    assert leaves == {"0.weight", "0.bias", "2.weight", "2.bias"}
    # Dependencies: how many edges arrive at each node, as PyTorch's compute_dependencies counts.
    arriving: dict[int, int] = {}
    for fn in graph.values():
        for child, _ in fn.next_functions:  # type: ignore[attr-defined]
            if child is not None:
                arriving[id(child)] = arriving.get(id(child), 0) + 1
    assert sorted(n.info.dependencies for n in view.nodes.values()) == sorted(
        arriving.get(key, 0) for key in graph
    )


def test_the_dot_source_names_the_nodes_and_counts_dependencies() -> None:
    a = torch.randn(3, requires_grad=True)
    source = autograd_viz.to_dot((a * a).sum()).source
    assert "SumBackward0" in source and "MulBackward0" in source
    # a is used twice: its AccumulateGrad waits for two gradients.
    assert re.search(r"AccumulateGrad.*?deps 2/2", source)


def test_several_outputs_are_drawn_without_a_graph_root() -> None:
    a = torch.randn(3, requires_grad=True)
    view = from_graph(unrun_graph([(a * 2).sum(), a.exp().sum()]))
    names = sorted(n.info.name for n in view.nodes.values())
    assert names == sorted(
        ["SumBackward0", "MulBackward0", "SumBackward0", "ExpBackward0", "AccumulateGrad"]
    )
    assert sum(box.kind == "output" for box in view.boxes) == 2


def test_a_leaf_has_nothing_to_draw() -> None:
    with pytest.raises(GraphViewError, match="tensor 0 has no grad_fn"):
        autograd_viz.to_dot(torch.randn(3, requires_grad=True))


def test_drawing_changes_nothing_of_the_graph() -> None:
    torch.manual_seed(0)
    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(2, 4)
    expected = torch.autograd.grad((x @ w).tanh().sum(), [w])[0]
    loss = (x @ w).tanh().sum()
    autograd_viz.to_dot(loss)
    loss.backward()
    assert torch.equal(w.grad, expected)
