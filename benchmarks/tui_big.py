"""How the TUI copes with a big trace: open, step, seek, scroll and switch views.

Run: python benchmarks/tui_big.py [--nodes 20000] [--graph chain|blocks] [--size 120x40 ...]
[--keep TRACE] [--json FILE]

Records the backward pass of an n-node chain (or of a stack of blocks recorded
with their modules), writes it and reads it back as ``autograd-viz replay``
does (``--keep`` keeps the file, and reads it instead when it is there), then
drives the app headless
(Textual's Pilot) at each size and times each key from the moment it reaches
the app until the screen shows what it did: every message it caused handled,
and the screen painted. Pilot's own ``press()`` and ``pause()`` wait until the
process has looked idle for a few sleeps of 20 ms, a floor of about 60-90 ms on
any key, so the key is sent and the screen painted here directly (the settling
after each key is not timed). CPU time over the same span is the UI thread's
(the key's own work) and the whole process's (threads making rows, indexes or
pictures beside it included). The table gives, per key, the wall time and the
UI thread's CPU time, each as the median and the slowest of its runs; on a
loaded machine the wall time is the CPU time and the wait for a core.

In the drawn DAG a key is answered with what is there (the last picture, or a
line saying it is being drawn) while a thread makes a new picture; the rows
"... picture shown" time from the key to that picture drawn, waited for
explicitly (``DagView.drawn``), each run that needed one. `/` is timed twice:
after the DAG was shown, and in a fresh app before it ever was (the task's
names read in a thread from the prompt's opening; "... found" waits for them).
Prints a table per size; run by hand, not part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from textual import events
from textual.pilot import Pilot

import autograd_viz
import engine
from autograd_viz.cli.tui import load_for_replay
from autograd_viz.tui import ReplayDriver, VizApp
from autograd_viz.tui.dag import DagView


def chain_trace(nodes: int) -> autograd_viz.Trace:
    """The backward pass of ``y = y * 1.0001`` repeated: ``nodes`` nodes in one line."""
    x = engine.tensor([1.0], requires_grad=True)
    y = x
    for _ in range(nodes - 2):  # plus SumBackward0 and AccumulateGrad
        y = y * 1.0001
    with autograd_viz.record() as trace:
        y.sum().backward()
    return trace


_CHARACTERS = {"slash": "/", "enter": "\r"}


def blocks_trace(nodes: int) -> autograd_viz.Trace:
    """A residual stack of blocks, each in its modules (``engine.scope``): about ``nodes`` nodes."""
    import numpy as np

    rng = np.random.default_rng(0)
    h = engine.tensor(rng.standard_normal((4, 8)))
    with engine.scope("model", "Stack"):
        for i in range(max(1, nodes // 6)):  # six nodes a block
            with engine.scope(f"blocks.{i}", "Block"):
                w = engine.tensor(rng.standard_normal((8, 8)) * 0.1, requires_grad=True)
                b = engine.tensor(np.zeros(8), requires_grad=True)
                with engine.scope("linear", "Linear"):
                    z = h @ w + b
                with engine.scope("act", "Tanh"):
                    h = z.tanh() + h
    with autograd_viz.record() as trace:
        (h * h).sum().backward()
    return trace


GRAPHS = {"chain": chain_trace, "blocks": blocks_trace}

Timings = dict[str, list[tuple[float, ...]]]
"""Interaction → (key-to-screen seconds, the UI thread's CPU seconds, every thread's, seconds in
full collections) of each run; only the first for what is waited for."""


class FullCollections:
    """Times each generation-2 collection of the cyclic collector (``gc.callbacks``): the CPU
    time of the thread that collects (the machine may be loaded; wall time would say so)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._start = time.thread_time()
        else:
            self.times.append(time.thread_time() - self._start)


FULL = FullCollections()
"""Every full collection while the keys are timed; the table says how many and how long."""


def _clocks() -> tuple[float, float]:
    """CPU seconds of this thread (the app's: the pilot runs on its loop) and of the process."""
    return time.thread_time(), time.process_time()


def _since(t0: float, c0: tuple[float, float]) -> tuple[float, float, float]:
    ui, every = _clocks()
    return time.perf_counter() - t0, ui - c0[0], every - c0[1]


