"""torch_nan_zero_norm.py, fixed: ``F.normalize`` clamps the norm away from 0.

Run:    python examples/torch_nan_zero_norm_fixed.py
Step:   autograd-viz run examples/torch_nan_zero_norm_fixed.py (press f, then c: no stop)
Report: autograd-viz nan examples/torch_nan_zero_norm_fixed.py (nothing found, exit status 0)
"""

import torch
from torch import nn


class Retriever(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(3, 3)
        with torch.no_grad():
            self.embedding.weight.copy_(
                torch.tensor([[3.0, 4.0, 0.0], [1.0, -2.0, 2.0], [0.0, 0.0, 0.0]])
            )

    def forward(self, ids: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        keys = nn.functional.normalize(self.embedding(ids), dim=1)
        return keys @ query


def main() -> None:
    model = Retriever()
    query = torch.tensor([1.0, 0.0, 1.0])
    scores = model(torch.tensor([0, 1, 2]), query)
    loss = scores.sum()
    loss.backward()
    print("scores =", scores.tolist())
    print("embedding.grad =", model.embedding.weight.grad.tolist())


if __name__ == "__main__":
    main()
