"""The benchmark suite: our engine against its peers, and what its features cost.

Workloads (see README.md): W1 chain, W2 fan-in, W3 MLP step (peers against
each other), W4 a million-node chain's memory, EV events on a chain, ER events on
the MLP, TH thread hand-offs.
Peers: ``ours``, ``torch``, ``hips`` (HIPS autograd), ``micrograd``, ``tape``
(the floor, :mod:`benchmarks.tape`) and ``numpy`` (written by hand, the
limit). Peers that are not installed are skipped with a note.

Contenders alternate within every repetition and each figure is a median
(see Note [Interleaving] in :mod:`benchmarks.harness`); every figure is taken
with the cyclic garbage collector on and off unless ``--gc`` says otherwise.
Peers time their phases with wall time, or with ``--clock cpu`` with the
process's CPU time, which a busy machine's other work disturbs much less.

Usage:
    python -m benchmarks.run [--workload W1,W2,W3,W4,EV,ER,TH] [--peer ours,torch,...]
        [--repeat 5] [--gc both|on|off] [--clock wall|cpu] [--sizes 1e3,1e4]
        [--out results/run.jsonl] [--trace-steps 50000]

Tables are printed with rich; every figure is appended as a JSON line to
``--out`` (relative paths are taken from ``benchmarks/``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.status import Status
from rich.table import Table

from benchmarks import engine_costs, memory, peers, trace_seek, workloads
from benchmarks.harness import CLOCKS, Cell, Workload, measure, use_clock

HERE = Path(__file__).resolve().parent
WORKLOADS = ("W1", "W2", "W3", "W4", "EV", "ER", "TH")
SHORT = {"forward": "fwd", "backward": "bwd", "step": "step"}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
"""Environment variables that set BLAS and OpenMP thread counts, recorded with every figure."""
GC_MODES = {"both": (True, False), "on": (True,), "off": (False,)}


def _ratio(value: float, reference: Cell | None, phase: str, scale: float) -> str:
    if reference is None or reference.unsupported is not None or not reference.samples:
        return ""
    return f"{value / reference.median(phase, scale):.2f}×"


def render(workload: Workload, cells: list[Cell], clock: str = "wall") -> Table:
    """Medians in the workload's unit, then ratios against each reference."""
    ratios = workload.ratios or workload.shown
    table = Table(title=workload.title if clock == "wall" else f"{workload.title} ({clock} time)")
    for header in ("case", "gc", "peer"):
        table.add_column(header, no_wrap=True)
    for phase in workload.shown:
        table.add_column(SHORT[phase], justify="right", no_wrap=True)
    for reference in workload.references:
        if reference in workload.contenders:
            for phase in ratios:
                table.add_column(f"{SHORT[phase]}/{reference}", justify="right", no_wrap=True)
    by_key = {(c.case.label, c.collect, c.contender): c for c in cells}
    previous = None
    for cell in cells:
        group = (cell.case.label, cell.collect)
        if previous is not None and group != previous:
            table.add_section()
        previous = group
        row = [cell.case.label, "on" if cell.collect else "off", cell.contender]
        if cell.unsupported is not None:
            table.add_row(*row, "n/a")
            continue
        row += [f"{cell.median(p, workload.scale):.2f}" for p in workload.shown]
        for reference in workload.references:
            if reference in workload.contenders:
                ref = by_key.get((*group, reference))
                row += [
                    _ratio(cell.median(p, workload.scale), ref, p, workload.scale) for p in ratios
                ]
        table.add_row(*row)
    return table


def environment(args_clock: str = "wall") -> dict[str, Any]:
    """Versions, machine and the clock the figures were timed with, added to every JSON line."""
    versions: dict[str, Any] = {}
    for name in ("engine", "torch", "autograd"):
        module = sys.modules.get(name)
        versions[name] = getattr(module, "__version__", None) if module else None
    torch = sys.modules.get("torch")
    threads = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    return {
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "threads": {**threads, "torch": torch.get_num_threads() if torch else None},
        "python": platform.python_version(),
        "numpy": np.__version__,
        **versions,
        "clock": args_clock,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "argv": sys.argv[1:],
    }


def cell_record(workload: Workload, cell: Cell, repeat: int) -> dict[str, Any]:
    """One JSON line for one cell."""
    return {
        "workload": workload.key,
        "case": cell.case.label,
        "params": cell.case.params,
        "units": cell.case.units,
        "unit": workload.unit,
        "peer": cell.contender,
        "gc": cell.collect,
        "repeat": repeat,
        "unsupported": cell.unsupported,
        "median": {p: round(cell.median(p, workload.scale), 4) for p in cell.samples},
        "samples_s": cell.samples,
    }


