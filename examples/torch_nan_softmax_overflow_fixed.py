"""torch_nan_softmax_overflow.py, fixed: the loss uses ``log_softmax``.

``log_softmax`` subtracts each row's maximum before ``exp``, so nothing
overflows, and ``nll_loss`` takes the log-probabilities directly.

Run:    python examples/torch_nan_softmax_overflow_fixed.py
Step:   autograd-viz run examples/torch_nan_softmax_overflow_fixed.py (press f, then c: no stop)
Report: autograd-viz nan examples/torch_nan_softmax_overflow_fixed.py (nothing found, exit 0)
"""

import torch
from torch import nn


def main() -> None:
    layer = nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[2.0, 30.0], [-1.0, 1.0], [0.5, -2.0]]))
    x = torch.tensor([[0.5, 0.1], [0.2, 3.3]])
    labels = torch.tensor([0, 0])
    loss = nn.functional.nll_loss(layer(x).log_softmax(dim=1), labels)
    loss.backward()
    print("loss =", loss.item())
    print("weight.grad =", layer.weight.grad.tolist())


if __name__ == "__main__":
    main()
