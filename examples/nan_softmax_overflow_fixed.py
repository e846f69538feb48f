"""The fix for nan_softmax_overflow.py: subtract each row's max before ``exp``.

``softmax(x) = softmax(x - c)`` for any ``c``; with ``c = max(x)`` the
largest term is ``exp(0) = 1`` and the sum is at least 1, so nothing
overflows and nothing divides by 0. The max is a constant here (``detach``),
as the shift does not change the result.

The loss then takes the log of the softmax in one piece,
``log softmax(x) = (x - c) - log(sum(exp(x - c)))``: a probability that
rounds to 0 would otherwise meet ``log(0)`` and ``0 × inf`` again.

Run:    python examples/nan_softmax_overflow_fixed.py           (finite gradients)
Step:   autograd-viz run examples/nan_softmax_overflow_fixed.py
Check:  autograd-viz nan examples/nan_softmax_overflow_fixed.py (exit status 0: nothing found)
"""

from __future__ import annotations

import engine


def stable_log_softmax(x: engine.Tensor) -> engine.Tensor:
    shifted = x - x.amax(dim=1, keepdim=True).detach()
    return shifted - shifted.exp().sum(dim=1, keepdim=True).log()


def main() -> None:
    w = engine.tensor([[2.0, -1.0, 0.5], [30.0, 1.0, -2.0]], requires_grad=True, name="w")
    x = engine.tensor([[0.5, 0.1], [0.2, 3.3]], name="x")  # the second row's logit is ~100
    labels = engine.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], name="labels")
    loss = -(labels * stable_log_softmax(x @ w)).sum() / 2.0
    loss.backward()
    print("loss =", loss.item())
    print("w.grad =", w.grad.tolist() if w.grad is not None else None)


if __name__ == "__main__":
    main()
