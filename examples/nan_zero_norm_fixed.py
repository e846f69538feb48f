"""The fix for nan_zero_norm.py: clamp the norm away from 0 with an eps.

``x / max(‖x‖, eps)`` is 0 for the zero vector instead of ``0 / 0``. The
clamp goes on the squared norm, before the ``sqrt``: clamping after it
would still leave ``sqrt(0)``, whose gradient ``1/(2·sqrt(0))`` is infinite,
and the clamp's zero gradient times it is ``0 × inf``, NaN again.
``torch.nn.functional.normalize`` clamps the same way.

Run:    python examples/nan_zero_norm_fixed.py           (finite gradients)
Step:   autograd-viz run examples/nan_zero_norm_fixed.py
Check:  autograd-viz nan examples/nan_zero_norm_fixed.py (exit status 0: nothing found)
"""

from __future__ import annotations

import engine

EPS = 1e-12


def normalize(x: engine.Tensor) -> engine.Tensor:
    norm = (x * x).sum(dim=1, keepdim=True).clamp(min=EPS * EPS).sqrt()
    return x / norm


def main() -> None:
    emb = engine.tensor(
        [[3.0, 4.0, 0.0], [1.0, -2.0, 2.0], [0.0, 0.0, 0.0]], requires_grad=True, name="emb"
    )  # the last row is padding
    query = engine.tensor([[1.0, 0.0, 1.0]], name="query")
    scores = (normalize(emb) * query).sum(dim=1)
    loss = scores.sum()
    loss.backward()
    print("scores =", scores.tolist())
    print("emb.grad =", emb.grad.tolist() if emb.grad is not None else None)


if __name__ == "__main__":
    main()
