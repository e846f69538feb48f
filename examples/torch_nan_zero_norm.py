"""A classic NaN in PyTorch: normalizing an embedding that is all zeros, ``x / ‖x‖``.

The padding row of an embedding table is all zeros; its norm is 0, and
``0 / 0`` is NaN, in the forward pass already. The NaN reaches the scores
and the loss, and backward spreads it. The fix (torch_nan_zero_norm_fixed.py)
uses ``F.normalize``, which clamps the norm away from 0.

Run:    python examples/torch_nan_zero_norm.py           (prints the NaN scores)
Step:   autograd-viz run examples/torch_nan_zero_norm.py (press f, then c: stops at the NaN)
Report: autograd-viz nan examples/torch_nan_zero_norm.py (NaN born at aten.div: a zero norm)
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
        keys = self.embedding(ids)
        keys = keys / keys.norm(dim=1, keepdim=True)  # born here
        return keys @ query


def main() -> None:
    model = Retriever()
    query = torch.tensor([1.0, 0.0, 1.0])
    scores = model(torch.tensor([0, 1, 2]), query)  # id 2 is the padding row
    loss = scores.sum()
    loss.backward()
    print("scores =", scores.tolist())
    print("embedding.grad =", model.embedding.weight.grad.tolist())


if __name__ == "__main__":
    main()
