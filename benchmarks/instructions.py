"""Instructions per node of the engine's forward and backward, counted by callgrind.

Wall and CPU time on a shared machine move by a third between identical runs;
the number of instructions a run executes does not. Each figure here is the
difference of two runs of a fresh process under ``valgrind --tool=callgrind``:
forward is "build the graph" minus "start up and make the leaf", backward is
"build and run backward" minus "build", divided by the graph's nodes. The
hash seed is fixed and BLAS runs one thread, so a run repeats to within a few
hundred instructions.

Usage (valgrind needed; several minutes a tree)::

    python -m benchmarks.instructions                        # this tree, W1 and W2
    python -m benchmarks.instructions --tree /path/to/old --tree .   # A against B
    python -m benchmarks.instructions --workload W1 --n 20000 --gc on
    python -m benchmarks.instructions --seeds 0,1,2,3    # means over four hash seeds

W1 is the chain ``y = y * 1.0001 + 0.0`` (2 nodes a step); W2 is ``n``
products of one input by distinct numbers joined by an add tree.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.table import Table

_CHILD = """
import gc, sys
import engine
gc.{gc}()
x = engine.tensor([1.0], dtype=engine.float64, requires_grad=True)
phase, n = {phase!r}, {n}
if phase != "start":
    if {workload!r} == "W1":
        y = x
        for _ in range(n):
            y = y * 1.0001 + 0.0
    else:
        terms = [x * (1.0 + i * 1e-3) for i in range(n)]
        while len(terms) > 1:
            terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                     for i in range(0, len(terms), 2)]
        y = terms[0]
    if phase == "full":
        y.backward()
"""

NODES = {"W1": lambda n: 2 * n, "W2": lambda n: 2 * n - 1}
"""Graph nodes (not counting the leaf's AccumulateGrad) for ``n``."""

DEFAULT_N = {"W1": 20_000, "W2": 3_000}


def count(tree: Path, workload: str, n: int, phase: str, collect: bool, seed: int = 0) -> int:
    """Instructions of one fresh process running ``phase`` of ``workload`` on ``tree``'s engine."""
    code = _CHILD.format(gc="enable" if collect else "disable", phase=phase, n=n, workload=workload)
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED=str(seed), OMP_NUM_THREADS="1")
    env.update(OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
        # In the tree: ``-c`` puts the working directory first on the path, before PYTHONPATH.
        subprocess.run([*command, "-c", code], cwd=tree, env=env, check=True, capture_output=True)
        match = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no instruction total in callgrind's output for {tree} {phase}")
    return int(match.group(1))


def per_node(
    tree: Path, workload: str, n: int, collect: bool, seeds: list[int]
) -> tuple[float, list[float]]:
    """Forward instructions a node (mean over ``seeds``), and backward's for each seed.

    Note [Instructions move with the hash seed]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    CPython finds a class attribute through a global cache indexed by the
    type and the name's hash, and a node's dependency count through a dict
    indexed by the node's address. Both move with the string hash seed, so
    a change that only renames or adds an attribute can move a count by a
    few hundred instructions a node under one seed and not under another.
    Programs run under random seeds: compare means over several
    (``--seeds 0,1,2``), with their spread.
    """
    jobs = [(p, seed) for seed in seeds for p in ("start", "build", "full")]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = pool.map(lambda j: count(tree, workload, n, j[0], collect, j[1]), jobs)
        counts = dict(zip(jobs, results, strict=True))
    nodes = NODES[workload](n)
    forward = [(counts["build", s] - counts["start", s]) / nodes for s in seeds]
    backward = [(counts["full", s] - counts["build", s]) / nodes for s in seeds]
    return sum(forward) / len(forward), backward


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", type=Path, help="a source tree (repeatable)")
    parser.add_argument("--workload", default="W1,W2", help="W1, W2 or both")
    parser.add_argument("--n", type=int, help="steps (W1) or products (W2)")
    parser.add_argument("--gc", choices=("on", "off"), default="off")
    parser.add_argument(
        "--seeds",
        default="0",
        help="string hash seeds, comma-separated; figures are means over them "
        "(Note [Instructions move with the hash seed])",
    )
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    trees = [t.resolve() for t in (args.tree or [Path(__file__).resolve().parent.parent])]
    title = f"instructions a node (callgrind), gc {args.gc}, hash seeds {args.seeds}"
    table = Table(title=title)
    columns = ("workload", "tree", "forward", "backward", "backward range", "backward/first")
    for column in columns:
        table.add_column(column, justify="left" if column == "tree" else "right")
    for workload in args.workload.split(","):
        n = args.n or DEFAULT_N[workload]
        first: float | None = None
        for tree in trees:
            forward, backwards = per_node(tree, workload, n, args.gc == "on", seeds)
            backward = sum(backwards) / len(backwards)
            first = backward if first is None else first
            table.add_row(
                f"{workload} n={n:,}", str(tree), f"{forward:,.0f}", f"{backward:,.0f}",
                f"{min(backwards):,.0f} to {max(backwards):,.0f}", f"{backward / first:.3f}×",
            )  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    main()
