"""Graphviz export benchmark: building the DOT of a 10,000-node backward graph.

The workload is the chain ``y = y * 1.0001 + 0.0`` of ``steps`` steps (two
nodes a step, plus the final sum and the leaf's AccumulateGrad). Each phase
is what ``autograd_viz.to_dot`` does for one kind of request, timed as the
median of ``--repeats`` runs, in wall time and in this process's CPU time (the
figure to compare on a shared machine); "DOT text" includes building the view, drawing
it with the ``graphviz`` package and producing ``Digraph.source``. Rendering
with Graphviz's ``dot`` program is not included (``dot`` itself takes far
longer than this on 10,000 nodes; ``--collapse`` and ``--max-nodes`` are how
big graphs are drawn).

Usage:
    python benchmarks/dot_build.py [--steps 5000] [--repeats 5]

Results are printed as a table and appended as JSON lines to
``benchmarks/results/dot_build.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import engine
from autograd_viz import record, to_dot

RESULTS = Path(__file__).resolve().parent / "results" / "dot_build.jsonl"


def chain(steps: int) -> engine.Tensor:
    """The loss of a chain of ``steps`` multiply-add steps."""
    x = engine.tensor([1.0], dtype=engine.float64, requires_grad=True, name="x")
    y = x
    for _ in range(steps):
        y = y * 1.0001 + 0.0
    return y.sum()


def median_seconds(work: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Median wall time and median CPU time (this process) of ``repeats`` calls of ``work``."""
    walls, cpus = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        work()
        cpus.append(time.process_time() - start_cpu)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000, help="chain steps (2 nodes each)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per phase (median)")
    args = parser.parse_args()

    loss = chain(args.steps)
    nodes = 2 * args.steps + 2
    phases: list[tuple[str, Callable[[], Any]]] = [
        ("tensor, before backward", lambda: to_dot(loss).source),
    ]
    with record() as trace:
        loss.backward()
    trace.state_at(len(trace))  # index the trace once, as a viewer does on load
    middle = len(trace) // 2
    phases += [
        ("trace, last step", lambda: to_dot(trace).source),
        ("trace, middle step, --values", lambda: to_dot(trace, step=middle, values=True).source),
        ("trace, --collapse", lambda: to_dot(trace, collapse=True).source),
        ("trace, --max-nodes 500", lambda: to_dot(trace, max_nodes=500).source),
    ]
    table = Table(title=f"DOT of a {nodes:,}-node backward graph (median of {args.repeats})")
    table.add_column("request")
    table.add_column("wall", justify="right")
    table.add_column("CPU", justify="right")
    table.add_column("CPU per node", justify="right")
    rows = []
    for name, work in phases:
        seconds, cpu = median_seconds(work, args.repeats)
        rows.append({"request": name, "seconds": seconds, "cpu_seconds": cpu, "nodes": nodes})
        table.add_row(
            name, f"{seconds * 1000:.0f} ms", f"{cpu * 1000:.0f} ms", f"{cpu / nodes * 1e6:.1f} µs"
        )
    python = platform.python_version()
    table.caption = f"Python {python} on {platform.machine()}; {len(trace):,} events in the trace"
    Console().print(table)
    RESULTS.parent.mkdir(exist_ok=True)
    with RESULTS.open("a", encoding="utf-8") as file:
        for row in rows:
            row.update(python=python, machine=platform.machine(), argv=sys.argv[1:])
            file.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
