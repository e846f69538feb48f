"""The fix for nan_zero_norm.py: divide a zero row by 1, not by its zero norm.

A zero row's norm is replaced by 1 before the division, so the row stays 0
instead of ``0 / 0``, and its gradient is the plain ``query`` (1 and 0 here).
The replacement happens before the ``sqrt``, on the squared norm: ``sqrt(0)``
would have an infinite gradient, ``1/(2·sqrt(0))``, and even a zero gradient
times it is ``0 × inf``, NaN again.

Why not an eps clamp, ``x / max(‖x‖, eps)``, as ``torch.nn.functional.normalize``
does? It also makes the forward finite, but it clamps after the norm, and the
zero row then divides by ``eps``: its gradient is ``query / eps``, 10¹² for
``eps = 1e-12`` (PyTorch's ``normalize`` gives the same 1e12). Finite, and
still enough to wreck an optimizer step. A padding row is better masked.

Run:    python examples/nan_zero_norm_fixed.py           (finite, small gradients)
Step:   autograd-viz run examples/nan_zero_norm_fixed.py
Check:  autograd-viz nan examples/nan_zero_norm_fixed.py (exit status 0: nothing found)
"""

from __future__ import annotations

import engine


def normalize(x: engine.Tensor) -> engine.Tensor:
    squared = (x * x).sum(dim=1, keepdim=True)
    norm = squared.masked_fill(squared == 0.0, 1.0).sqrt()  # a zero row divides by 1
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
