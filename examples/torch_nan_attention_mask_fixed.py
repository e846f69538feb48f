"""A NaN from a real layer: attention where a query may look at no key at all.

Masked attention fills the scores of masked keys with ``-inf`` so that
softmax gives them weight 0; that ``-inf`` is intentional and is not
reported. But the second sequence of this batch is all padding: every key
of its rows is masked, softmax of a row that is all ``-inf`` is ``0 / 0``,
and NaN flows into the output, the loss and every gradient. The fix
(torch_nan_attention_mask_fixed.py) fills with the dtype's lowest finite
value instead, so a fully masked row attends uniformly and stays finite.

Run:    python examples/torch_nan_attention_mask.py           (prints the NaN loss)
Step:   autograd-viz run examples/torch_nan_attention_mask.py (press f, then c: stops at it)
Report: autograd-viz nan examples/torch_nan_attention_mask.py (NaN born at softmax, in
        encoder.attention)
"""

import math

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        scores = self.query(x) @ self.key(x).transpose(1, 2) / math.sqrt(x.shape[-1])
        scores = scores.masked_fill(padding[:, None, :], torch.finfo(scores.dtype).min)
        weights = scores.softmax(dim=-1)
        return weights @ self.value(x)


class Encoder(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.attention = Attention(width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.attention(x, padding))


class Model(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.encoder = Encoder(width)
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x, padding)).mean()


def main() -> None:
    torch.manual_seed(0)
    model = Model(8)
    x = torch.randn(2, 4, 8)
    padding = torch.tensor([[False, False, True, True], [True, True, True, True]])
    loss = model(x, padding)
    loss.backward()
    print("loss =", loss.item())
    print("head.weight.grad =", model.head.weight.grad.tolist())


if __name__ == "__main__":
    main()
