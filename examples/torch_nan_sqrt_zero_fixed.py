"""torch_nan_sqrt_zero.py, fixed: an eps under the square root.

``sqrt(x + eps)`` has the finite derivative ``1 / (2 sqrt(eps))`` at 0.

Run:    python examples/torch_nan_sqrt_zero_fixed.py
Step:   autograd-viz run examples/torch_nan_sqrt_zero_fixed.py (press f, then c: no stop)
Report: autograd-viz nan examples/torch_nan_sqrt_zero_fixed.py (nothing found, exit status 0)
"""

import torch


def distances(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    return (((a - b) ** 2).sum(dim=1) + eps).sqrt()


def main() -> None:
    points = torch.tensor([[0.0, 0.0], [1.0, 2.0], [3.0, 1.0]], requires_grad=True)
    targets = torch.tensor([[3.0, 4.0], [1.0, 0.0], [3.0, 1.0]])
    loss = distances(points, targets).sum()
    loss.backward()
    print("loss =", loss.item())
    print("points.grad =", points.grad.tolist())


if __name__ == "__main__":
    main()
