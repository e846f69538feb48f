"""A classic NaN: a distance computed as ``sqrt(sum(d²))`` where ``d`` is 0.

The forward pass is fine: ``sqrt(0) = 0``. The gradient of ``sqrt`` is
``1/(2·sqrt(x))``, infinite at 0, so ``SqrtBackward0`` returns Inf; the
gradient of ``d²`` is ``2·d`` times that, and ``0 × inf`` is NaN. PyTorch's
anomaly mode names ``PowBackward0`` (the first node to return NaN), but the
value was born one node earlier, in ``SqrtBackward0``. Here the two
points of the last pair coincide. The fix (nan_sqrt_zero_fixed.py) adds a
small eps under the square root.

Run:    python examples/nan_sqrt_zero.py           (prints the NaN gradient)
Step:   autograd-viz run examples/nan_sqrt_zero.py (press f, then c: stops at the NaN)
Report: autograd-viz nan examples/nan_sqrt_zero.py (names SqrtBackward0 and this file's line)
"""

from __future__ import annotations

import numpy as np

import engine


def distances(a: engine.Tensor, b: engine.Tensor) -> engine.Tensor:
    d = a - b
    return (d**2).sum(dim=1).sqrt()


def main() -> None:
    a = engine.tensor([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]], requires_grad=True, name="a")
    b = engine.tensor([[3.0, 4.0], [1.0, 0.0], [3.0, 1.0]], name="b")  # the last pair coincides
    with np.errstate(all="ignore"):  # let the NaN through, as a training loop would
        loss = distances(a, b).sum()
        loss.backward()
    print("loss =", loss.item())
    print("a.grad =", a.grad.tolist() if a.grad is not None else None)


if __name__ == "__main__":
    main()
