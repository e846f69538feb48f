"""Chain benchmark: the cost of one graph node, forward and backward.

The workload is ``y = y * 1.0001 + 0.0`` repeated ``n`` times on a
one-element float64 tensor, so the arithmetic is negligible and the numbers
measure the engine itself: building 2n nodes in the forward pass, then
scheduling and running them in ``y.backward()``. Each figure is the median of
several repeats, in microseconds per node, with Python's cyclic garbage
collector on and off (it dominates graph building for pure-Python engines).

When PyTorch is importable the same chain runs through it on the CPU,
alternating engine and PyTorch repeats so both see the same machine state.

Usage:
    python benchmarks/chain.py [--sizes 1e3,1e4,1e5] [--repeats 5] [--no-torch]

Results are printed as a table and appended as JSON lines to
``benchmarks/results/chain.jsonl``.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

RESULTS = Path(__file__).resolve().parent / "results" / "chain.jsonl"
NODES_PER_STEP = 2
"""``y * 1.0001`` and ``+ 0.0`` each record one node (MulBackward0, AddBackward0)."""


@dataclass
class Timings:
    """Wall-clock seconds of every repeat of one (library, n, gc) cell."""

    forward: list[float] = field(default_factory=list)
    backward: list[float] = field(default_factory=list)

    def per_node_us(self, n: int) -> tuple[float, float]:
        """Median forward and backward time in microseconds per node."""
        nodes = n * NODES_PER_STEP
        return (
            statistics.median(self.forward) / nodes * 1e6,
            statistics.median(self.backward) / nodes * 1e6,
        )


@contextmanager
def gc_mode(enabled: bool) -> Iterator[None]:
    """Run the block with Python's cyclic garbage collector on or off."""
    was_enabled = gc.isenabled()
    if enabled:
        gc.enable()
    else:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        else:
            gc.disable()


def _malloc_trim() -> Callable[[], object]:
    """glibc's ``malloc_trim(0)``; a no-op where the C library has none."""
    with suppress(OSError, AttributeError):
        trim = ctypes.CDLL(None).malloc_trim
        return lambda: trim(0)
    return lambda: None


settle_heap = _malloc_trim()
"""Consolidate and trim the C heap before a timed run: one contender's freed chunks must not
cost the next (Note [A heap each contender left] in :mod:`benchmarks.harness`)."""


def run_chain(lib: ModuleType, n: int, collect: bool) -> tuple[float, float]:
    """Build the chain and run backward once; return (forward, backward) seconds.

    ``engine`` and ``torch`` share the API used here, so one function serves both.
    """
    gc.collect()
    settle_heap()
    x = lib.tensor([1.0], dtype=lib.float64, requires_grad=True)
    with gc_mode(collect):
        start = time.perf_counter()
        y = x
        for _ in range(n):
            y = y * 1.0001 + 0.0
        built = time.perf_counter()
        y.backward()
        done = time.perf_counter()
    expected = 1.0001**n
    got = float(x.grad.numpy()[0])
    if abs(got - expected) > 1e-9 * expected:
        raise SystemExit(f"{lib.__name__}: wrong gradient {got} for n={n}, expected {expected}")
    del x, y
    gc.collect()
    return built - start, done - built


def parse_sizes(text: str) -> list[int]:
    """``"1e3,1e4"`` -> ``[1000, 10000]``."""
    try:
        sizes = [int(float(part)) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated sizes such as 1e3,1e4, got {text!r}"
        ) from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive integers, got {text!r}")
    return sizes


def load_libraries(use_torch: bool) -> dict[str, ModuleType]:
    """The engine, and PyTorch when asked for and importable."""
    libraries = {"engine": importlib.import_module("engine")}
    if use_torch:
        with suppress(ImportError):
            libraries["torch"] = importlib.import_module("torch")
    return libraries


