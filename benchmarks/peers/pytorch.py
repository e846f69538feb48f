"""PyTorch on the CPU, the reference every ratio is taken against.

Usage: ``python -m benchmarks.run --peer torch``.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F

from benchmarks.peers import torchlike

chain = partial(torchlike.chain, torch)
fan_in = partial(torchlike.fan_in, torch)
mlp = partial(torchlike.mlp, torch, F)
chain_phases = partial(torchlike.chain_phases, torch)
