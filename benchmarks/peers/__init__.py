"""The peers the suite compares, one small module each, loaded by name.

Every peer module offers some of these functions; a workload uses a peer only
where it has the function:

* ``chain(n)``: ``y = y * 1.0001 + 0.0``, ``n`` times, then backward.
* ``fan_in(n, join)``: ``x * c_i`` for ``n`` constants, joined by a binary add
  tree (``join="tree"``) or one concatenation and a sum (``"cat"``).
* ``mlp(data)``: one forward and backward of :class:`benchmarks.peers.common.MlpData`.
* ``chain_phases(n)``: the chain as a generator that pauses after each phase
  (see :mod:`benchmarks.memory`).

Each timed function returns ``(timings, check)``: seconds per phase and a
number the workload compares with the expected gradient.

Usage: imported by ``python -m benchmarks.run --peer ours,torch,...``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

PEERS = {
    "ours": "benchmarks.peers.ours",
    "torch": "benchmarks.peers.pytorch",
    "hips": "benchmarks.peers.hips",
    "micrograd": "benchmarks.peers.micrograd_values",
    "tape": "benchmarks.peers.tape_floor",
    "numpy": "benchmarks.peers.numpy_by_hand",
}
"""``--peer`` name -> module, in the order peers run and are shown."""


def load(names: list[str]) -> tuple[dict[str, ModuleType], list[str]]:
    """The peer modules that import, and a note for each one that does not."""
    loaded: dict[str, ModuleType] = {}
    missing: list[str] = []
    for name, module in PEERS.items():
        if name not in names:
            continue
        try:
            loaded[name] = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{name}: skipped, not importable here ({exc})")
    return loaded, missing