async def _opened(app: VizApp, pilot: Pilot[int], timings: Timings, started: float) -> None:
    """Wait for the first screen, its rows and the index a replay makes ahead; time them."""
    await pilot.pause()
    timings.setdefault("open (first screen)", []).append((time.perf_counter() - started,))
    t0 = time.perf_counter()
    await app.workers.wait_for_complete()  # a big task's rows: made in a thread
    await pilot.pause()
    timings.setdefault("  ... its rows, in a thread", []).append((time.perf_counter() - t0,))
    driver = app.driver
    assert isinstance(driver, ReplayDriver)
    while not driver.indexed.is_set():  # the trace indexed ahead, for seeks far away
        await asyncio.sleep(0.01)
    indexed = time.perf_counter() - t0
    timings.setdefault("  ... every event indexed, in a thread", []).append((indexed,))


async def _press(app: VizApp, pilot: Pilot[int], key: str) -> tuple[float, ...]:
    """Send ``key`` and paint what it did: (key-to-screen seconds, CPU seconds)."""
    collections = len(FULL.times)
    t0, c0 = time.perf_counter(), _clocks()
    event = events.Key(key, _CHARACTERS.get(key, key if len(key) == 1 else None))
    event.set_sender(app)
    assert app._driver is not None
    app._driver.send_message(event)
    for _ in range(3):  # the key, the messages it posted, and theirs
        await pilot._wait_for_screen()
    app.screen._on_timer_update()  # lay out and paint now, not at the next tick
    return (*_since(t0, c0), sum(FULL.times[collections:]))


async def drive(
    trace: autograd_viz.Trace, size: tuple[int, int], names: tuple[str, str], freeze: bool
) -> Timings:
    """Open the app at ``size`` and time each interaction (``names``: two to find); ``freeze``
    as ``replay`` runs it (what the app builds frozen out of the collector once built)."""
    timings: Timings = {}
    started = time.perf_counter()
    app = VizApp(ReplayDriver(trace), source="benchmark", freeze=freeze)
    async with app.run_test(size=size) as pilot:
        await _opened(app, pilot, timings, started)
        dag = app.query_one(DagView)

        async def timed(name: str, key: str, repeat: int = 1) -> None:
            for _ in range(repeat):
                t0 = time.perf_counter()
                timings.setdefault(name, []).append(await _press(app, pilot, key))
                if dag.display and dag.redrawing:  # answered with what was there
                    await dag.drawn()
                    shown = (time.perf_counter() - t0,)
                    timings.setdefault(f"  ... {name}: picture shown", []).append(shown)
                await pilot.pause()  # let everything settle, untimed

        await timed("a key bound to nothing", "j", repeat=10)
        await timed("step one event (s)", "s", repeat=30)
        await timed("next node (n)", "n", repeat=30)
        await timed("run to the end (e)", "e")
        await timed("step back (p)", "p", repeat=30)
        await timed("rewind to step 0 (r)", "r")
        await timed("node list: down", "down", repeat=30)
        await timed("node list: page down", "pagedown", repeat=30)
        await timed("node list: last row (end)", "end")
        await timed("tree view (v)", "v")
        await timed("tree view: step (s)", "s", repeat=10)
        await timed("drawn DAG (v)", "v")
        await timed("drawn DAG: step (s)", "s", repeat=20)
        await timed("drawn DAG: next node (n)", "n", repeat=20)
        await timed("drawn DAG: step back (p)", "p", repeat=10)
        await timed("drawn DAG: next label (right)", "right", repeat=10)
        await timed("drawn DAG: open / close (enter)", "enter", repeat=6)
        await timed("topo list again (v)", "v")
        await timed("find a node (/ #id)", "slash")
        app.screen.query_one("#prompt-input").value = "#3"  # type: ignore[attr-defined]
        await timed("find: enter", "enter")

    # `/` before the drawn DAG was ever shown: the task's names are not read yet.
    started = time.perf_counter()
    app = VizApp(ReplayDriver(trace), source="benchmark", freeze=freeze)
    async with app.run_test(size=size) as pilot:
        await _opened(app, pilot, timings, started)
        dag = app.query_one(DagView)
        timings["before the DAG was shown: find (/)"] = [await _press(app, pilot, "slash")]
        t0 = time.perf_counter()
        app.screen.query_one("#prompt-input").value = names[0]  # type: ignore[attr-defined]
        timings["  ... find: enter on a name"] = [await _press(app, pilot, "enter")]
        await dag.maker.wait()  # the names, read in a thread from the prompt's opening
        await pilot.pause()
        assert app.shown is not None and app.shown.message.endswith(
            "1 node" if "#" in names[0] else "nodes"
        )
        timings["  ... found (names read in a thread), from Enter"] = [(time.perf_counter() - t0,)]
        await pilot.press("slash")
        app.screen.query_one("#prompt-input").value = names[1]  # type: ignore[attr-defined]
        timings["  ... find again: enter"] = [await _press(app, pilot, "enter")]
        await pilot.pause()
    for name in ("open (first screen)", "  ... its rows, in a thread"):
        timings[name] = timings[name][:1]
    timings["  ... every event indexed, in a thread"] = timings[
        "  ... every event indexed, in a thread"
    ][:1]
    return timings


