"""A classic NaN: normalizing a vector that is all zeros, ``x / ‖x‖``.

A padding row of an embedding table is all zeros; its norm is 0, and
``0 / 0`` is NaN, in the forward pass already. The NaN reaches the loss, and
in backward ``DivBackward0`` divides the gradient by the zero norm as well.
The fix (nan_zero_norm_fixed.py) clamps the norm away from 0 with an eps.

Run:    python examples/nan_zero_norm.py           (prints the NaN gradient)
Step:   autograd-viz run examples/nan_zero_norm.py (press f, then c: stops at the NaN)
Report: autograd-viz nan examples/nan_zero_norm.py (names DivBackward0: 0/0)
"""

from __future__ import annotations

import numpy as np

import engine


def normalize(x: engine.Tensor) -> engine.Tensor:
    norm = (x * x).sum(dim=1, keepdim=True).sqrt()
    return x / norm


def main() -> None:
    emb = engine.tensor(
        [[3.0, 4.0, 0.0], [1.0, -2.0, 2.0], [0.0, 0.0, 0.0]], requires_grad=True, name="emb"
    )  # the last row is padding
    query = engine.tensor([[1.0, 0.0, 1.0]], name="query")
    with np.errstate(all="ignore"):  # let the NaN through, as a training loop would
        scores = (normalize(emb) * query).sum(dim=1)
        loss = scores.sum()
        loss.backward()
    print("scores =", scores.tolist())
    print("emb.grad =", emb.grad.tolist() if emb.grad is not None else None)


if __name__ == "__main__":
    main()
