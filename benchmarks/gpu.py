"""GPU benchmarks: the engine on CuPy against CuPy written by hand and PyTorch CUDA.

Two workloads, each the GPU version of a suite workload (see README.md):

* ``W3``: one MLP step (forward and backward) of a float32 MLP whose layers are
  4096 wide, batch 4096, tanh, cross entropy. The arithmetic dominates: the figure
  says what the engine's Python adds around CuPy's kernels.
* ``W1``: the chain ``y = y * 1.0001 + 0.0`` on a one-element float64 array on the
  GPU: each node is one tiny kernel, so the figure is the engine's overhead per
  node (scheduling, the hand-off to the ``cuda:0`` worker thread, kernel launches).

Peers: ``ours`` (the engine on ``cuda:0``), ``cupy`` (the same math written by hand
in CuPy, no graph: the floor) and ``torch`` (PyTorch CUDA, when it is importable and
sees the GPU). Every phase ends with a stream synchronization, so a figure is GPU
time, not launch time. Contenders alternate within each repetition and each figure
is a median (see Note [Interleaving] in :mod:`benchmarks.harness`).

Without a GPU the benchmark prints why and exits with status 2. ``--fake`` runs it
on the CPU on the fake CuPy of ``tests/gpu/fakecupy.py``: a smoke test of the code,
not a measurement (use small ``--batch``, ``--width`` and ``--sizes``).

Usage:
    python -m benchmarks.gpu [--workload W1,W3] [--peer ours,cupy,torch] [--repeat 5]
        [--gc both|on|off] [--sizes 1e3,1e4] [--batch 4096] [--width 4096]
        [--out results/gpu.jsonl] [--fake]

Tables are printed with rich; every figure is appended as a JSON line to ``--out``
(relative paths are taken from ``benchmarks/``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from time import perf_counter
from types import ModuleType
from typing import Any

import numpy as np
from rich.console import Console

import engine
import engine.functional as F
from benchmarks.harness import Case, Contender, Timings, Workload, check_close, measure
from benchmarks.peers import numpy_by_hand
from benchmarks.peers.common import STEP, MlpData
from benchmarks.run import GC_MODES, cell_record, environment, parse_list, parse_sizes, render
from engine import devices

HERE = Path(__file__).resolve().parent
WORKLOADS = ("W1", "W3")
PEERS = ("ours", "cupy", "torch")
NO_GPU_STATUS = 2
"""Exit status when there is no GPU to measure on (and no ``--fake``)."""
CUDA = engine.device("cuda:0")
CHECK_RTOL = 1e-3
"""float32 on the GPU against the float64 step written by hand."""


@dataclass(frozen=True)
class Gpu:
    """What the contenders run on."""

    xp: ModuleType
    """CuPy, or the fake CuPy under ``--fake``."""
    torch: Any
    """PyTorch with CUDA, or ``None`` when it cannot run here."""
    name: str
    """The GPU's name, for the JSON lines."""

    def sync(self) -> None:
        """Wait for the GPU (every queued kernel of ``cuda:0``)."""
        self.xp.cuda.Device(0).synchronize()


# -- W3: one MLP step ------------------------------------------------------------------


@cache
def mlp_host_data(batch: int, width: int) -> MlpData:
    """The batch and parameters of a ``width``-``width``-``width``-10 MLP, float32, on the host."""
    return MlpData.random(batch, (width, width, width, 10), np.dtype(np.float32))


def _on_device(xp: ModuleType, data: MlpData, dtype: Any = None) -> MlpData:
    def put(a: np.ndarray) -> Any:
        return xp.asarray(a if dtype is None else a.astype(dtype))

    return MlpData(
        put(data.inputs),
        xp.asarray(data.targets),
        tuple(put(w) for w in data.weights),
        tuple(put(b) for b in data.biases),
    )


def mlp_step(
    lib: Any, functional: Any, params: tuple[Any, ...], inputs: Any, targets: Any, sync: Callable
) -> tuple[Timings, float]:
    """One step through a PyTorch-like library (ours or torch) on leaves already on the GPU."""
    half = len(params) // 2
    weights, biases = params[:half], params[half:]
    for p in params:
        p.grad = None
    sync()
    start = perf_counter()
    h = inputs
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        h = h @ w + b
        if i < len(weights) - 1:
            h = h.tanh()
    loss = functional.cross_entropy(h, targets)
    sync()
    built = perf_counter()
    loss.backward()
    sync()
    done = perf_counter()
    timings = {"forward": built - start, "backward": done - built, "step": done - start}
    return timings, float((weights[0].grad * weights[0].grad).sum().item()) ** 0.5


