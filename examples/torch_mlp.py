"""A small PyTorch MLP trained for three steps: an unmodified PyTorch script.

Watch its backward passes with autograd-viz, no change to the script:

    autograd-viz run examples/torch_mlp.py              # step through PyTorch's real backward
    autograd-viz record examples/torch_mlp.py -o mlp.jsonl
    autograd-viz dot examples/torch_mlp.py -o mlp.svg   # the graph, parameters by name
"""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 4)
y = torch.randint(0, 3, (16,))

for step in range(3):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
