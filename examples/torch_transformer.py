"""One backward pass through a PyTorch TransformerEncoderLayer.

autograd-viz record examples/torch_transformer.py -o t.jsonl
autograd-viz replay t.jsonl      # parameters named as the module calls them:
                                 # self_attn.in_proj_weight, linear1.weight, ...
"""

import torch
from torch import nn

torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0)
tokens = torch.randn(5, 2, 16)  # (sequence, batch, features)
target = torch.randn(5, 2, 16)
loss = (layer(tokens) - target).pow(2).mean()
loss.backward()
print(f"loss {loss.item():.4f}, |grad of linear1.weight| {layer.linear1.weight.grad.norm():.4f}")