def mlp(gpu: Gpu, peers: list[str], batch: int, width: int) -> Workload:
    """W3 on the GPU: its one case and its contenders."""

    @cache
    def expected() -> float:
        data64 = _on_device(gpu.xp, mlp_host_data(batch, width), np.float64)
        return numpy_by_hand.mlp(data64, gpu.xp, gpu.sync)[1]

    @cache
    def ours_leaves() -> tuple[tuple[Any, ...], Any, Any]:
        data = mlp_host_data(batch, width)
        params = tuple(
            engine.tensor(p, device=CUDA, requires_grad=True) for p in (*data.weights, *data.biases)
        )
        return (
            params,
            engine.tensor(data.inputs, device=CUDA),
            engine.tensor(data.targets, device=CUDA),
        )

    @cache
    def torch_leaves() -> tuple[tuple[Any, ...], Any, Any]:
        torch, data = gpu.torch, mlp_host_data(batch, width)
        params = tuple(
            torch.tensor(p, device="cuda", requires_grad=True)
            for p in (*data.weights, *data.biases)
        )
        return (
            params,
            torch.tensor(data.inputs, device="cuda"),
            torch.tensor(data.targets, device="cuda"),
        )

    @cache
    def cupy_data() -> MlpData:
        return _on_device(gpu.xp, mlp_host_data(batch, width))

    def checked(name: str, run: Callable[[], tuple[Timings, float]]) -> Contender:
        def contender(case: Case) -> Timings:
            timings, norm = run()
            check_close(f"{name} mlp on the GPU", norm, expected(), CHECK_RTOL)
            return timings

        return contender

    runs: dict[str, Callable[[], tuple[Timings, float]]] = {
        "ours": lambda: mlp_step(engine, F, *ours_leaves(), sync=gpu.sync),
        "cupy": lambda: numpy_by_hand.mlp(cupy_data(), gpu.xp, gpu.sync),
    }
    if gpu.torch is not None:
        import torch.nn.functional as torch_functional

        runs["torch"] = lambda: mlp_step(
            gpu.torch, torch_functional, *torch_leaves(), sync=gpu.torch.cuda.synchronize
        )
    widths = f"{width}-{width}-{width}-10"
    return Workload(
        key="W3-gpu",
        title=f"W3 on the GPU: MLP {widths}, float32, tanh, cross entropy, ms per step",
        unit="ms/step",
        scale=1e3,
        cases=lambda _: [Case(f"batch {batch}", {"batch": batch, "width": width}, 1)],
        contenders={name: checked(name, run) for name, run in runs.items() if name in peers},
        shown=("forward", "backward", "step"),
        references=("torch", "cupy"),
        ratios=("step",),
        notes=(
            "cupy: forward and backward written by hand in CuPy (the floor).",
            "Every phase ends with a synchronization of the GPU.",
        ),
    )


# -- W1: engine overhead per node ----------------------------------------------------------


def chain_by_hand(xp: ModuleType, n: int, sync: Callable[[], None]) -> tuple[Timings, float]:
    """The chain written out in ``xp``: one kernel per step forward and backward, no graph."""
    x = xp.asarray(np.array([1.0]))
    sync()
    start = perf_counter()
    y = x
    for _ in range(n):
        y = y * STEP + 0.0
    sync()
    built = perf_counter()
    grad = xp.ones_like(y)
    for _ in range(n):
        grad = grad * STEP
    sync()
    done = perf_counter()
    return {"forward": built - start, "backward": done - built}, float(grad[0])


def chain_graph(lib: Any, device: Any, n: int, sync: Callable[[], None]) -> tuple[Timings, float]:
    """The chain through a PyTorch-like library (ours or torch) on the GPU."""
    x = lib.tensor([1.0], dtype=lib.float64, device=device, requires_grad=True)
    sync()
    start = perf_counter()
    y = x
    for _ in range(n):
        y = y * STEP + 0.0
    sync()
    built = perf_counter()
    y.backward()
    sync()
    done = perf_counter()
    return {"forward": built - start, "backward": done - built}, float(x.grad.item())


def chain(gpu: Gpu, peers: list[str], sizes: list[int] | None) -> Workload:
    """W1 on the GPU: engine overhead per node of a chain of one-element kernels."""

    def checked(name: str, run: Callable[[int], tuple[Timings, float]]) -> Contender:
        def contender(case: Case) -> Timings:
            n = case.params["n"]
            timings, grad = run(n)
            check_close(f"{name} chain on the GPU n={n}", grad, STEP**n, 1e-9)
            return timings

        return contender

    runs: dict[str, Callable[[int], tuple[Timings, float]]] = {
        "ours": lambda n: chain_graph(engine, CUDA, n, gpu.sync),
        "cupy": lambda n: chain_by_hand(gpu.xp, n, gpu.sync),
    }
    if gpu.torch is not None:
        runs["torch"] = lambda n: chain_graph(gpu.torch, "cuda", n, gpu.torch.cuda.synchronize)
    return Workload(
        key="W1-gpu",
        title="W1 on the GPU: y = y * 1.0001 + 0.0 on one float64 element, µs per node",
        unit="µs/node",
        scale=1e6,
        cases=lambda sizes: [Case(f"n={n:,}", {"n": n}, 2 * n) for n in sizes or [1_000, 10_000]],
        contenders={name: checked(name, run) for name, run in runs.items() if name in peers},
        shown=("forward", "backward"),
        references=("torch", "cupy"),
        notes=("cupy: the loop written by hand, no graph (the limit: kernel launches alone).",),
    )


