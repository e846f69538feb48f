"""Small custom autograd Functions that several test files build graphs from."""

from __future__ import annotations

from typing import Any

import engine


class Reentrant(engine.Function):
    """Runs a nested backward of depth ``depth`` inside its own backward.

    The gradient it passes back is twice the one it receives; each nested backward
    is checked to have accumulated 2.0 into its own leaf.
    """

    @staticmethod
    def forward(ctx: Any, x: engine.Tensor, depth: int) -> engine.Tensor:
        ctx.depth = depth
        return x * 1.0

    @staticmethod
    def backward(ctx: Any, grad: engine.Tensor) -> tuple[engine.Tensor, None]:
        depth: int = ctx.depth
        if depth > 0:
            inner = engine.tensor([1.0], requires_grad=True)
            with engine.enable_grad():
                Reentrant.apply(inner, depth - 1).sum().backward()
            assert inner.grad is not None and float(inner.grad.item()) == 2.0
        return grad * 2.0, None


class FailsInBackward(engine.Function):
    """The identity forward; its backward always raises ``ValueError``."""

    @staticmethod
    def forward(ctx: Any, x: engine.Tensor) -> engine.Tensor:
        return x * 1.0

    @staticmethod
    def backward(ctx: Any, grad: engine.Tensor) -> engine.Tensor:
        raise ValueError("this backward always fails")


def reachable(root: engine.Node) -> dict[int, engine.Node]:
    """Every node reachable from ``root``, by node id (a walk independent of the recorder)."""
    seen: dict[int, engine.Node] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if node.node_id in seen:
            continue
        seen[node.node_id] = node
        stack.extend(fn for fn, _ in node.next_functions if fn is not None)
    return seen
