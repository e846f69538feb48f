"""The fix for nan_log_zero.py: binary cross-entropy computed from the logits.

``log(sigmoid(z))`` is ``-softplus(-z)`` and ``log(1 - sigmoid(z))`` is
``-softplus(z)``, with ``softplus(z) = max(z, 0) + log(1 + exp(-|z|))``.
Nothing here takes the log of a number that rounded to 0: ``1 + exp(-|z|)``
is at least 1. This is what ``binary_cross_entropy_with_logits`` does.

Run:    python examples/nan_log_zero_fixed.py           (finite loss and gradients)
Step:   autograd-viz run examples/nan_log_zero_fixed.py
Check:  autograd-viz nan examples/nan_log_zero_fixed.py (exit status 0: nothing found)
"""

from __future__ import annotations

import engine


def softplus(z: engine.Tensor) -> engine.Tensor:
    return z.relu() + (1.0 + (-z.abs()).exp()).log()


def bce_with_logits(logits: engine.Tensor, labels: engine.Tensor) -> engine.Tensor:
    return (labels * softplus(-logits) + (1.0 - labels) * softplus(logits)).mean()


def main() -> None:
    w = engine.tensor([[0.5], [-1.5], [2.0]], requires_grad=True, name="w")
    x = engine.tensor([[10.0, -8.0, 9.0], [0.1, 0.2, 0.3]], name="x")  # the first row saturates
    labels = engine.tensor([[1.0], [0.0]], name="labels")
    loss = bce_with_logits(x @ w, labels)
    loss.backward()
    print("loss =", loss.item())
    print("w.grad =", w.grad.tolist() if w.grad is not None else None)


if __name__ == "__main__":
    main()