# -- the GPU -------------------------------------------------------------------------------


def _torch_cuda(console: Console) -> Any:
    try:
        import torch
    except ImportError as exc:
        console.print(f"[yellow]torch: skipped, not importable here ({exc})[/yellow]")
        return None
    if not torch.cuda.is_available():
        console.print("[yellow]torch: skipped, this PyTorch build does not see a GPU[/yellow]")
        return None
    return torch


@contextmanager
def _fake_cupy() -> Iterator[ModuleType]:
    """The fake CuPy as the engine's CuPy, for the block (a smoke test on the CPU)."""
    from tests.gpu import fakecupy

    fakecupy.reset()
    saved = devices._cupy_module
    devices._cupy_module = fakecupy
    try:
        yield fakecupy
    finally:
        engine.get_default_engine().shutdown()
        devices._cupy_module = saved


def _gpu_name(xp: ModuleType) -> str:
    properties = getattr(xp.cuda.runtime, "getDeviceProperties", None)
    if properties is None:
        return "fake CuPy on the CPU"
    name = properties(0)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


# -- command line --------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workload",
        type=lambda text: parse_list(text, WORKLOADS, "workload"),
        default=list(WORKLOADS),
        help="comma-separated, from W1,W3 (default: both)",
    )
    parser.add_argument(
        "--peer",
        type=lambda text: parse_list(text, PEERS, "peer"),
        default=list(PEERS),
        help="comma-separated, from ours,cupy,torch (default: all)",
    )
    parser.add_argument("--repeat", type=int, default=5, help="repetitions per cell (default: 5)")
    parser.add_argument("--gc", choices=tuple(GC_MODES), default="both", help="default: both")
    parser.add_argument(
        "--sizes", type=parse_sizes, default=None, help="W1 chain steps (default: 1e3,1e4)"
    )
    parser.add_argument("--batch", type=int, default=4096, help="W3 batch (default: 4096)")
    parser.add_argument("--width", type=int, default=4096, help="W3 layer width (default: 4096)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results/gpu.jsonl"),
        help="JSON lines file, relative to benchmarks/ (default: results/gpu.jsonl)",
    )
    parser.add_argument(
        "--fake",
        action="store_true",
        help="run on the fake CuPy of tests/gpu on the CPU: a smoke test, not a measurement",
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.batch < 1 or args.width < 1:
        parser.error("--batch and --width must be positive")
    return args


def run(args: argparse.Namespace, gpu: Gpu, console: Console) -> None:
    """Measure the selected workloads on ``gpu``; print the tables, append the JSON lines."""
    out = args.out if args.out.is_absolute() else HERE / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**environment(), "gpu": gpu.name, "cupy": getattr(gpu.xp, "__version__", None)}
    for key in args.workload:
        if key == "W3":
            workload = mlp(gpu, args.peer, args.batch, args.width)
        else:
            workload = chain(gpu, args.peer, args.sizes)
        with console.status(workload.key) as status:
            cells = measure(
                workload, workload.cases(args.sizes), args.repeat, GC_MODES[args.gc], status.update
            )
        console.print(render(workload, cells))
        for note in workload.notes:
            console.print(f"[dim]{note}[/dim]")
        with out.open("a", encoding="utf-8") as file:
            for cell in cells:
                record = cell_record(workload, cell, args.repeat)
                file.write(json.dumps({**record, **env, "fake": args.fake}) + "\n")
    console.print(f"[dim]appended to {out}[/dim]")


def main(argv: list[str] | None = None) -> int:
    """Run the GPU benchmarks; exit status 2 when there is no GPU (and no ``--fake``)."""
    args = parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=150)
    if args.fake:
        console.print(
            "[yellow]--fake: CuPy is imitated by NumPy on the CPU; the figures "
            "measure nothing about a GPU[/yellow]"
        )
        with _fake_cupy() as fake:
            run(args, Gpu(fake, None, _gpu_name(fake)), console)
        return 0
    try:
        xp = devices._cupy()
    except RuntimeError as exc:
        console.print(
            f"No GPU to benchmark on: {exc}. (--fake runs this script on the CPU, as a smoke "
            f"test.)",
            style="red",
            markup=False,
        )
        return NO_GPU_STATUS
    torch = _torch_cuda(console) if "torch" in args.peer else None
    run(args, Gpu(xp, torch, _gpu_name(xp)), console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
