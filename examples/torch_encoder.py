"""One backward pass through a 12-layer PyTorch TransformerEncoder, drawn by module.

autograd-viz dot examples/torch_encoder.py -o encoder.svg
    # the twelve layers folded into one box marked × 12, the rest open
autograd-viz dot examples/torch_encoder.py -o layer3.svg --expand layers.3
    # layer 3 drawn whole, the other layers beside it
autograd-viz dot examples/torch_encoder.py -o near.svg --around layers.3.self_attn.in_proj_weight
    # the nodes near one parameter, named as the picture names it
"""

import torch
from torch import nn

torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0)
model = nn.TransformerEncoder(layer, num_layers=12, enable_nested_tensor=False)
tokens = torch.randn(5, 2, 16, requires_grad=True)  # (sequence, batch, features)
target = torch.randn(5, 2, 16)
loss = (model(tokens) - target).pow(2).mean()
loss.backward()
print(
    f"loss {loss.item():.4f}, |grad of layers.3.linear1.weight| "
    f"{model.layers[3].linear1.weight.grad.norm():.4f}"
)
