"""Activation checkpointing in PyTorch: a backward inside the backward.

With ``use_reentrant=True``, PyTorch runs the checkpointed block's forward
again during backward and calls backward on it: a nested graph task, started
while ``CheckpointFunctionBackward`` runs. autograd-viz shows it as a graph
task of its own, nested in the node that started it:

    autograd-viz dot examples/torch_checkpoint.py -o ckpt.svg
    autograd-viz run examples/torch_checkpoint.py     # press t to switch graph tasks
"""

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
block = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
head = nn.Linear(8, 1)
x = torch.randn(4, 8, requires_grad=True)

hidden = checkpoint(block, x, use_reentrant=True)
loss = head(hidden).sum()
loss.backward()
print(f"loss {loss.item():.4f}, |x.grad| {x.grad.norm():.4f}")
