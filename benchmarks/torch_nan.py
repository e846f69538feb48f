"""What checking a PyTorch step for NaN and Inf costs, against plain and ``detect_anomaly``.

Run: .venv/bin/python -m benchmarks.torch_nan [--repeat 8] [--steps 5] [--threads 1]

W3's step (1024-1024-1024-10, tanh, cross entropy, batch 256, float32,
forward and backward timed together), in two spellings: the tensors of
``benchmarks.workloads.mlp_data`` multiplied by hand, as the peers do, and
the same network as an ``nn.Sequential`` (module hooks then run too). Each
way below is entered once for a block of ``--steps`` steps, as a training run
enters it once (``autograd-viz nan SCRIPT`` enters ``watch_nan`` once for the
whole script); the blocks of the ways are interleaved (Note [Interleaving] in
harness.py), and a block's first step, which also pays for entering, is not
counted:

* plain PyTorch;
* ``torch.autograd.detect_anomaly()``: NaN in backward outputs, forward stacks;
* forward checks: :class:`TorchNanChecker`, every aten op's outputs;
* forward + backward checks: the same with the bridge watching the backward
  and every node's outputs checked, raising at the first finding (``first``),
  nothing recorded: what ``watch_nan(first=True)`` costs a PyTorch step;
* ``record()``: the bridge's recording alone, every gradient summarized, no
  check: the part of the next two rows that is the recording's;
* ``autograd-viz nan``: ``watch_nan(keep_trace=False)``, every check, every
  event recorded and each call read for the report as it ends (what the
  command runs without ``-o``);
* ``autograd-viz nan --values none``: the same, the recorder summarizing no gradient
  (the checks still read every one);
* ``watch_nan()``: as the command, every call kept in ``watch.trace``.

Prints, per way, the median and best of the steps' wall time and of the CPU
time of the thread that runs them (PyTorch runs a CPU backward on the calling
thread; with one intra-op thread all of a step's work is there, and time the
machine gives to other processes does not count), each against plain; and
what entering and leaving the way costs once (a block, not a step).
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
from autograd_viz.trace.recording import record
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


@contextmanager
def _recorded() -> Iterator[None]:
    with record():
        yield


@contextmanager
def _nan_command() -> Iterator[None]:
    with watch_nan(keep_trace=False):
        yield


@contextmanager
def _nan_command_without_values() -> Iterator[None]:
    with watch_nan(keep_trace=False, values="none"):
        yield


@contextmanager
def _trace_kept() -> Iterator[None]:
    with watch_nan():
        yield


WAYS: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "plain": nullcontext,
    "detect_anomaly()": _anomaly,
    "forward checks": _forward_checks,
    "forward + backward checks": _all_checks,
    "record() (no checks)": _recorded,
    "autograd-viz nan (recorded)": _nan_command,
    "autograd-viz nan --values none": _nan_command_without_values,
    "watch_nan() (trace kept)": _trace_kept,
}


class Samples:
    """One way's timings: each counted step's wall and thread CPU seconds, and each block's
    entering and leaving."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.enter_leave: list[float] = []


def measure(step: Step, repeat: int, steps: int) -> dict[str, Samples]:
    """Each way's samples: ``repeat`` blocks of ``steps`` steps each, the ways' blocks
    interleaved, the collector off while a step runs."""
    samples = {way: Samples() for way in WAYS}
    for _ in range(repeat):
        for way, context in WAYS.items():
            taken = samples[way]
            entering = time.perf_counter()
            manager = context()
            manager.__enter__()
            try:
                taken.enter_leave.append(time.perf_counter() - entering)
                for index in range(steps):
                    gc.collect()
                    gc.disable()
                    try:
                        wall, cpu = time.perf_counter(), time.thread_time()
                        step()
                        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
                    finally:
                        gc.enable()
                    if index:  # the first step of a block warms the way up
                        taken.wall.append(wall)
                        taken.cpu.append(cpu)
            finally:
                leaving = time.perf_counter()
                manager.__exit__(None, None, None)
                taken.enter_leave[-1] += time.perf_counter() - leaving
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=8, help="blocks per way")
    parser.add_argument("--steps", type=int, default=5, help="steps per block, the first uncounted")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch's intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    table = Table(title="Checking a PyTorch step for NaN/Inf: interleaved blocks, gc off in steps")
    columns = (
        "workload",
        "way",
        "wall median",
        "× plain",
        "best × plain",
        "CPU median",
        "× plain",
        "best × plain",
        "× detect_anomaly",
        "enter+leave",
    )
    for column in columns:
        table.add_column(column, justify="left" if column in ("workload", "way") else "right")
    for make in (by_hand, sequential):
        label, step = make()
        for context in WAYS.values():  # warm up every path once
            with context():
                step()
        samples = measure(step, args.repeat, max(args.steps, 2))
        plain = samples["plain"]
        anomaly = statistics.median(samples["detect_anomaly()"].cpu)
        for way, taken in samples.items():
            wall, cpu = statistics.median(taken.wall), statistics.median(taken.cpu)
            table.add_row(
                label,
                way,
                f"{wall * 1e3:.2f} ms",
                f"{wall / statistics.median(plain.wall):.2f}×",
                f"{min(taken.wall) / min(plain.wall):.2f}×",
                f"{cpu * 1e3:.2f} ms",
                f"{cpu / statistics.median(plain.cpu):.2f}×",
                f"{min(taken.cpu) / min(plain.cpu):.2f}×",
                f"{cpu / anomaly:.2f}×",
                f"{statistics.median(taken.enter_leave) * 1e3:.2f} ms",
            )
        table.add_section()
    Console(width=170).print(table)
    print(
        f"torch {torch.__version__}, {args.threads} intra-op thread(s); {args.repeat} blocks "
        f"of {max(args.steps, 2)} steps per way (the first of each not counted)"
    )


if __name__ == "__main__":
    main()
