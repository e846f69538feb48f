"""Input-buffer sums followed without copying their first gradient.

Note [Following a sum without copying its first gradient] in ``bookkeeping.py``: the
first gradient a slot of several edges receives is kept as it is, our sum made when the
second arrives. These check that PyTorch still adds into the first in place (its memory
is the node's input, as without watching), that the sums shown and checked are still
PyTorch's bit for bit, and that a first gradient written in place meanwhile is said.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz.sources.pytorch.bookkeeping import DerivedMismatchWarning  # noqa: E402
from autograd_viz.sources.pytorch.summary import summarize_tensor  # noqa: E402
from autograd_viz.trace.recording import record  # noqa: E402
from tests.viz.sources.pytorch_programs import bitwise_equal  # noqa: E402
from tests.viz.sources.summary_numbers import count_large_summaries  # noqa: E402


class _Seen(torch.autograd.Function):
    """The identity; its backward notes the address of what it receives and hands on."""

    addresses: list[tuple[str, int]] = []  # noqa: RUF012 - a test's notebook

    @staticmethod
    def forward(ctx: Any, x: Any, label: str) -> Any:
        ctx.label = label
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        handed = grad * 1.0
        _Seen.addresses.append((ctx.label, grad.data_ptr(), handed.data_ptr()))
        return handed, None


def _sum_in_place_program(size: int) -> tuple[torch.Tensor, bool]:
    """``w.grad``, and whether the buffer's sum is in the memory of the gradient that
    arrived first: ``a`` feeds two paths whose gradients meet in its node's input buffer."""
    _Seen.addresses = []
    torch.manual_seed(0)
    w = torch.randn(size, requires_grad=True)
    a = _Seen.apply(w * 3, "sum")  # its backward receives the buffer's sum
    second = (a * 7).sin().sum()  # made first: its gradient arrives second
    first = _Seen.apply(a, "first").tanh().sum()
    (second + first).backward()
    seen = {label: (received, handed) for label, received, handed in _Seen.addresses}
    return w.grad, seen["sum"][0] == seen["first"][1]


@pytest.mark.parametrize("size", [300, 40_000])
@pytest.mark.parametrize("values", ["all", "none"])
def test_pytorch_still_adds_into_the_first_gradient_in_place(size: int, values: str) -> None:
    plain, plain_in_place = _sum_in_place_program(size)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DerivedMismatchWarning)
        with record(values=values) as trace:
            watched, watched_in_place = _sum_in_place_program(size)
    assert bitwise_equal([plain], [watched])
    # PyTorch adds the second gradient into the first's memory, watched as not.
    assert plain_in_place and watched_in_place
    assert not [e for e in trace.events if e.kind == "derived_mismatch"]


@pytest.mark.parametrize("size", [300, 40_000])
def test_the_sum_shown_is_what_the_node_receives(size: int) -> None:
    torch.manual_seed(1)
    w = torch.randn(size, requires_grad=True)
    with record() as trace:
        a = w * 3
        (a.tanh().sum() + (a * 7).sin().sum() + (a * a).sum()).backward()
    mul = next(e for e in trace.events if e.kind == "node_start" and e.node_name == "MulBackward0"
               and e.node_id == _maker(trace, "MulBackward0", size))  # fmt: skip
    sums = [e for e in trace.events if e.kind == "accumulate" and e.node_id == mul.node_id]
    assert [e.data["action"] for e in sums] == ["created", "added", "added", "added"]
    total = sums[-1].data["total"]
    assert total == mul.data["inputs"][0]  # the node's input, summarized once
    received = (
        torch.tanh(w * 3).pow(2).neg().add(1) + torch.cos(w * 3 * 7) * 7 + 2 * (w * 3)
    ).detach()
    assert total.max == pytest.approx(float(received.max()), rel=1e-5)
    assert total.min == pytest.approx(float(received.min()), rel=1e-5)
    assert not [e for e in trace.events if e.kind == "derived_mismatch"]


def _maker(trace: Any, name: str, size: int) -> int:
    """The node that made ``a = w * 3``: the one of that name whose only edge is a leaf's."""
    (task,) = trace.graph_tasks.values()
    nodes = task.nodes.values()
    leaves = {n.id for n in nodes if n.name == "AccumulateGrad"}
    return next(
        n.id
        for n in nodes
        if n.name == name and [e[0] for e in n.next_edges if e is not None] == sorted(leaves)
    )


class _Both(torch.autograd.Function):
    """``a + b``, whose backward hands one gradient tensor to both inputs."""

    @staticmethod
    def forward(ctx: Any, a: Any, b: Any) -> Any:
        return a + b

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad, grad


