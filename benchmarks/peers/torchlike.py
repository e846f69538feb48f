"""Workloads written once for the PyTorch API, which our engine shares.

Usage: bound to ``engine`` in :mod:`benchmarks.peers.ours` and to ``torch``
in :mod:`benchmarks.peers.pytorch`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from benchmarks.harness import Timings, now
from benchmarks.peers.common import STEP, MlpData, fan_constants, tree_sum


def leaf(lib: ModuleType) -> Any:
    return lib.tensor([1.0], dtype=lib.float64, requires_grad=True)


def grad_of(x: Any) -> float:
    return float(x.grad.numpy()[0])


def chain(lib: ModuleType, n: int) -> tuple[Timings, float]:
    x = leaf(lib)
    start = now()
    y = x
    for _ in range(n):
        y = y * STEP + 0.0
    built = now()
    y.backward()
    done = now()
    return {"forward": built - start, "backward": done - built}, grad_of(x)


def fan_in(lib: ModuleType, n: int, join: str) -> tuple[Timings, float]:
    x = leaf(lib)
    constants = fan_constants(n)
    start = now()
    parts = [x * c for c in constants]
    loss = tree_sum(parts, operator.add) if join == "tree" else lib.cat(parts).sum()
    del parts
    built = now()
    loss.backward()
    done = now()
    return {"forward": built - start, "backward": done - built}, grad_of(x)


def _backward(loss: Any) -> None:
    loss.backward()


def mlp(
    lib: ModuleType,
    functional: ModuleType,
    data: MlpData,
    backward: Callable[[Any], None] = _backward,
) -> tuple[Timings, float]:
    """One MLP step; ``backward(loss)`` runs the backward (a listener's, say)."""
    weights = [lib.tensor(w, requires_grad=True) for w in data.weights]
    biases = [lib.tensor(b, requires_grad=True) for b in data.biases]
    inputs, targets = lib.tensor(data.inputs), lib.tensor(data.targets)
    start = now()
    h = inputs
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        h = h @ w + b
        if i < len(weights) - 1:
            h = h.tanh()
    loss = functional.cross_entropy(h, targets)
    built = now()
    backward(loss)
    done = now()
    timings = {"forward": built - start, "backward": done - built, "step": done - start}
    return timings, float((weights[0].grad * weights[0].grad).sum().item()) ** 0.5


def chain_phases(lib: ModuleType, n: int) -> Iterator[None]:
    x = leaf(lib)
    yield
    y = x
    for _ in range(n):
        y = y * STEP + 0.0
    yield
    y.backward()
    yield
    del y
    yield
    return grad_of(x)
