"""A classic NaN: binary cross-entropy written by hand takes the log of 0.

``sigmoid`` of a large logit rounds to exactly 1.0 in float32, so
``log(1 - p)`` is ``-inf``; the label's ``(1 - y) = 0`` times ``-inf`` is NaN,
and the NaN flows back into every gradient. The fix is to compute the loss
from the logits (``softplus``-style, or clamp ``p`` away from 0 and 1), as
``binary_cross_entropy_with_logits`` does.

Run:   python examples/nan_log_zero.py           (prints the NaN gradient)
Step:  autograd-viz run examples/nan_log_zero.py (press f, then c: stops at the NaN)
"""

from __future__ import annotations

import numpy as np

import engine


def bce_by_hand(logits: engine.Tensor, labels: engine.Tensor) -> engine.Tensor:
    p = logits.sigmoid()
    return -(labels * p.log() + (1.0 - labels) * (1.0 - p).log()).mean()


def main() -> None:
    w = engine.tensor([[0.5], [-1.5], [2.0]], requires_grad=True, name="w")
    x = engine.tensor([[10.0, -8.0, 9.0], [0.1, 0.2, 0.3]], name="x")  # the first row saturates
    labels = engine.tensor([[1.0], [0.0]], name="labels")
    with np.errstate(all="ignore"):  # let the NaN through, as a training loop would
        loss = bce_by_hand(x @ w, labels)
        loss.backward()
    print("loss =", loss.item())
    print("w.grad =", w.grad.tolist() if w.grad is not None else None)


if __name__ == "__main__":
    main()
