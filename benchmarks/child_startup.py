"""How long a watched child process takes to start: its interpreter, armed, against plain.

Run: python -m benchmarks.child_startup [--repeat 15] [--imports torch]

A child of a watched script (``record``, ``nan``, ``run --print``) starts
watching before its first line (Note [Children armed by the environment] in
``autograd_viz/launch/processes.py``). This starts ``python -c pass`` (or
``python -c "import torch"`` with ``--imports torch``) ``--repeat`` times
with the environment ``record`` gives its children and as many times
without, interleaved, and prints the median and range of each in seconds,
wall time and CPU time (user + system; the one to trust on a busy machine).
The tree measured is the one on ``PYTHONPATH`` (this checkout by default).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from autograd_viz.launch.processes import ENV, STARTUP_DIR, ChildSettings


def _start(code: str, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from starting ``python -c code`` to its exit, and the CPU seconds it used.

    CPU time (user + system) is what to compare on a loaded machine: wall time
    there measures the other work as much as the start.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--imports", default="", help="a module the child imports (e.g. torch)")
    args = parser.parse_args()
    code = f"import {args.imports}" if args.imports else "pass"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    plain = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", root)}
    plain.pop(ENV, None)
    with tempfile.TemporaryDirectory() as job:
        settings = ChildSettings(command="record", job=job, output=os.path.join(job, "t.jsonl"))
        watched = {
            **plain,
            ENV: settings.to_env(),
            "PYTHONPATH": os.pathsep.join([STARTUP_DIR, plain["PYTHONPATH"]]),
        }
        times: dict[str, list[tuple[float, float]]] = {"plain": [], "watched": []}
        for _ in range(args.repeat):
            times["plain"].append(_start(code, plain))
            times["watched"].append(_start(code, watched))
    for way, runs in times.items():
        for i, what in enumerate(("wall", "cpu")):
            seconds = [run[i] for run in runs]
            print(
                f"{way:<8} {what:<5} median {statistics.median(seconds):.3f} s "
                f"(min {min(seconds):.3f}, max {max(seconds):.3f}) over {args.repeat} starts"
            )


if __name__ == "__main__":
    main()