def table(title: str, timings: Timings, recorded: float) -> Table:
    out = Table(title=title)
    columns = (
        "wall ms",
        "wall max",
        "UI CPU ms",
        "UI CPU max",
        "all CPU ms",
        "full gc CPU ms",
        "runs",
    )
    for column in ("interaction", *columns):
        out.add_column(column, justify="left" if column == "interaction" else "right")
    out.add_row("record and save the trace (not the TUI)", f"{recorded * 1e3:.0f}", *[""] * 5, "1")
    for name, runs in timings.items():
        latency = [r[0] * 1e3 for r in runs]
        if len(runs[0]) < 3:  # waited for, not a key
            out.add_row(
                name,
                f"{statistics.median(latency):.0f}",
                f"{max(latency):.0f}",
                *[""] * 4,
                str(len(runs)),
            )
            continue
        out.add_row(
            name,
            f"{statistics.median(latency):.1f}",
            f"{max(latency):.1f}",
            f"{statistics.median(r[1] * 1e3 for r in runs):.1f}",
            f"{max(r[1] * 1e3 for r in runs):.1f}",
            f"{statistics.median(r[2] * 1e3 for r in runs):.1f}",
            f"{sum(r[3] for r in runs) * 1e3:.0f}" if any(r[3] for r in runs) else "",
            str(len(runs)),
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument(
        "--graph", choices=sorted(GRAPHS), default="chain", help="a chain, or blocks in modules"
    )
    parser.add_argument("--size", action="append", help="COLUMNSxROWS (default 120x40 and 80x24)")
    parser.add_argument("--keep", metavar="TRACE", help="write the trace here (and reuse it)")
    parser.add_argument(
        "--no-freeze", action="store_true", help="run the app without freezing what it builds"
    )
    parser.add_argument(
        "--json", metavar="FILE", help="also write every run's times (seconds) here, by size"
    )
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.size or ["120x40", "80x24"]]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(args.keep or Path(scratch) / "trace.jsonl")
        if not path.exists():
            GRAPHS[args.graph](args.nodes).save(path)
        recorded = time.perf_counter() - t0
        trace = load_for_replay(str(path))  # as `replay` holds it: frozen out of the collector
    gc.callbacks.append(FULL)
    every: dict[str, Timings] = {}
    for columns, rows in sizes:
        blocks = max(1, args.nodes // 6)  # modules a third and two thirds of the way
        names = (f"model.blocks.{blocks // 3}", f"model.blocks.{2 * blocks // 3}")
        if args.graph == "chain":
            names = (f"#{args.nodes // 20}", f"#{args.nodes // 10}")
        timings = asyncio.run(drive(trace, (columns, rows), names, not args.no_freeze))
        nodes = sum(len(t.nodes) for t in trace.graph_tasks.values())
        title = (
            f"TUI on {args.graph}: {nodes:,} nodes, {len(trace.events):,} events, {columns}×{rows}"
        )
        Console(width=140).print(table(title, timings, recorded))
        full = [t * 1e3 for t in FULL.times]
        print(
            f"full (generation-2) collections: {len(full)}, {sum(full):.0f} ms CPU in all, "
            f"longest {max(full, default=0):.0f} ms"
        )
        FULL.times.clear()
        every[f"{columns}x{rows}"] = timings
    if args.json:
        Path(args.json).write_text(json.dumps(every, indent=1))


if __name__ == "__main__":
    main()
