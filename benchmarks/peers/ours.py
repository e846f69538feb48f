"""Our engine (``import engine``), through the PyTorch API it shares.

Usage: ``python -m benchmarks.run --peer ours``.
"""

from __future__ import annotations

from functools import partial

import engine
import engine.functional as F
from benchmarks.peers import torchlike

chain = partial(torchlike.chain, engine)
fan_in = partial(torchlike.fan_in, engine)
mlp = partial(torchlike.mlp, engine, F)
chain_phases = partial(torchlike.chain_phases, engine)
