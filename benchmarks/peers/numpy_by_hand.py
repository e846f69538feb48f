"""The limit: the same math written out by hand in NumPy, with no graph at all.

The backward passes are the derivatives worked out on paper, one ufunc call
per step, so the figures are what the arithmetic and NumPy's call overhead
cost by themselves.

Usage: ``python -m benchmarks.run --peer numpy``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import numpy as np

from benchmarks.harness import Timings, now
from benchmarks.peers.common import STEP, MlpData, fan_constants, tree_sum


def chain(n: int) -> tuple[Timings, float]:
    x = np.array([1.0])
    start = now()
    y = x
    for _ in range(n):
        y = y * STEP + 0.0
    built = now()
    grad = np.ones_like(y)
    for _ in range(n):  # d(y + 0)/dy is 1: only the multiply costs anything
        grad = grad * STEP
    done = now()
    return {"forward": built - start, "backward": done - built}, float(grad[0])


def fan_in(n: int, join: str) -> tuple[Timings, float]:
    x = np.array([1.0])
    constants = fan_constants(n)
    start = now()
    parts = [x * c for c in constants]
    loss = tree_sum(parts, np.add) if join == "tree" else np.concatenate(parts).sum()
    built = now()
    seed = np.ones_like(loss)
    # Every add passes its gradient on unchanged, so each part receives the seed.
    part_grads = [seed] * n if join == "tree" else np.split(np.broadcast_to(seed, n), n)
    grad = np.zeros_like(x)
    for c, g in zip(constants, part_grads, strict=True):
        grad = grad + g * c
    done = now()
    return {"forward": built - start, "backward": done - built}, float(grad[0])


def _no_sync() -> None:
    pass


def mlp(
    data: MlpData, xp: ModuleType = np, sync: Callable[[], None] = _no_sync
) -> tuple[Timings, float]:
    """The step written out in ``xp`` (NumPy, or CuPy for the GPU runs, with ``sync``
    waiting for the device at each phase's end): the floor W3 is measured against."""
    weights, biases, batch = data.weights, data.biases, len(data.targets)
    rows = xp.arange(batch)
    sync()
    start = now()
    activations = [data.inputs]
    h = data.inputs
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        h = h @ w + b
        if i < len(weights) - 1:
            h = xp.tanh(h)
            activations.append(h)
    shifted = h - h.max(axis=1, keepdims=True)
    logp = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
    loss = -logp[rows, data.targets].mean()
    sync()
    built = now()
    delta = xp.exp(logp)
    delta[rows, data.targets] -= 1
    delta /= batch
    grads = []
    for i in reversed(range(len(weights))):
        grads.append((activations[i].T @ delta, delta.sum(axis=0)))
        if i:
            h = activations[i]
            delta = (delta @ weights[i].T) * (1 - h * h)
    sync()
    done = now()
    if not bool(xp.isfinite(loss)):
        raise FloatingPointError(f"the loss is {float(loss)}")
    timings = {"forward": built - start, "backward": done - built, "step": done - start}
    first = grads[-1][0]
    return timings, float(xp.sqrt((first * first).sum()))
