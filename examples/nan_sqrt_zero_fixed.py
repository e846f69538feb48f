"""The fix for nan_sqrt_zero.py: a small eps under the square root.

``sqrt(sum(d²) + eps)`` is never ``sqrt(0)``, so its gradient
``1/(2·sqrt(x + eps))`` stays finite, and ``2·d`` times it is 0 where the
points coincide. The distance is off by at most ``sqrt(eps)``.

Run:    python examples/nan_sqrt_zero_fixed.py           (finite gradients)
Step:   autograd-viz run examples/nan_sqrt_zero_fixed.py
Check:  autograd-viz nan examples/nan_sqrt_zero_fixed.py (exit status 0: nothing found)
"""

from __future__ import annotations

import engine

EPS = 1e-12


def distances(a: engine.Tensor, b: engine.Tensor) -> engine.Tensor:
    d = a - b
    return ((d**2).sum(dim=1) + EPS).sqrt()


def main() -> None:
    a = engine.tensor([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]], requires_grad=True, name="a")
    b = engine.tensor([[3.0, 4.0], [1.0, 0.0], [3.0, 1.0]], name="b")  # the last pair coincides
    loss = distances(a, b).sum()
    loss.backward()
    print("loss =", loss.item())
    print("a.grad =", a.grad.tolist() if a.grad is not None else None)


if __name__ == "__main__":
    main()
