"""A classic NaN in PyTorch: binary cross-entropy written by hand takes the log of 0.

``sigmoid`` of a large logit rounds to exactly 1.0 in float32, so
``log(1 - p)`` is ``-inf``; the label's ``(1 - y) = 0`` times ``-inf`` is NaN,
and the NaN flows back into the weights. The fix
(torch_nan_log_zero_fixed.py) computes the loss from the logits, as
``binary_cross_entropy_with_logits`` does.

Run:    python examples/torch_nan_log_zero.py           (prints the NaN gradient)
Step:   autograd-viz run examples/torch_nan_log_zero.py (press f, then c: stops at the NaN)
Report: autograd-viz nan examples/torch_nan_log_zero.py (Inf born at aten.log: log of 0)
"""

import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1, bias=False)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([[0.5, -1.5, 2.0]]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def bce_by_hand(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    p = logits.sigmoid()
    return -(labels * p.log() + (1.0 - labels) * (1.0 - p).log()).mean()  # born here


def main() -> None:
    model = Classifier()
    x = torch.tensor([[10.0, -8.0, 9.0], [0.1, 0.2, 0.3]])  # the first row saturates
    labels = torch.tensor([[1.0], [0.0]])
    loss = bce_by_hand(model(x), labels)
    loss.backward()
    print("loss =", loss.item())
    print("weight.grad =", model.linear.weight.grad.tolist())


if __name__ == "__main__":
    main()
