"""What checking a PyTorch step for NaN and Inf costs, against plain and ``detect_anomaly``.

Run: .venv/bin/python -m benchmarks.torch_nan [--repeat 15] [--threads 1]

W3's step (1024-1024-1024-10, tanh, cross entropy, batch 256, float32,
forward and backward timed together), in two spellings: the tensors of
``benchmarks.workloads.mlp_data`` multiplied by hand, as the peers do, and
the same network as an ``nn.Sequential`` (module hooks then run too). Each
is run, interleaved (Note [Interleaving] in harness.py):

* plain PyTorch;
* ``torch.autograd.detect_anomaly()``: NaN in backward outputs, forward stacks;
* forward checks: :class:`TorchNanChecker`, every aten op's outputs;
* forward + backward checks: the same with the bridge watching the backward
  and every node's outputs checked, raising at the first finding (``first``),
  nothing recorded: what ``watch_nan(first=True)`` costs a PyTorch step;
* ``watch_nan()``: the above, collecting, with every event recorded into a
  trace (what ``autograd-viz nan`` runs).

Prints medians and bests (the best resists a busy machine); the target is
forward + backward checks ≤ 1.25× plain.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from autograd_viz.nan.forward.checks import TorchChecks, TorchNanChecker
from autograd_viz.nan.watch import watch_nan
from autograd_viz.sources.pytorch import watch_torch
from benchmarks.workloads import MLP_WIDTHS, mlp_data

Step = Callable[[], None]


def by_hand() -> tuple[str, Step]:
    data = mlp_data(256, "float32")
    weights = [torch.tensor(w, requires_grad=True) for w in data.weights]
    biases = [torch.tensor(b, requires_grad=True) for b in data.biases]
    x, y = torch.tensor(data.inputs), torch.tensor(data.targets)

    def step() -> None:
        for p in (*weights, *biases):
            p.grad = None
        h = x
        for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
            h = h @ w + b
            if i < len(weights) - 1:
                h = h.tanh()
        torch.nn.functional.cross_entropy(h, y).backward()

    return "W3 tensors, batch 256", step


def sequential() -> tuple[str, Step]:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for a, b in itertools.pairwise(MLP_WIDTHS):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers[:-1])
    data = mlp_data(256, "float32")
    x, y = torch.tensor(data.inputs), torch.tensor(data.targets)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()

    return "W3 nn.Sequential, batch 256", step


def _anomaly() -> AbstractContextManager[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.autograd.detect_anomaly()


@contextmanager
def _forward_checks() -> Iterator[None]:
    with TorchNanChecker(TorchChecks(first=True)):
        yield


@contextmanager
def _all_checks() -> Iterator[None]:
    with watch_torch(), TorchNanChecker(TorchChecks(first=True)):
        yield


WAYS: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "plain": nullcontext,
    "detect_anomaly()": _anomaly,
    "forward checks": _forward_checks,
    "forward + backward checks": _all_checks,
    "watch_nan() (recorded)": watch_nan,
}


def measure(step: Step, repeat: int) -> dict[str, list[float]]:
    """Seconds of each step per way, ways interleaved, the collector off."""
    samples: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(repeat):
        for way, context in WAYS.items():
            gc.collect()
            gc.disable()
            try:
                started = time.perf_counter()
                with context():
                    step()
                samples[way].append(time.perf_counter() - started)
            finally:
                gc.enable()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="PyTorch's intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    table = Table(title="Checking a PyTorch step for NaN/Inf: interleaved repeats, gc off")
    columns = ("workload", "way", "median", "× plain", "× detect_anomaly", "best", "best × plain")
    for column in columns:
        table.add_column(column, justify="left" if column in ("workload", "way") else "right")
    for make in (by_hand, sequential):
        label, step = make()
        for _ in range(2):  # warm up every path once
            for context in WAYS.values():
                with context():
                    step()
        samples = measure(step, args.repeat)
        medians = {way: statistics.median(times) for way, times in samples.items()}
        best = {way: min(times) for way, times in samples.items()}
        base, anomaly = medians["plain"], medians["detect_anomaly()"]
        for way, seconds in medians.items():
            table.add_row(
                label,
                way,
                f"{seconds * 1e3:.2f} ms",
                f"{seconds / base:.2f}×",
                f"{seconds / anomaly:.2f}×",
                f"{best[way] * 1e3:.2f} ms",
                f"{best[way] / best['plain']:.2f}×",
            )
        table.add_section()
    Console(width=140).print(table)
    print(f"torch {torch.__version__}, {args.threads} intra-op thread(s); {args.repeat} repeats")


if __name__ == "__main__":
    main()
