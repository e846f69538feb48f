"""Trace benchmark: saving, loading and seeking in a trace of ~100k events.

The workload records ``y.backward()`` through a chain ``y = y * 1.0001 + 0.0``
of ``n`` steps (2n nodes, about six events per node), then times what a
viewer does with the trace: save it, load it back (with full validation),
index it for replay, and jump to random steps. A seek is
``trace.state_at(k)`` (queues, threads, graph tasks); "seek + nodes" also
materializes every node's state at that step, what a full graph view draws.

Usage:
    python benchmarks/trace_seek.py [--steps 10000] [--seeks 300]

Results are printed as a table and appended as JSON lines to
``benchmarks/results/trace_seek.jsonl``.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

import engine
from autograd_viz import Trace, record
from autograd_viz.trace.replay import Replayer

RESULTS = Path(__file__).resolve().parent / "results" / "trace_seek.jsonl"


def record_chain(steps: int) -> tuple[Trace, float]:
    """Record backward through a chain of ``steps`` steps; return the trace and seconds."""
    x = engine.tensor([1.0], dtype=engine.float64, requires_grad=True, name="x")
    y = x
    for _ in range(steps):
        y = y * 1.0001 + 0.0
    start = time.perf_counter()
    with record() as trace:
        y.backward()
    return trace, time.perf_counter() - start


def percentile(samples: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by nearest rank."""
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered)) - 1))
    return ordered[rank]


def time_seeks(trace: Trace, seeks: int, with_nodes: bool, seed: int) -> list[float]:
    """Seconds of ``seeks`` jumps to random steps, in random order."""
    rng = random.Random(seed)
    total = len(trace)
    out = []
    for _ in range(seeks):
        step = rng.randint(0, total)
        start = time.perf_counter()
        state = trace.state_at(step)
        if with_nodes:
            for gid in state.graph_tasks:
                state.nodes(gid)
        out.append(time.perf_counter() - start)
    return out


def measure(steps: int, seeks: int, console: Console) -> dict[str, float]:
    """Run every phase once and return the figures."""
    with console.status("recording"):
        trace, record_s = record_chain(steps)
    events = len(trace)
    nodes = sum(len(info.nodes) for info in trace.graph_tasks.values())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chain.jsonl"
        with console.status("saving"):
            start = time.perf_counter()
            trace.save(path)
            save_s = time.perf_counter() - start
        size = path.stat().st_size
        with console.status("loading"):
            gc.collect()
            start = time.perf_counter()
            loaded = Trace.load(path)
            load_s = time.perf_counter() - start
    if loaded != trace:
        raise SystemExit("the loaded trace differs from the recorded one")
    with console.status("indexing"):
        start = time.perf_counter()
        Replayer(loaded)
        index_s = time.perf_counter() - start
    loaded.state_at(0)  # index once, as a viewer does on opening the file
    with console.status("seeking"):
        seek = time_seeks(loaded, seeks, with_nodes=False, seed=1)
        seek_nodes = time_seeks(loaded, max(1, seeks // 10), with_nodes=True, seed=2)
    return {
        "steps": steps,
        "nodes": nodes,
        "events": events,
        "record_s": record_s,
        "save_s": save_s,
        "load_s": load_s,
        "index_s": index_s,
        "bytes": size,
        "bytes_per_event": size / events,
        "seeks": seeks,
        "seek_median_ms": statistics.median(seek) * 1e3,
        "seek_p95_ms": percentile(seek, 95) * 1e3,
        "seek_max_ms": max(seek) * 1e3,
        "seek_nodes_median_ms": statistics.median(seek_nodes) * 1e3,
        "seek_nodes_p95_ms": percentile(seek_nodes, 95) * 1e3,
    }


def render(result: dict[str, float]) -> Table:
    """The figures as a rich table."""
    events = result["events"]
    table = Table(
        title=f"trace of a {result['nodes']:,}-node chain: {events:,} events, "
        f"{result['bytes'] / 1e6:.1f} MB"
    )
    table.add_column("phase", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("per event", justify="right", no_wrap=True)
    for name, key in (
        ("record (backward + recorder)", "record_s"),
        ("save", "save_s"),
        ("load (validated)", "load_s"),
        ("index for replay", "index_s"),
    ):
        seconds = result[key]
        table.add_row(name, f"{seconds:.2f} s", f"{seconds / events * 1e6:.1f} µs")
    for name, key in (
        ("seek, median", "seek_median_ms"),
        ("seek, p95", "seek_p95_ms"),
        ("seek, max", "seek_max_ms"),
        ("seek + every node, median", "seek_nodes_median_ms"),
        ("seek + every node, p95", "seek_nodes_p95_ms"),
    ):
        table.add_row(name, f"{result[key]:.2f} ms", "")
    table.add_row("file size", f"{result['bytes_per_event']:.0f} B/event", "")
    return table


def write_jsonl(result: dict[str, float], path: Path) -> None:
    """Append the figures, with the environment, as one JSON line."""
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": "trace_seek",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **result,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "engine": engine.__version__,
        "machine": platform.machine(),
        "system": platform.system(),
    }
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=10_000, help="chain steps, two nodes each (default: 10000)"
    )
    parser.add_argument("--seeks", type=int, default=300, help="random seeks (default: 300)")
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help=f"JSON lines file (default: {RESULTS})"
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.seeks < 1:
        parser.error("--steps and --seeks must be at least 1")
    console = Console()
    if not console.is_terminal:
        console = Console(width=100)
    result = measure(args.steps, args.seeks, console)
    console.print(render(result))
    console.print(f"[dim]Python {platform.python_version()} on {platform.machine()}[/dim]")
    write_jsonl(result, args.out)
    console.print(f"[dim]appended to {args.out}[/dim]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
