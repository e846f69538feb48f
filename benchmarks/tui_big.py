"""How the TUI copes with a big trace: open, step, seek and scroll a 100k-node chain.

Run: .venv/bin/python benchmarks/tui_big.py [--nodes 100000]

Records the backward pass of an n-node chain, then drives the app headless
(Textual's Pilot, 120×40) and times each interaction from key press to the
screen being refreshed (``pilot.pause()`` waits for pending messages and the
repaint). Prints a table; run by hand, not part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from rich.console import Console
from rich.table import Table

import autograd_viz
import engine
from autograd_viz.tui import ReplayDriver, VizApp


def chain_trace(nodes: int) -> autograd_viz.Trace:
    x = engine.tensor([1.0], requires_grad=True)
    y = x
    for _ in range(nodes - 2):  # plus SumBackward0 and AccumulateGrad
        y = y * 1.0001
    with autograd_viz.record() as trace:
        y.sum().backward()
    return trace


async def drive(trace: autograd_viz.Trace) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {}
    started = time.perf_counter()
    app = VizApp(ReplayDriver(trace), source="chain")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        timings["open (first screen)"] = [time.perf_counter() - started]

        async def timed(name: str, *keys: str, repeat: int = 1) -> None:
            for _ in range(repeat):
                t0 = time.perf_counter()
                await pilot.press(*keys)
                await pilot.pause()
                timings.setdefault(name, []).append(time.perf_counter() - t0)

        await timed("step one event (s)", "s", repeat=30)
        await timed("next node (n)", "n", repeat=30)
        await timed("run to the end (e)", "e")
        await timed("step back (p)", "p", repeat=30)
        await timed("rewind to step 0 (r)", "r")
        await timed("node list: page down", "pagedown", repeat=30)
        await timed("node list: last row (end)", "end")
        await timed("tree view (v)", "v")
        await timed("find a node (/ #id)", "slash")
        app.screen.query_one("#prompt-input").value = "#3"  # type: ignore[attr-defined]
        await timed("  ... enter", "enter")
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    nodes = parser.parse_args().nodes
    t0 = time.perf_counter()
    trace = chain_trace(nodes)
    recorded = time.perf_counter() - t0
    timings: dict[str, Any] = asyncio.run(drive(trace))
    table = Table(title=f"TUI on a {nodes:,}-node chain ({len(trace.events):,} events)")
    table.add_column("interaction")
    table.add_column("median ms", justify="right")
    table.add_column("max ms", justify="right")
    table.add_column("runs", justify="right")
    table.add_row("record the trace (not the TUI)", f"{recorded * 1e3:.0f}", "", "1")
    for name, values in timings.items():
        table.add_row(
            name,
            f"{statistics.median(values) * 1e3:.1f}",
            f"{max(values) * 1e3:.1f}",
            str(len(values)),
        )
    Console().print(table)


if __name__ == "__main__":
    main()
