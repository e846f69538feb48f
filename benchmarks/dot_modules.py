"""The module view's cost: ``dot`` of a 12-layer GPT-2-sized trace, and the view of 100,000 nodes.

Two workloads, both on our engine with :func:`engine.scope` naming the
modules (so PyTorch is not needed; a recorded PyTorch trace can be given with
``--trace``):

* ``gpt``: 12 blocks of a GPT-2-shaped model (layer norms, attention with
  query, key and value, an MLP, residual adds), about 1,000 backward nodes as
  in a 12-layer GPT-2. Timed: ``to_dot`` at the last step (the default module
  picture), at the middle step (the running node's modules open), around a
  parameter, ``--expand all`` (every node) and ``--expand transformer`` (every
  module call open, stacked down the page); each includes building the
  view and producing the DOT text, as ``autograd-viz dot`` does before ``dot``
  renders it.
* ``big``: a chain of ``--nodes`` nodes in 100 layers of 4 modules each.
  Timed: the graph at the last step (:func:`~autograd_viz.draw.model.graph_view.from_state`),
  the module view alone (:func:`autograd_viz.draw.model.showing.show` on a view
  already built), which is what every view pays on top of the graph at a
  step, and ``to_dot`` whole (both, and the DOT text), as ``autograd-viz dot``
  does before Graphviz lays it out.

Usage:
    python -m benchmarks.dot_modules [--repeats 5] [--nodes 100000] [--trace T.jsonl]

Each request is timed as the median of ``--repeats`` runs, in wall time and in
this process's CPU time (the figure to compare on a shared machine). Results
are printed as a table and appended as JSON lines to
``benchmarks/results/dot_modules.jsonl``.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

import engine
from autograd_viz import record, to_dot
from autograd_viz.draw.model import showing
from autograd_viz.draw.model.graph_view import from_state
from autograd_viz.trace import Trace

RESULTS = Path(__file__).resolve().parent / "results" / "dot_modules.jsonl"


def gpt_trace(layers: int = 12, width: int = 8) -> Trace:
    """A GPT-2-shaped backward pass of ``layers`` blocks, recorded with its modules."""
    rng = np.random.default_rng(0)

    def param(name: str, *shape: int) -> engine.Tensor:
        return engine.tensor(rng.standard_normal(shape) * 0.1, requires_grad=True, name=name)

    def linear(x: engine.Tensor, path: str, name: str) -> engine.Tensor:
        w, b = param(f"{path}.{name}.weight", width, width), param(f"{path}.{name}.bias", width)
        with engine.scope(name, kind="Conv1D"):
            return x @ w + b

    def norm(x: engine.Tensor, path: str, name: str) -> engine.Tensor:
        g = param(f"{path}.{name}.weight", width)
        with engine.scope(name, kind="LayerNorm"):
            centred = x - x.mean(-1, keepdim=True)
            return centred / ((centred * centred).mean(-1, keepdim=True) + 1e-5).sqrt() * g

    x = engine.tensor(rng.standard_normal((4, width)), requires_grad=True, name="inputs_embeds")
    mask = engine.tensor(np.triu(np.full((4, 4), -1e9), 1))
    with engine.scope("transformer", kind="GPT2Model"):
        for i in range(layers):
            path = f"transformer.h.{i}"
            with engine.scope(f"h.{i}", kind="GPT2Block"):
                h = norm(x, path, "ln_1")
                with engine.scope("attn", kind="GPT2Attention"):
                    q = linear(h, f"{path}.attn", "q")
                    k = linear(h, f"{path}.attn", "k")
                    v = linear(h, f"{path}.attn", "v")
                    scores = ((q @ k.t()) * width**-0.5 + mask).softmax(-1)
                    a = linear(scores @ v, f"{path}.attn", "c_proj")
                x = x + a
                h = norm(x, path, "ln_2")
                with engine.scope("mlp", kind="GPT2MLP"):
                    f = linear(h, f"{path}.mlp", "c_fc")
                    gelu = f * 0.5 * ((f + f * f * f * 0.044715) * 0.7978845608).tanh() + f * 0.5
                    m = linear(gelu, f"{path}.mlp", "c_proj")
                x = x + m
        x = norm(x, "transformer", "ln_f")
    loss = linear(x, "", "lm_head").sum()
    with record() as trace:
        loss.backward()
    return trace


def big_trace(nodes: int) -> Trace:
    """A chain of about ``nodes`` nodes in 100 layers of 4 modules each."""
    per_module = max(1, nodes // 800)
    x = engine.tensor([1.0], requires_grad=True, name="x")
    y = x
    with engine.scope("model", kind="Model"):
        for i in range(100):
            with engine.scope(f"layers.{i}", kind="Layer"):
                for j in range(4):
                    with engine.scope(f"sub{j}", kind="Sub"):
                        for _ in range(per_module):
                            y = y * 1.0001 + 0.0
    loss = y.sum()
    with record() as trace:
        loss.backward()
    return trace


def median_seconds(work: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Median wall time and median CPU time (this process) of ``repeats`` calls of ``work``.

    On a shared machine the wall time counts the other processes' turns too; the CPU
    time is this work's own.
    """
    walls, cpus = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        work()
        cpus.append(time.process_time() - start_cpu)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per phase (median)")
    parser.add_argument("--nodes", type=int, default=100_000, help="nodes of the big chain")
    parser.add_argument("--trace", type=Path, help="a recorded trace to time instead of gpt")
    args = parser.parse_args()

    gpt = Trace.load(args.trace) if args.trace else gpt_trace()
    gpt.state_at(len(gpt))  # index the trace once, as a viewer does on load
    nodes = sum(len(t.nodes) for t in gpt.graph_tasks.values())
    leaves = [
        n.leaf.name
        for t in gpt.graph_tasks.values()
        for n in t.nodes.values()
        if n.leaf is not None and n.leaf.name and n.scope
    ]
    middle = len(gpt) // 2
    phases: list[tuple[str, int, Callable[[], Any]]] = [
        ("gpt: dot, last step", nodes, lambda: to_dot(gpt).source),
        ("gpt: dot, middle step", nodes, lambda: to_dot(gpt, step=middle).source),
        (f"gpt: dot --around {leaves[len(leaves) // 2]}", nodes, lambda: _around(gpt, leaves)),
        ("gpt: dot --expand all", nodes, lambda: to_dot(gpt, expand="all").source),
        (
            "gpt: dot --expand transformer (every call open)",
            nodes,
            lambda: to_dot(gpt, expand="transformer").source,
        ),
    ]
    big = big_trace(args.nodes)
    last = big.state_at(len(big))
    # As `autograd-viz dot` does with the trace it loads: what it keeps to the end is frozen
    # out of the collector, so a view's objects do not bring full collections over it.
    gc.collect()
    gc.freeze()
    view = from_state(last)
    count = len(view.nodes)
    phases += [
        (f"big: graph at a step (from_state) of {count:,} nodes", count, lambda: from_state(last)),
        (f"big: module view of {count:,} nodes", count, lambda: showing.show(view)),
        (f"big: dot of {count:,} nodes, last step (DOT text)", count, lambda: to_dot(big).source),
    ]

    table = Table(title=f"The module view (median of {args.repeats})")
    table.add_column("request")
    table.add_column("nodes", justify="right")
    table.add_column("wall", justify="right")
    table.add_column("CPU", justify="right")
    rows = []
    for name, count, work in phases:
        seconds, cpu = median_seconds(work, args.repeats)
        rows.append({"request": name, "seconds": seconds, "cpu_seconds": cpu, "nodes": count})
        table.add_row(name, f"{count:,}", f"{seconds * 1000:.0f} ms", f"{cpu * 1000:.0f} ms")
    python = platform.python_version()
    table.caption = f"Python {python} on {platform.machine()}"
    Console().print(table)
    RESULTS.parent.mkdir(exist_ok=True)
    with RESULTS.open("a", encoding="utf-8") as file:
        for row in rows:
            row.update(python=python, machine=platform.machine(), argv=sys.argv[1:])
            file.write(json.dumps(row) + "\n")


def _around(trace: Trace, leaves: list[str]) -> str:
    source: str = to_dot(trace, around=leaves[len(leaves) // 2], depth=2).source
    return source


if __name__ == "__main__":
    main()
