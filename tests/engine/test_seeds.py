"""The examples of the seeds: the blog's exp-sum with inputs=, the paper's RNN cell, numbering."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import events


def test_backward_with_inputs_fills_only_the_requested_leaf() -> None:
    x = engine.tensor([0.5, 0.75], requires_grad=True)
    y = engine.tensor([0.1, 0.90], requires_grad=True)
    z = engine.exp(x * y).sum()
    engine.backward([z], inputs=[x])
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), [0.1051, 1.7676], atol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), y.data * np.exp(x.data * y.data), rtol=1e-6)
    assert y.grad is None


def test_inputs_pruning_skips_the_other_leaf(recorded: list[events.Event]) -> None:
    x = engine.tensor([0.5, 0.75], requires_grad=True)
    y = engine.tensor([0.1, 0.90], requires_grad=True)
    z = engine.exp(x * y).sum()
    engine.backward([z], inputs=[x])
    started = [e.node_name for e in recorded if e.kind == "node_start"]
    assert started == ["SumBackward0", "ExpBackward0", "MulBackward0", "AccumulateGrad"]
    skipped = [e for e in recorded if e.kind == "skip"]
    assert len(skipped) == 1 and skipped[0].node_name == "AccumulateGrad"
    start = next(e for e in recorded if e.kind == "graph_task_start")
    acc_x = x.gradient_edge().function
    assert acc_x.node_id in start.data["needed"]


def _paper_rnn(dtype: object = engine.float64) -> tuple[engine.Tensor, ...]:
    engine.manual_seed(0)
    x = engine.randn(1, 10, dtype=dtype, requires_grad=True, name="x")
    prev_h = engine.randn(1, 20, dtype=dtype, requires_grad=True, name="prev_h")
    w_h = engine.randn(20, 20, dtype=dtype, requires_grad=True, name="W_h")
    w_x = engine.randn(20, 10, dtype=dtype, requires_grad=True, name="W_x")
    return x, prev_h, w_h, w_x


def _rnn_cell(
    x: engine.Tensor, prev_h: engine.Tensor, w_h: engine.Tensor, w_x: engine.Tensor
) -> engine.Tensor:
    i2h = engine.matmul(w_x, x.T)
    h2h = engine.matmul(w_h, prev_h.T)
    return (i2h + h2h).tanh().sum()


def test_paper_rnn_cell_matches_finite_differences() -> None:
    inputs = _paper_rnn()
    scaled = [t.detach().requires_grad_() for t in inputs]
    for t in scaled:
        t.data *= 0.3  # keep tanh away from saturation so the check is sharp
    assert engine.gradcheck(_rnn_cell, scaled)


@pytest.mark.oracle
def test_paper_rnn_cell_matches_pytorch(torch: object) -> None:
    inputs = _paper_rnn(engine.float32)
    _rnn_cell(*inputs).backward()
    t_inputs = [torch.tensor(t.data, requires_grad=True) for t in inputs]  # type: ignore[attr-defined]
    tx, tprev, twh, twx = t_inputs
    (torch.matmul(twx, tx.t()) + torch.matmul(twh, tprev.t())).tanh().sum().backward()  # type: ignore[attr-defined]
    for ours, theirs in zip(inputs, t_inputs, strict=True):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)


def _longest_path_to_leaf(node: engine.Node) -> int:
    """Reference topological number by explicit memoized DFS (independent of the engine)."""
    memo: dict[int, int] = {}
    stack = [(node, False)]
    while stack:
        n, expanded = stack.pop()
        if id(n) in memo:
            continue
        children = [fn for fn, _ in n.next_functions if fn is not None]
        if expanded or not children:
            memo[id(n)] = 1 + max((memo[id(c)] for c in children), default=-1) if children else 0
            continue
        stack.append((n, True))
        stack.extend((c, False) for c in children if id(c) not in memo)
    return memo[id(node)]


def _walk(root: engine.Node) -> list[engine.Node]:
    seen: dict[int, engine.Node] = {}
    stack = [root]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen[id(n)] = n
        stack.extend(fn for fn, _ in n.next_functions if fn is not None)
    return list(seen.values())


def test_topological_and_dependency_numbers_follow_the_blog_rules(
    recorded: list[events.Event],
) -> None:
    # A diamond with an extra long branch, like the blog's Figure 2/3 graph.
    a = engine.tensor([1.0, 2.0], requires_grad=True, name="a")
    b = engine.tensor([3.0, 4.0], requires_grad=True, name="b")
    c = a * b
    d = c.exp()
    e = (c + d) * a
    loss = (e + b.sin()).sum()
    nodes = _walk(loss.grad_fn)
    for node in nodes:
        assert node.topological_nr == _longest_path_to_leaf(node), node.name()
        if node.name() == "AccumulateGrad":
            assert node.topological_nr == 0
    loss.backward()
    start = next(ev for ev in recorded if ev.kind == "graph_task_start")
    incoming: dict[int, int] = {}
    for node in nodes:
        for fn, _ in node.next_functions:
            if fn is not None:
                incoming[fn.node_id] = incoming.get(fn.node_id, 0) + 1
    assert start.data["dependencies"] == incoming
    acc_a = a.gradient_edge().function
    assert start.data["dependencies"][acc_a.node_id] == 2  # used by c = a*b and e = (...)*a


def test_sequence_numbers_increase_per_thread_and_accumulate_grad_is_max() -> None:
    x = engine.tensor([1.0], requires_grad=True)
    y = x * 2.0
    z = y * 3.0
    assert z.grad_fn.sequence_nr == y.grad_fn.sequence_nr + 1
    acc = y.grad_fn.next_functions[0][0]
    assert acc.name() == "AccumulateGrad"
    assert acc.sequence_nr == 2**64 - 1
    assert x.gradient_edge().function is acc, "one AccumulateGrad per leaf"
