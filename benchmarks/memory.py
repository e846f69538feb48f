"""W4: a million-node chain, its memory, and whether backward gives it back.

Each peer runs ``chain_phases`` (see :mod:`benchmarks.peers`) in a fresh
process, once untraced for the times and the resident set size (RSS), once
under ``tracemalloc`` for the bytes Python and NumPy allocate. Memory is read
at four points: with only the input alive, after building the graph, after
``backward()`` (without ``retain_graph``) while the output is still
referenced, and after the output is dropped, before any ``gc.collect()``.
Then one ``gc.collect()`` reports how many objects only the cyclic collector
could free. Before every RSS reading ``malloc_trim(0)`` hands freed heap back
to the system, so RSS follows live memory rather than the allocator's cache.

Graph bytes per node are traced bytes for the NumPy-based peers, and RSS for
PyTorch, whose graph lives in C++ where ``tracemalloc`` cannot see it. Memory
"returned" when what is left after the release is under 1% of the graph (see
``RETURNED_SLACK``). Times come from the untraced run; "free" is dropping the
output, which frees the graph by reference counting.

Usage: ``python -m benchmarks.run --workload W4`` (parent), or one child run:
``python -m benchmarks.memory --peer ours --n 500000 --gc off [--traced]``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from time import perf_counter
from typing import Any

from rich.table import Table

from benchmarks.harness import gc_mode, settle_heap
from benchmarks.peers import PEERS

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STEPS = 500_000
"""Chain steps: two nodes each, a million nodes."""
PHASES = ("start", "built", "backward", "released")
RETURNED_SLACK = 0.01
"""Share of the graph's bytes still held after the release that counts as "returned".

Freed tuples, floats and frames stay on the interpreter's free lists (a few
hundred KiB, which only ``gc.collect()`` clears), and RSS moves in pages.
"""


def _rss() -> int:
    settle_heap()
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(peer_name: str, n: int, collect: bool, traced: bool) -> dict[str, Any]:
    """Run one peer's chain phases here and return what was measured."""
    peer = importlib.import_module(PEERS[peer_name])
    settle_heap()
    gc.collect()
    rss: dict[str, int] = {}
    heap: dict[str, int] = {}
    seconds: dict[str, float] = {}
    with gc_mode(collect):
        if traced:
            tracemalloc.start()
        steps = peer.chain_phases(n)
        grad = None
        for phase in PHASES:
            start = perf_counter()
            next(steps)
            seconds[phase] = perf_counter() - start
            if traced:
                heap[phase] = tracemalloc.get_traced_memory()[0]
            rss[phase] = _rss()
        try:
            next(steps)
        except StopIteration as stop:
            grad = stop.value
        collected = gc.collect()
        if traced:
            heap["collected"] = tracemalloc.get_traced_memory()[0]
        rss["collected"] = _rss()
    return {
        "peer": peer_name,
        "n": n,
        "nodes": 2 * n,
        "gc": collect,
        "traced": traced,
        "forward_s": seconds["built"],
        "backward_s": seconds["backward"],
        "release_s": seconds["released"],
        "rss": rss,
        "heap": heap,
        "gc_collected_objects": collected,
        "grad": grad,
    }


def _spawn(peer: str, n: int, collect: bool, traced: bool) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.memory", "--peer", peer, "--n", str(n)]
    command += ["--gc", "on" if collect else "off"] + (["--traced"] if traced else [])
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"peer": peer, "n": n, "gc": collect, "error": f"exit {done.returncode}: {tail}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(
    peers: list[str], sizes: list[int] | None, gc_modes: tuple[bool, ...], on_run: Any
) -> list[dict[str, Any]]:
    """One row per (n, gc mode, peer): the untraced run, with the traced run's heap figures."""
    rows = []
    for n in sizes or [DEFAULT_STEPS]:
        for collect in gc_modes:
            for peer in peers:
                on_run(f"W4 n={n:,} gc={'on' if collect else 'off'} {peer}")
                row = _spawn(peer, n, collect, traced=False)
                if "error" not in row:
                    traced = _spawn(peer, n, collect, traced=True)
                    row["heap"] = traced.get("heap", {})
                    row["traced_gc_collected_objects"] = traced.get("gc_collected_objects")
                rows.append(_summarize(row))
    return rows


def _summarize(row: dict[str, Any]) -> dict[str, Any]:
    """Add bytes per node and the verdict, on the peer's own measure of memory."""
    if "error" in row:
        return row
    measure = "rss" if row["peer"] == "torch" or not row["heap"] else "heap"
    mem, nodes = row[measure], row["nodes"]
    graph = mem["built"] - mem["start"]
    left = mem["released"] - mem["start"]
    row.update(
        measured_by=measure,
        graph_bytes_per_node=graph / nodes,
        held_after_backward_per_node=(mem["backward"] - mem["start"]) / nodes,
        left_bytes=left,
        left_after_collect_bytes=mem["collected"] - mem["start"],
        returned=left <= RETURNED_SLACK * graph,
        rss_graph_bytes_per_node=(row["rss"]["built"] - row["rss"]["start"]) / nodes,
    )
    return row


def render(rows: list[dict[str, Any]]) -> Table:
    """W4 as a rich table."""
    table = Table(title="W4 a million-node chain: memory, and what backward gives back")
    for header in ("n", "gc", "peer", "fwd s", "bwd s", "free s", "B/node", "RSS B/node"):
        table.add_column(header, justify="right" if header != "peer" else "left", no_wrap=True)
    for header in ("after bwd B/node", "returned w/o collect", "left (collect)", "cycles"):
        table.add_column(header, justify="right", no_wrap=True)
    for row in rows:
        head = [f"{row['n']:,}", "on" if row["gc"] else "off", row["peer"]]
        if "error" in row:
            table.add_row(*head, f"failed: {row['error']}")
            continue
        mark = "" if row["measured_by"] == "heap" else " (RSS)"
        returned = "yes" if row["returned"] else "no"
        table.add_row(
            *head,
            f"{row['forward_s']:.2f}",
            f"{row['backward_s']:.2f}",
            f"{row['release_s']:.2f}",
            f"{row['graph_bytes_per_node']:.0f}{mark}",
            f"{row['rss_graph_bytes_per_node']:.0f}",
            f"{row['held_after_backward_per_node']:.0f}",
            f"{returned}, {_size(row['left_bytes'])} left",
            _size(row["left_after_collect_bytes"]),
            f"{row['gc_collected_objects']:,}",
        )
    return table


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if abs(count) < 1024:
            return f"{count:.0f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def main(argv: list[str] | None = None) -> int:
    """One child run: print its measurements as one JSON line."""
    parser = argparse.ArgumentParser(description="W4: one peer's million-node chain, measured")
    parser.add_argument("--peer", choices=list(PEERS), required=True)
    parser.add_argument("--n", type=int, default=DEFAULT_STEPS, help="chain steps (2 nodes each)")
    parser.add_argument("--gc", choices=("on", "off"), default="on")
    parser.add_argument("--traced", action="store_true", help="measure under tracemalloc")
    args = parser.parse_args(argv)
    print(json.dumps(child(args.peer, args.n, args.gc == "on", args.traced)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
