"""Where our engine's time per node goes: cProfile on the W1 chain.

Builds ``y = y * 1.0001 + 0.0`` ``n`` times and profiles one phase, by
default ``y.backward()`` (whose CPU work runs on the calling thread, so the
profiler sees all of it), then prints the top functions by own time.

Usage (as a module, so this file does not shadow the standard ``profile``):
    python -m benchmarks.profile [--n 1e5] [--phase backward|forward] [--top 25]
        [--sort tottime|cumulative] [--save results/w1_backward.prof]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
from pathlib import Path
from typing import Any

import engine
from benchmarks.peers.common import STEP

HERE = Path(__file__).resolve().parent


def build(n: int) -> tuple[Any, Any]:
    """The chain's input and output."""
    x = engine.tensor([1.0], dtype=engine.float64, requires_grad=True)
    y = x
    for _ in range(n):
        y = y * STEP + 0.0
    return x, y


def profile_phase(n: int, phase: str) -> cProfile.Profile:
    """Profile building the chain or running its backward, with the collector off."""
    build(100)[1].backward()  # warm up
    profiler = cProfile.Profile()
    gc.collect()
    gc.disable()
    try:
        if phase == "forward":
            profiler.enable()
            build(n)
            profiler.disable()
        else:
            _, y = build(n)
            profiler.enable()
            y.backward()
            profiler.disable()
    finally:
        gc.enable()
    return profiler


def main(argv: list[str] | None = None) -> int:
    """Profile and print the top functions."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=lambda s: int(float(s)), default=100_000, help="chain steps")
    parser.add_argument("--phase", choices=("backward", "forward"), default="backward")
    parser.add_argument("--top", type=int, default=25, help="functions to print (default: 25)")
    parser.add_argument("--sort", choices=("tottime", "cumulative"), default="tottime")
    parser.add_argument(
        "--save", type=Path, help="also write the raw profile (relative: benchmarks/)"
    )
    args = parser.parse_args(argv)
    profiler = profile_phase(args.n, args.phase)
    nodes = 2 * args.n
    stats = pstats.Stats(profiler, stream=sys.stdout)
    print(f"W1 chain {args.phase}, n={args.n:,} ({nodes:,} nodes), collector off")
    per_node = stats.total_tt / nodes * 1e6
    print(f"total {stats.total_tt:.2f} s under the profiler: {per_node:.1f} µs/node")
    stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
    if args.save:
        path = args.save if args.save.is_absolute() else HERE / args.save
        path.parent.mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(path)
        print(f"raw profile written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
