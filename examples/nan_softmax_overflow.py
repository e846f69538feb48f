"""A classic NaN: softmax written as ``exp(x) / sum(exp(x))`` overflows.

``exp(100)`` is beyond float32's range, so ``exp`` returns Inf; the sum is
Inf, and ``inf / inf`` is NaN. The loss and every gradient are NaN. The fix
(nan_softmax_overflow_fixed.py) subtracts each row's max before ``exp``:
softmax does not change, and the largest term is ``exp(0) = 1``.

Run:    python examples/nan_softmax_overflow.py           (prints the NaN gradient)
Step:   autograd-viz run examples/nan_softmax_overflow.py (press f, then c: stops at the NaN)
Report: autograd-viz nan examples/nan_softmax_overflow.py (names ExpBackward0: exp overflow)
"""

from __future__ import annotations

import numpy as np

import engine


def softmax_by_hand(x: engine.Tensor) -> engine.Tensor:
    e = x.exp()
    return e / e.sum(dim=1, keepdim=True)


def main() -> None:
    w = engine.tensor([[2.0, -1.0, 0.5], [30.0, 1.0, -2.0]], requires_grad=True, name="w")
    x = engine.tensor([[0.5, 0.1], [0.2, 3.3]], name="x")  # the second row's logit is ~100
    labels = engine.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], name="labels")
    with np.errstate(all="ignore"):  # let the NaN through, as a training loop would
        p = softmax_by_hand(x @ w)
        loss = -(labels * p.log()).sum() / 2.0
        loss.backward()
    print("loss =", loss.item())
    print("w.grad =", w.grad.tolist() if w.grad is not None else None)


if __name__ == "__main__":
    main()
