"""A classic NaN in PyTorch: a softmax written by hand overflows.

``exp`` of a logit above about 88.7 is ``inf`` in float32; ``inf / inf`` in
the normalization is NaN, and so is the loss. PyTorch's anomaly mode names
a later backward node; the Inf was born at the ``exp``. The fix
(torch_nan_softmax_overflow_fixed.py) subtracts each row's maximum first, as
``torch.softmax`` does (or calls ``log_softmax``).

Run:    python examples/torch_nan_softmax_overflow.py           (prints the NaN loss)
Step:   autograd-viz run examples/torch_nan_softmax_overflow.py (press f, then c: stops at it)
Report: autograd-viz nan examples/torch_nan_softmax_overflow.py (Inf born at aten.exp: overflow)
"""

import torch
from torch import nn


def softmax_by_hand(logits: torch.Tensor) -> torch.Tensor:
    e = logits.exp()  # born here
    return e / e.sum(dim=1, keepdim=True)


def main() -> None:
    layer = nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[2.0, 30.0], [-1.0, 1.0], [0.5, -2.0]]))
    x = torch.tensor([[0.5, 0.1], [0.2, 3.3]])  # 0.2 * 2 + 3.3 * 30 = 99.4: exp overflows
    labels = torch.tensor([0, 0])
    probs = softmax_by_hand(layer(x))
    loss = -probs[torch.arange(2), labels].log().mean()
    loss.backward()
    print("loss =", loss.item())
    print("weight.grad =", layer.weight.grad.tolist())


if __name__ == "__main__":
    main()
