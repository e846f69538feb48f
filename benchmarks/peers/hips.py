"""HIPS autograd: tracing boxes through ``autograd.numpy``, a dict-based reverse pass.

The forward phase is ``make_vjp`` (it runs the function and records the
graph); the backward phase is the returned ``vjp``.

Usage: ``python -m benchmarks.run --peer hips`` (``pip install autograd``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import autograd.numpy as anp
import numpy as np
from autograd.core import make_vjp
from autograd.tracer import getval

from benchmarks.harness import Timings, UnsupportedError, now
from benchmarks.peers.common import STEP, MlpData, fan_constants, tree_sum

CAT_LIMIT = 5_000
"""Widest fan-in joined by ``concatenate``: each input's VJP sums the sizes before it,
so building the graph takes O(n²) (0.7 s at n=1,000, 7.5 s at n=4,000)."""


def _timed(function: Callable[[Any], Any], x: Any) -> tuple[Timings, Any]:
    start = now()
    vjp, out = make_vjp(function, x)
    built = now()
    grad = vjp(np.ones_like(out))
    done = now()
    return {"forward": built - start, "backward": done - built, "step": done - start}, grad


def _chain(n: int) -> Callable[[Any], Any]:
    def function(x: Any) -> Any:
        y = x
        for _ in range(n):
            y = y * STEP + 0.0
        return y

    return function


def chain(n: int) -> tuple[Timings, float]:
    timings, grad = _timed(_chain(n), np.array([1.0]))
    del timings["step"]
    return timings, float(grad[0])


def fan_in(n: int, join: str) -> tuple[Timings, float]:
    if join == "cat" and n > CAT_LIMIT:
        raise UnsupportedError(
            f"concatenate's VJP setup is quadratic in its inputs; skipped above n={CAT_LIMIT:,}"
        )
    constants = fan_constants(n)

    def function(x: Any) -> Any:
        parts = [x * c for c in constants]
        if join == "tree":
            return tree_sum(parts, anp.add)
        return anp.sum(anp.concatenate(parts))

    timings, grad = _timed(function, np.array([1.0]))
    del timings["step"]
    return timings, float(np.asarray(grad).ravel()[0])


def mlp(data: MlpData) -> tuple[Timings, float]:
    rows = np.arange(len(data.targets))

    def loss(params: list[Any]) -> Any:
        h = data.inputs
        layers = len(params) // 2
        for i in range(layers):
            h = anp.dot(h, params[i]) + params[layers + i]
            if i < layers - 1:
                h = anp.tanh(h)
        # The shift cancels in the gradient, so it is taken as a constant.
        shifted = h - getval(h).max(axis=1, keepdims=True)
        logp = shifted - anp.log(anp.sum(anp.exp(shifted), axis=1, keepdims=True))
        return -anp.mean(logp[rows, data.targets])

    timings, grads = _timed(loss, [*data.weights, *data.biases])
    return timings, float(np.linalg.norm(grads[0]))


def chain_phases(n: int) -> Iterator[None]:
    x = np.array([1.0])
    yield
    vjp, y = make_vjp(_chain(n), x)
    yield
    grad = vjp(np.ones_like(y))
    yield
    del vjp, y
    yield
    return float(grad[0])
