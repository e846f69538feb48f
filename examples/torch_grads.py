"""A fine-tuning step with three classic reasons a parameter gets no gradient.

A frozen backbone (meant), an auxiliary head whose loss was never added, and a
projection cut by ``.detach()``. Run it under ``autograd-viz grads`` to see
each parameter that got no gradient, why, and at which line:

    autograd-viz grads examples/torch_grads.py

Run: python examples/torch_grads.py
"""

from __future__ import annotations

import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32))
        self.project = nn.Linear(32, 32)
        self.head = nn.Linear(32, 4)
        self.aux_head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.backbone(x)
        projected = self.project(features).detach()  # a leftover from debugging
        return self.head(features + projected), self.aux_head(features)


def main() -> None:
    torch.manual_seed(0)
    model = Classifier()
    model.backbone.requires_grad_(False)  # fine-tune the heads only
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    for step in range(3):
        logits, aux_logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)  # the aux loss was meant to be added
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
