"""A classic NaN in PyTorch: the gradient of a distance at distance 0.

``sqrt`` is finite at 0, but its derivative ``1 / (2 sqrt(x))`` is not:
``SqrtBackward0`` returns ``inf`` for a point that sits exactly on its
target, and the next node multiplies that ``inf`` by ``a - b = 0``: NaN.
The loss is finite; only backward goes wrong, and anomaly mode names the
node after the one that made the ``inf``. The fix
(torch_nan_sqrt_zero_fixed.py) adds a small eps under the square root.

Run:    python examples/torch_nan_sqrt_zero.py           (prints the NaN gradient)
Step:   autograd-viz run examples/torch_nan_sqrt_zero.py (press f, then c: stops at the Inf)
Report: autograd-viz nan examples/torch_nan_sqrt_zero.py (Inf born in SqrtBackward0: sqrt at 0)
"""

import torch


def distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    squared = ((a - b) ** 2).sum(dim=1)
    return squared.sqrt()  # born here


def main() -> None:
    points = torch.tensor([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]], requires_grad=True)
    targets = torch.tensor([[3.0, 4.0], [1.0, 0.0], [3.0, 1.0]])  # the last point is on target
    loss = distances(points, targets).sum()
    loss.backward()
    print("loss =", loss.item())
    print("points.grad =", points.grad.tolist())


if __name__ == "__main__":
    main()
