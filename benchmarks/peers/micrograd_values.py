"""karpathy's micrograd: one Python float per ``Value``, a recursive topological sort.

It fits the scalar workloads only. Its backward recurses once per node, so
the recursion limit is raised to fit the graph while it runs.

Usage: ``python -m benchmarks.run --peer micrograd`` (``pip install micrograd``).
"""

from __future__ import annotations

import operator
import sys
from typing import Any

from micrograd.engine import Value

from benchmarks.harness import Timings, UnsupportedError, now
from benchmarks.peers.common import STEP, fan_constants, tree_sum


def _backward(out: Value, nodes: int) -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 2 * nodes + 1000))
    try:
        out.backward()
    finally:
        sys.setrecursionlimit(limit)


def chain(n: int) -> tuple[Timings, float]:
    x = Value(1.0)
    start = now()
    y = x
    for _ in range(n):
        y = y * STEP + 0.0
    built = now()
    _backward(y, 4 * n)
    done = now()
    return {"forward": built - start, "backward": done - built}, x.grad


def fan_in(n: int, join: str) -> tuple[Timings, float]:
    if join != "tree":
        raise UnsupportedError("micrograd has no concatenation")
    x = Value(1.0)
    constants = fan_constants(n)
    start = now()
    loss = tree_sum([x * c for c in constants], operator.add)
    built = now()
    _backward(loss, 3 * n)
    done = now()
    return {"forward": built - start, "backward": done - built}, x.grad


def mlp(data: Any) -> tuple[Timings, float]:
    raise UnsupportedError("micrograd works on scalars; a 1024-wide MLP step would take hours")
