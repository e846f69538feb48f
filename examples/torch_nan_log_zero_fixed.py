"""torch_nan_log_zero.py, fixed: the loss is computed from the logits.

``binary_cross_entropy_with_logits`` never forms ``log(1 - sigmoid(z))``; it
uses ``log1p(exp(-|z|))``, finite for every logit.

Run:    python examples/torch_nan_log_zero_fixed.py
Step:   autograd-viz run examples/torch_nan_log_zero_fixed.py (press f, then c: no stop)
Report: autograd-viz nan examples/torch_nan_log_zero_fixed.py (nothing found, exit status 0)
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


def main() -> None:
    model = Classifier()
    x = torch.tensor([[10.0, -8.0, 9.0], [0.1, 0.2, 0.3]])
    labels = torch.tensor([[1.0], [0.0]])
    loss = nn.functional.binary_cross_entropy_with_logits(model(x), labels)
    loss.backward()
    print("loss =", loss.item())
    print("weight.grad =", model.linear.weight.grad.tolist())


if __name__ == "__main__":
    main()
