"""Each view opening call K of a long trace (``--call K``), timed and measured per file size.

Run: OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.trace_views [--calls 1250 5000]

A long trace is made quickly: one training step (a 64-wide MLP on our
engine, its forward checked for NaNs as ``nan`` does, about 90 events) is
recorded once and written N times as calls 0 .. N-1 through the streaming
writer, as ``record`` writes a run. Then, for each size, every view opens
the middle call in a process of its own, as a user runs it:

* ``nan TRACE --call K`` (the NaN report of that call),
* ``dot TRACE --call K -o K.dot``,
* ``timeline TRACE --call K -o K.json``,
* ``replay TRACE --call K`` (without a terminal it loads the call, then says
  it needs one: the time is the load's),

and ``nan TRACE`` reads the whole file a call at a time. The table gives
each command's CPU time (user and system: what a shared machine's load does
not change much), its wall time in brackets, and its maximum RSS, the
fastest of ``--repeat`` runs; the start of Python with the package's
imports is timed alone (``--help``) for comparison. The target is
under a second to open call K, with memory independent of the file's size.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

import engine
from autograd_viz.nan.watch import watch_nan
from autograd_viz.trace import Trace
from autograd_viz.trace.stream import TraceWriter


def one_step() -> Trace:
    """One recorded training step: forward checked for NaNs, backward, on our engine."""
    rng = np.random.default_rng(0)
    layers = [engine.tensor(rng.standard_normal((64, 64)) * 0.1, requires_grad=True)] * 3
    x = engine.tensor(rng.standard_normal((32, 64)))
    with watch_nan() as watch:
        h = x
        for w in layers:
            h = (h @ w).tanh()
        h.sum().backward()
    return watch.trace


def write_run(step: Trace, calls: int, path: Path) -> None:
    """``step`` written ``calls`` times as calls 0 .. calls-1, as a streamed run."""
    (info,) = step.graph_tasks.values()
    writer = TraceWriter(path, step.header)
    seq = 0
    try:
        for call in range(calls):
            gid = call + 1
            events = []
            for event in step.events:
                events.append(event._replace(seq=seq, graph_task=gid if event.graph_task else 0))
                seq += 1
            moved = dataclasses.replace(info, id=gid, call=call)
            writer.write(Trace(step.header, {gid: moved}, events), 1)
    finally:
        writer.close()


def run(command: list[str]) -> tuple[float, float, int]:
    """CPU seconds (user and system), wall seconds and maximum RSS in bytes of ``command``."""
    code = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
        "wall = time.perf_counter() - t; u = resource.getrusage(resource.RUSAGE_CHILDREN); "
        "print(u.ru_utime + u.ru_stime, wall, u.ru_maxrss)"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code, *command], env=env, check=True, capture_output=True, text=True
    ).stdout.split()
    return float(out[0]), float(out[1]), int(out[2]) * 1024  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[1250, 5000])
    parser.add_argument("--repeat", type=int, default=3, help="runs per command (the fastest)")
    args = parser.parse_args()
    cli = [sys.executable, "-m", "autograd_viz"]
    step = one_step()
    table = Table(title="Opening call K of a long trace: each command in its own process")
    for column in ("command", *[f"{n:,} calls" for n in args.calls]):
        table.add_column(column, justify="left" if column == "command" else "right")
    rows: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for calls in args.calls:
            path = Path(tmp) / f"run{calls}.jsonl"
            started = time.perf_counter()
            write_run(step, calls, path)
            made = time.perf_counter() - started
            size = path.stat().st_size
            print(f"{calls:,} calls: {size / 1e6:.1f} MB written in {made:.1f} s", flush=True)
            middle = str(calls // 2)
            commands = {
                "python -m autograd_viz --help (start alone)": [*cli, "--help"],
                "nan TRACE --call K": [*cli, "nan", str(path), "--call", middle],
                "dot TRACE --call K -o K.dot": [
                    *[*cli, "dot", str(path), "--call", middle, "-o", f"{tmp}/k.dot"]
                ],
                "timeline TRACE --call K -o K.json": [
                    *[*cli, "timeline", str(path), "--call", middle, "-o", f"{tmp}/k.json"]
                ],
                "replay TRACE --call K (load, no terminal)": [
                    *cli,
                    "replay",
                    str(path),
                    "--call",
                    middle,
                ],
                "nan TRACE (every call, one at a time)": [*cli, "nan", str(path)],
            }
            rows.setdefault("file", []).append(f"{size / 1e6:.0f} MB")
            for name, command in commands.items():
                cpu, wall, rss = min(run(command) for _ in range(args.repeat))
                rows.setdefault(name, []).append(
                    f"{cpu:.2f} s CPU ({wall:.2f} s), {rss / 2**20:.0f} MB"
                )
    for name, cells in rows.items():
        table.add_row(name, *cells)
    Console(width=140).print(table)
    print(
        f"one intra-op thread; this process's max RSS {resource.getrusage(0).ru_maxrss // 1024} MB"
    )


if __name__ == "__main__":
    main()
