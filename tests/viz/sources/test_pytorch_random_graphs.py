"""Random PyTorch graphs of many op kinds, through every entry point: no derivation fails."""

from __future__ import annotations

import random
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz.sources.pytorch import DerivedMismatchWarning, watch_torch  # noqa: E402
from engine import events  # noqa: E402
from tests.viz.sources.pytorch_programs import (  # noqa: E402
    independent_order,
    mismatches,
    started,
)


class HalfNone(torch.autograd.Function):
    """A custom function whose backward leaves its second input without a gradient."""

    @staticmethod
    def forward(ctx: Any, a: Any, b: Any) -> Any:
        return a * 2 + b

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad * 2, None


def _op(rng: random.Random, a: Any, b: Any) -> Any:
    op = rng.randrange(12)
    if op == 0:
        return a + b
    if op == 1:
        return a @ b
    if op == 2:
        return torch.cat([a[:2], b[2:]])
    if op == 3:
        return torch.stack(a.split(2)).sum(0).repeat(2, 1)
    if op == 4:
        return a.t().contiguous() * b
    if op == 5:
        return HalfNone.apply(a, b)
    if op == 6:
        v = a.clone()
        v[0] = b[1] * 3  # an in-place write: CopySlices
        return v
    if op == 7:
        return torch.where(a > 0, a, b)
    if op == 8:
        return a.detach() * b
    if op == 9:
        return a.relu() + b.sigmoid()
    if op == 10:
        return a.max(dim=0).values.expand(4, 4) * b
    return (a * b).softmax(-1)


@pytest.mark.parametrize("seed", range(120))
def test_random_graph(seed: int) -> None:
    rng = random.Random(seed)
    torch.manual_seed(seed)
    leaves = [torch.randn(4, 4, requires_grad=True) for _ in range(rng.randint(1, 5))]
    values = list(leaves)
    for _ in range(rng.randint(3, 25)):
        values.append(_op(rng, rng.choice(values), rng.choice(values)))
    made = [v for v in values[len(leaves) :] if v.requires_grad]
    if not made:
        pytest.skip("no value of this program requires grad")
    picks = rng.sample(made, k=min(rng.randint(1, 3), len(made)))
    inner = [v for v in made if v.grad_fn is not None][:5]
    way = seed % 4
    seen: list[events.Event] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", DerivedMismatchWarning)
        with watch_torch(), events.listen(seen.append), independent_order() as order:
            if way == 0:
                sum(p.sum() for p in picks).backward()
            elif way == 1:
                torch.autograd.backward([p.sum() for p in picks])
            elif way == 2:
                inputs = rng.sample(leaves + inner, k=min(2, len(leaves + inner)))
                torch.autograd.grad(sum(p.sum() for p in picks), inputs, allow_unused=True)
            else:
                torch.autograd.backward([p.sum() for p in picks], inputs=rng.sample(leaves, k=1))
    assert started(seen) == order
    assert mismatches(seen) == []
    assert seen[-1].kind == "graph_task_end" and seen[-1].data["status"] == "ok"


@pytest.mark.parametrize("seed", range(12))
def test_nested_checkpoints_sharing_parameters(seed: int) -> None:
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(seed)
    lin, lin2 = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    x = torch.randn(3, 4, requires_grad=True)

    def inner(t: Any) -> Any:
        return torch.tanh(lin(t)) * lin.weight.sum()

    def outer(t: Any) -> Any:
        return checkpoint(inner, lin2(t), use_reentrant=True) + t

    seen: list[events.Event] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # checkpoint's note on inputs
        warnings.simplefilter("error", DerivedMismatchWarning)
        with watch_torch(), events.listen(seen.append), independent_order() as order:
            # lin.bias is a leaf of the outermost graph task and of the innermost one.
            y = checkpoint(outer, x, use_reentrant=True) * lin.bias.sum()
            y.pow(2).sum().backward()
    assert started(seen) == order
    assert mismatches(seen) == []
    depths = [e.data["reentrant_depth"] for e in seen if e.kind == "graph_task_start"]
    assert depths == [0, 1, 2]