def parse_sizes(text: str) -> list[int]:
    """``"1e3,1e4"`` -> ``[1000, 10000]``."""
    try:
        sizes = [int(float(part)) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive sizes such as 1e3,1e4, got {text!r}"
        )
    return sizes


def parse_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    """Comma-separated ``text`` as a list, each item one of ``allowed`` (an argparse type)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in items if item not in allowed]
    if unknown or not items:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(unknown) or '(none given)'}; "
            f"choose from {','.join(allowed)}"
        )
    return items


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workload",
        type=lambda text: parse_list(text, WORKLOADS, "workload"),
        default=list(WORKLOADS),
        help=f"comma-separated, from {','.join(WORKLOADS)} (default: all)",
    )
    parser.add_argument(
        "--peer",
        type=lambda text: parse_list(text, tuple(peers.PEERS), "peer"),
        default=list(peers.PEERS),
        help=f"comma-separated, from {','.join(peers.PEERS)} (default: all)",
    )
    parser.add_argument("--repeat", type=int, default=5, help="repetitions per cell (default: 5)")
    parser.add_argument("--gc", choices=tuple(GC_MODES), default="both", help="default: both")
    parser.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        default="wall",
        help="wall time, or the process's CPU time (steadier on a busy machine); default: wall",
    )
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=None,
        help="sizes for every selected workload: chain steps (W1, W4, EV, TH), fan-in width "
        "(W2) or batch (W3); default: each workload's own",
    )
    parser.add_argument(
        "--trace-steps",
        type=int,
        default=engine_costs.TRACE_STEPS,
        help="EV: chain steps of the saved trace, 2 nodes each; 0 skips it (default: 50000)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results/run.jsonl"),
        help="JSON lines file, relative to benchmarks/ (default: results/run.jsonl)",
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def run_timed(
    key: str, loaded: dict[str, Any], args: argparse.Namespace, status: Status
) -> tuple[list[dict[str, Any]], list[Table], list[str]]:
    """A timed workload: its JSON lines, its table and its notes."""
    if key in workloads.BUILDERS:
        workload = workloads.BUILDERS[key](loaded, args.sizes)
    elif "ours" in loaded:
        workload = engine_costs.BUILDERS[key](args.sizes)
    else:
        return [], [], [f"{key}: skipped, it measures ours alone"]
    cases = workload.cases(args.sizes)
    cells = measure(workload, cases, args.repeat, GC_MODES[args.gc], status.update)
    records = [cell_record(workload, cell, args.repeat) for cell in cells]
    derived = workload.summarize(cells) if workload.summarize else []
    skipped: dict[tuple[str, str], list[str]] = {}
    for cell in cells:
        if cell.unsupported is not None:
            cases_of = skipped.setdefault((cell.contender, cell.unsupported), [])
            if cell.case.label not in cases_of:
                cases_of.append(cell.case.label)
    derived += [f"{who} n/a ({', '.join(on)}): {why}" for (who, why), on in skipped.items()]
    return records, [render(workload, cells, args.clock)], [*workload.notes, *derived]


def run_memory(
    loaded: dict[str, Any], args: argparse.Namespace, status: Status
) -> tuple[list[dict[str, Any]], list[Table], list[str]]:
    """W4: its JSON lines, its table and its notes."""
    capable = [name for name, peer in loaded.items() if hasattr(peer, "chain_phases")]
    rows = memory.measure(capable, args.sizes, GC_MODES[args.gc], status.update)
    notes = [
        "B/node: bytes traced by tracemalloc, or RSS where marked; after bwd: still held "
        "while the output lives; cycles: objects gc.collect() found after the release."
    ]
    return [{"workload": "W4", **row} for row in rows], [memory.render(rows)], notes


def main(argv: list[str] | None = None) -> int:
    """Run the selected workloads and print and save their figures."""
    args = parse_args(argv)
    use_clock(args.clock)
    console = Console() if sys.stdout.isatty() else Console(width=150)
    loaded, missing = peers.load(args.peer)
    for note in missing:
        console.print(f"[yellow]{note}[/yellow]")
    out = args.out if args.out.is_absolute() else HERE / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    env = environment(args.clock)
    for key in args.workload:
        with console.status(key) as status:
            if key == "W4":
                records, tables, notes = run_memory(loaded, args, status)
            else:
                records, tables, notes = run_timed(key, loaded, args, status)
        if key == "EV" and args.trace_steps and "ours" in loaded:
            figures = engine_costs.trace_figures(console, args.trace_steps)
            records.append({"workload": "EV-trace", **figures})
            tables.append(trace_seek.render(figures))
        for table in tables:
            console.print(table)
        for note in notes:
            console.print(f"[dim]{note}[/dim]")
        with out.open("a", encoding="utf-8") as file:
            for record in records:
                file.write(json.dumps({**record, **env}) + "\n")
    console.print(f"[dim]appended to {out}[/dim]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