class _Doubles(torch.autograd.Function):
    """The identity, whose backward doubles the gradient it receives in place."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad.mul_(2)


def _written_meanwhile() -> torch.Tensor:
    """``a``'s buffer gets a gradient that another node then doubles in place (the same
    tensor, handed to both), before ``a``'s second gradient arrives."""
    torch.manual_seed(2)
    w = torch.randn(5, requires_grad=True)
    a = w * 3
    later = (a * 7).sum()  # made first, so its backward runs after _Doubles's
    m = _Doubles.apply(w * 5)
    (later + _Both.apply(a, m).sin().sum()).backward()
    return w.grad


@pytest.mark.parametrize("values", ["all", "none"])
def test_a_first_gradient_written_in_place_meanwhile_is_said(values: str) -> None:
    plain = _written_meanwhile()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with record(values=values) as trace:
            watched = _written_meanwhile()
    assert bitwise_equal([plain], [watched])
    found = [e for e in trace.events if e.kind == "derived_mismatch"]
    if values == "none":  # no sum is followed without values: nothing to check, nothing said
        assert not found
        return
    assert [e.data["check"] for e in found] == ["buffer"]
    assert found[0].node_name == "MulBackward0"
    assert "written in place" in found[0].data["message"]
    said = [w for w in caught if issubclass(w.category, DerivedMismatchWarning)]
    assert len(said) == 1 and "written in place" in str(said[0].message)


def _shared_parameter(monkeypatch: pytest.MonkeyPatch, vouched: bool) -> tuple[Any, Any, int]:
    """A parameter two paths use (as tied embeddings are): its leaf event's summary, the
    summary of the sum its buffer was checked against, and how many large summaries ran."""
    from autograd_viz.sources.pytorch import watch

    computed = count_large_summaries(monkeypatch)
    if not vouched:
        monkeypatch.setattr(watch, "vouch", lambda *args: None)
    torch.manual_seed(4)
    w = torch.randn(200, 100, requires_grad=True)  # 20,000 elements: summarized as large
    x = torch.randn(8, 100)
    with record() as trace:
        ((x @ w.t()).tanh().sum() + (w * 2).sin().sum()).backward()
    monkeypatch.undo()
    leaf = next(e for e in trace.events if e.kind == "accumulate" and e.data["target"] == "leaf")
    sums = [e for e in trace.events if e.kind == "accumulate" and e.node_id == leaf.node_id
            and e.data["target"] == "buffer"]  # fmt: skip
    assert repr(leaf.data["grad"]) == repr(summarize_tensor(w.grad, "cpu", 16))
    return leaf.data["grad"], sums[-1].data["total"], len(computed)


def test_a_shared_parameters_grad_is_not_summarized_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    grad, total, count = _shared_parameter(monkeypatch, vouched=True)
    again, _, count_again = _shared_parameter(monkeypatch, vouched=False)
    # .grad is PyTorch's sum, compared bit for bit with ours: our sum's summary, taken once.
    assert grad == total and repr(grad) == repr(again)
    assert count == count_again - 1


def _large_sums(w: torch.Tensor) -> None:
    """Three slots of a million elements each filled twice: ``b``'s and ``c``'s buffers, both
    summed before either node runs, then ``w``'s."""
    b, c = w * 3, w * 7
    (b.sin().sum() + b.cos().sum() + c.sin().sum() + c.cos().sum()).backward()


def test_large_sums_made_in_kept_memory_are_each_their_own() -> None:
    from autograd_viz.sources.pytorch import bookkeeping

    torch.manual_seed(5)
    w = torch.randn(1024, 1024, requires_grad=True)
    _large_sums(w)
    plain = w.grad.clone()
    # Each sum is compared bit for bit with what PyTorch delivers: a sum written over by
    # another would be a mismatch, here an error.
    with warnings.catch_warnings():
        warnings.simplefilter("error", DerivedMismatchWarning)
        with record() as trace:
            for _ in range(3):  # later calls write into the memory the first one kept
                w.grad = None
                _large_sums(w)
                assert bitwise_equal([plain], [w.grad])
            kept = sum(len(free) for free in bookkeeping._free_sums.values())
    assert kept == 2  # two sums alive at once; the third reused one of them
    assert not bookkeeping._free_sums  # let go once nobody records
    calls = sorted({e.graph_task for e in trace.events})
    assert len(calls) == 3
    for call in calls:
        events = [e for e in trace.events if e.graph_task == call]
        summed = {e.node_id: e.data["total"] for e in events
                  if e.kind == "accumulate" and e.data["action"] == "added"}  # fmt: skip
        assert sorted(t.numel for t in summed.values()) == [1 << 20] * 3
        for node, total in summed.items():
            start = next(e for e in events if e.kind == "node_start" and e.node_id == node)
            assert total == start.data["inputs"][0]
    grad = next(e for e in trace.events if e.kind == "accumulate" and e.data["target"] == "leaf")
    assert repr(grad.data["grad"]) == repr(summarize_tensor(plain, "cpu", 16))
