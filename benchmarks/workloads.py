"""The peer-against-peer workloads: W1 chain, W2 fan-in, W3 MLP step.

Each workload turns the peers that have its function (see
:mod:`benchmarks.peers`) into contenders that check their gradient against
the expected one after every run: a fast wrong answer is no benchmark.

Usage: ``python -m benchmarks.run --workload W1,W2,W3``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from types import ModuleType

import numpy as np

from benchmarks.harness import Case, Contender, Timings, Workload, check_close
from benchmarks.peers import numpy_by_hand
from benchmarks.peers.common import STEP, MlpData, fan_constants

MLP_WIDTHS = (1024, 1024, 1024, 10)
"""Input, two hidden layers, classes."""
MLP_DTYPES = ("float32", "float64")
CHECK_RTOL = {"float32": 1e-3, "float64": 1e-9}


def _contenders(
    peers: dict[str, ModuleType],
    function: str,
    run: Callable[[str, Callable[..., tuple[Timings, float]], Case], Timings],
) -> dict[str, Contender]:
    """One contender per peer that has ``function``; ``run`` calls and checks it."""
    out: dict[str, Contender] = {}
    for name, peer in peers.items():
        implementation = getattr(peer, function, None)
        if implementation is not None:
            out[name] = lambda case, name=name, impl=implementation: run(name, impl, case)
    return out


# -- W1 ------------------------------------------------------------------------------


def chain(peers: dict[str, ModuleType], sizes: list[int] | None) -> Workload:
    """W1: ``y = y * 1.0001 + 0.0`` on a one-element float64 array, ``n`` times."""

    def run(name: str, impl: Callable[..., tuple[Timings, float]], case: Case) -> Timings:
        n = case.params["n"]
        timings, grad = impl(n)
        check_close(f"{name} chain n={n}", grad, STEP**n, 1e-9)
        return timings

    def cases(sizes: list[int] | None) -> list[Case]:
        return [Case(f"n={n:,}", {"n": n}, 2 * n) for n in sizes or [1_000, 10_000, 100_000]]

    return Workload(
        key="W1",
        title="W1 chain: y = y * 1.0001 + 0.0 (2 nodes a step), µs per node",
        unit="µs/node",
        scale=1e6,
        cases=cases,
        contenders=_contenders(peers, "chain", run),
        shown=("forward", "backward"),
        references=("torch", "tape"),
        notes=(
            "micrograd works on Python floats, the others on one-element float64 arrays.",
            "numpy: the loop written by hand, no graph (the limit).",
        ),
    )


# -- W2 ------------------------------------------------------------------------------


def fan_in(peers: dict[str, ModuleType], sizes: list[int] | None) -> Workload:
    """W2: one input used by ``n`` ops ``x * c_i``, joined by an add tree or one cat."""

    def run(name: str, impl: Callable[..., tuple[Timings, float]], case: Case) -> Timings:
        n, join = case.params["n"], case.params["join"]
        timings, grad = impl(n, join)
        check_close(f"{name} fan-in {join} n={n}", grad, sum(fan_constants(n)), 1e-9)
        return timings

    def cases(sizes: list[int] | None) -> list[Case]:
        out = []
        for n in sizes or [10_000]:
            out.append(Case(f"tree n={n:,}", {"n": n, "join": "tree"}, 2 * n - 1))
            out.append(Case(f"cat n={n:,}", {"n": n, "join": "cat"}, n + 2))
        return out

    return Workload(
        key="W2",
        title="W2 fan-in: sum of x * c_i, by add tree or cat + sum, µs per node",
        unit="µs/node",
        scale=1e6,
        cases=cases,
        contenders=_contenders(peers, "fan_in", run),
        shown=("forward", "backward"),
        references=("torch", "tape"),
        notes=("nodes: tree 2n − 1 (n muls, n − 1 adds); cat n + 2 (n muls, cat, sum).",),
    )


# -- W3 ------------------------------------------------------------------------------


@cache
def mlp_data(batch: int, dtype: str) -> MlpData:
    """The (shared, cached) batch and parameters of one W3 case."""
    return MlpData.random(batch, MLP_WIDTHS, np.dtype(dtype))


@cache
def mlp_expected(batch: int, dtype: str) -> float:
    """‖∂loss/∂W₀‖ from the hand-written NumPy step, in float64."""
    data = mlp_data(batch, dtype)
    as64 = MlpData(
        data.inputs.astype(np.float64),
        data.targets,
        tuple(w.astype(np.float64) for w in data.weights),
        tuple(b.astype(np.float64) for b in data.biases),
    )
    return numpy_by_hand.mlp(as64)[1]


def mlp(peers: dict[str, ModuleType], sizes: list[int] | None) -> Workload:
    """W3: forward and backward of a 1024-1024-1024-10 tanh MLP with cross entropy."""

    def run(name: str, impl: Callable[..., tuple[Timings, float]], case: Case) -> Timings:
        batch, dtype = case.params["batch"], case.params["dtype"]
        timings, norm = impl(mlp_data(batch, dtype))
        check_close(f"{name} mlp {dtype}", norm, mlp_expected(batch, dtype), CHECK_RTOL[dtype])
        return timings

    def cases(sizes: list[int] | None) -> list[Case]:
        return [
            Case(f"batch {batch} {dtype}", {"batch": batch, "dtype": dtype}, 1)
            for batch in sizes or [256]
            for dtype in MLP_DTYPES
        ]

    widths = "-".join(map(str, MLP_WIDTHS))
    return Workload(
        key="W3",
        title=f"W3 MLP {widths}, tanh, cross entropy: forward + backward, ms per step",
        unit="ms/step",
        scale=1e3,
        cases=cases,
        contenders=_contenders(peers, "mlp", run),
        shown=("forward", "backward", "step"),
        references=("torch", "numpy"),
        ratios=("step",),
        notes=(
            "numpy: forward and backward written by hand (the floor); no optimizer update.",
            "torch multiplies with its own BLAS, the NumPy-based peers with NumPy's.",
        ),
    )


BUILDERS: dict[str, Callable[[dict[str, ModuleType], list[int] | None], Workload]] = {
    "W1": chain,
    "W2": fan_in,
    "W3": mlp,
}
"""Peer workloads by ``--workload`` key."""
