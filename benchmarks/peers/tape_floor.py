"""The floor: :mod:`benchmarks.tape`, a sequential tape with nothing but the math.

Usage: ``python -m benchmarks.run --peer tape``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from benchmarks.harness import Timings, now
from benchmarks.peers.common import STEP, MlpData, fan_constants, tree_sum
from benchmarks.tape import Tape, Var


def chain(n: int) -> tuple[Timings, float]:
    tape, x = Tape(), Var(np.array([1.0]))
    start = now()
    y = x
    for _ in range(n):
        y = tape.add(tape.mul(y, STEP), 0.0)
    built = now()
    tape.backward(y)
    done = now()
    return {"forward": built - start, "backward": done - built}, float(x.grad[0])


def fan_in(n: int, join: str) -> tuple[Timings, float]:
    tape, x = Tape(), Var(np.array([1.0]))
    constants = fan_constants(n)
    start = now()
    parts = [tape.mul(x, c) for c in constants]
    loss = tree_sum(parts, tape.add) if join == "tree" else tape.sum(tape.cat(parts))
    del parts
    built = now()
    tape.backward(loss)
    done = now()
    return {"forward": built - start, "backward": done - built}, float(x.grad[0])


def mlp(data: MlpData) -> tuple[Timings, float]:
    tape = Tape()
    weights = [Var(w) for w in data.weights]
    biases = [Var(b) for b in data.biases]
    start = now()
    h = Var(data.inputs, requires_grad=False)
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        h = tape.add(tape.matmul(h, w), b)
        if i < len(weights) - 1:
            h = tape.tanh(h)
    loss = tape.nll(tape.log_softmax(h), data.targets)
    built = now()
    tape.backward(loss)
    done = now()
    timings = {"forward": built - start, "backward": done - built, "step": done - start}
    return timings, float(np.linalg.norm(weights[0].grad))


def chain_phases(n: int) -> Iterator[None]:
    tape, x = Tape(), Var(np.array([1.0]))
    yield
    y = x
    for _ in range(n):
        y = tape.add(tape.mul(y, STEP), 0.0)
    yield
    tape.backward(y)
    yield
    del y, tape
    yield
    return float(x.grad[0])
