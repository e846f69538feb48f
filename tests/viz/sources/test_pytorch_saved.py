"""Saved tensors in the graph snapshot: summarized, never unpacked through a hook."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils.checkpoint import checkpoint  # noqa: E402

from autograd_viz.sources.pytorch import watch_torch  # noqa: E402
from autograd_viz.sources.pytorch.summary import summarize_tensor  # noqa: E402
from autograd_viz.trace import NodeInfo, Trace  # noqa: E402
from autograd_viz.trace.recording import record  # noqa: E402


def _recorded(backward: Any) -> Trace:
    with watch_torch(), record(max_values=16) as trace:
        backward()
    return trace


def _nodes(trace: Trace, name: str) -> list[NodeInfo]:
    (task,) = trace.graph_tasks.values()
    return [n for n in task.nodes.values() if n.name == name]


def test_saved_tensors_are_summaries_in_pytorchs_order() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(3, 4, requires_grad=True)
    y = (x * w).exp()
    expected_mul = [summarize_tensor(t, "cpu", 16) for t in (x, w)]  # self, then other
    expected_exp = [summarize_tensor(y.detach(), "cpu", 16)]  # ExpBackward0 saves its result
    trace = _recorded(lambda: y.sum().backward())
    (mul,) = _nodes(trace, "MulBackward0")
    (exp,) = _nodes(trace, "ExpBackward0")
    assert list(mul.saved) == expected_mul
    assert list(exp.saved) == expected_exp
    (total,) = _nodes(trace, "SumBackward0")
    assert total.saved == ()  # SumBackward0 saves sizes, no tensor


def test_a_custom_functions_saved_tensors_are_read_raw() -> None:
    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, a: Any) -> Any:
            ctx.save_for_backward(a)
            return a * 2

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            (a,) = ctx.saved_tensors
            return grad * 2 + a * 0

    x = torch.randn(5, requires_grad=True)
    out = Twice.apply(x)
    trace = _recorded(lambda: out.sum().backward())
    (node,) = _nodes(trace, "TwiceBackward")
    assert list(node.saved) == [summarize_tensor(x, "cpu", 16)]


def test_tensors_saved_under_hooks_are_not_unpacked() -> None:
    unpacked: list[Any] = []

    def pack(t: Any) -> Any:
        return t

    def unpack(t: Any) -> Any:
        unpacked.append(t)
        return t

    x = torch.randn(4, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = x.sin()
    z = y * 3  # saved without hooks: MulBackward0 saves no tensor for a scalar
    trace = _recorded(lambda: z.exp().sum().backward())
    (sin,) = _nodes(trace, "SinBackward0")
    assert sin.saved == (None,)  # a hook owns it: not read
    (exp,) = _nodes(trace, "ExpBackward0")
    assert exp.saved[0] is not None
    assert len(unpacked) == 1  # only PyTorch's own unpack, when SinBackward0 ran


def test_a_non_reentrant_checkpoint_is_not_recomputed_by_the_snapshot() -> None:
    calls = 0

    def block(t: Any) -> Any:
        nonlocal calls
        calls += 1
        return torch.tanh(t * 2).sin()

    x = torch.randn(6, requires_grad=True)
    out = checkpoint(block, x, use_reentrant=False)
    assert calls == 1
    trace = _recorded(lambda: out.sum().backward())
    assert calls == 2  # the one recomputation PyTorch itself makes during backward
    (sin,) = _nodes(trace, "SinBackward0")
    assert sin.saved == (None,)
    plain = x.detach().clone().requires_grad_()
    block(plain).sum().backward()
    assert torch.equal(x.grad, plain.grad)


def test_freed_saved_tensors_are_none_and_a_shared_tensor_is_summarized_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autograd_viz.sources.pytorch import saved

    made: list[Any] = []
    real = saved.summarize_tensor

    def counting(t: Any, device: str, max_values: int = 0) -> Any:
        made.append(t.shape)
        return real(t, device, max_values)

    monkeypatch.setattr(saved, "summarize_tensor", counting)
    w = torch.randn(8, 8, requires_grad=True)
    h = torch.randn(2, 8, requires_grad=True)
    for _ in range(5):
        h = h @ w  # MmBackward0 saves h and w, five times the same w
    trace = _recorded(lambda: h.sum().backward(retain_graph=True))
    nodes = _nodes(trace, "MmBackward0")
    assert len(nodes) == 5
    assert all(n.saved[1] == summarize_tensor(w, "cpu", 16) for n in nodes)
    assert made.count((8, 8)) == 1
    # A second backward of a freed graph: PyTorch raises; the snapshot saw freed tensors.
    h.sum().backward()
    with watch_torch(), record() as again, pytest.raises(RuntimeError, match="second time"):
        h.sum().backward()
    (task,) = again.graph_tasks.values()
    assert {s for n in task.nodes.values() for s in n.saved} <= {None}