def measure(
    libraries: dict[str, ModuleType], sizes: list[int], repeats: int, console: Console
) -> dict[tuple[str, int, bool], Timings]:
    """Time every (library, n, gc) cell; libraries alternate within each repeat."""
    results: dict[tuple[str, int, bool], Timings] = {}
    for lib in libraries.values():  # warm up imports, allocators and worker threads
        run_chain(lib, 100, collect=True)
    total = len(sizes) * 2 * repeats * len(libraries)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("chain", total=total)
        for n in sizes:
            for collect in (True, False):
                for _ in range(repeats):
                    for name, lib in libraries.items():
                        progress.update(
                            task, description=f"{name} n={n:,} gc={'on' if collect else 'off'}"
                        )
                        forward, backward = run_chain(lib, n, collect)
                        cell = results.setdefault((name, n, collect), Timings())
                        cell.forward.append(forward)
                        cell.backward.append(backward)
                        progress.advance(task)
    return results


def render(
    results: dict[tuple[str, int, bool], Timings], sizes: list[int], with_torch: bool
) -> Table:
    """The results as a rich table: µs per node, and engine/PyTorch ratios."""
    table = Table(title="chain: y = y * 1.0001 + 0.0, µs per node (median)")
    table.add_column("n", justify="right", no_wrap=True)
    table.add_column("nodes", justify="right", no_wrap=True)
    table.add_column("gc", no_wrap=True)
    headers = ["engine fwd", "engine bwd"]
    if with_torch:
        headers += ["torch fwd", "torch bwd", "fwd ratio", "bwd ratio"]
    for header in headers:
        table.add_column(header, justify="right", no_wrap=True)
    for n in sizes:
        for collect in (True, False):
            fwd, bwd = results["engine", n, collect].per_node_us(n)
            row = [f"{n:,}", f"{n * NODES_PER_STEP:,}", "on" if collect else "off"]
            row += [f"{fwd:.2f}", f"{bwd:.2f}"]
            if with_torch:
                tfwd, tbwd = results["torch", n, collect].per_node_us(n)
                row += [f"{tfwd:.2f}", f"{tbwd:.2f}", f"{fwd / tfwd:.1f}×", f"{bwd / tbwd:.1f}×"]
            table.add_row(*row)
    return table


def write_jsonl(
    results: dict[tuple[str, int, bool], Timings],
    libraries: dict[str, ModuleType],
    repeats: int,
    path: Path,
) -> None:
    """Append one JSON line per (library, n, gc) cell to ``path``."""
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    environment = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "engine": getattr(libraries["engine"], "__version__", None),
        "torch": libraries["torch"].__version__ if "torch" in libraries else None,
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "system": platform.system(),
    }
    with path.open("a", encoding="utf-8") as out:
        for (name, n, collect), cell in results.items():
            fwd, bwd = cell.per_node_us(n)
            record = {
                "benchmark": "chain",
                "timestamp": stamp,
                "library": name,
                "n": n,
                "nodes": n * NODES_PER_STEP,
                "gc": collect,
                "repeats": repeats,
                "forward_us_per_node": round(fwd, 4),
                "backward_us_per_node": round(bwd, 4),
                "forward_s": cell.forward,
                "backward_s": cell.backward,
                **environment,
            }
            out.write(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=[1000, 10_000, 100_000],
        help="comma-separated chain lengths n (default: 1e3,1e4,1e5)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="repeats per cell (default: 5)")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help=f"JSON lines file (default: {RESULTS})"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    console = Console()
    if not console.is_terminal:  # keep the table on one line per row when piped to a file
        console = Console(width=110)
    libraries = load_libraries(not args.no_torch)
    if not args.no_torch and "torch" not in libraries:
        console.print("[dim]PyTorch is not importable: measuring the engine alone.[/dim]")
    results = measure(libraries, args.sizes, args.repeats, console)
    console.print(render(results, args.sizes, "torch" in libraries))
    console.print(
        f"[dim]{args.repeats} repeats per cell; ratio = engine / PyTorch; "
        f"Python {platform.python_version()} on {platform.machine()}[/dim]"
    )
    write_jsonl(results, libraries, args.repeats, args.out)
    console.print(f"[dim]appended to {args.out}[/dim]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
