"""What a big picture costs: building its DOT text, and Graphviz's ``dot`` laying it out.

Each case is one ``autograd-viz dot`` request. Timed apart, as the median of
``--repeats`` runs: the DOT text (building the view, choosing what to show,
``Digraph.source``; this process's CPU time) and ``dot -Tsvg`` on it (the
child's CPU time, read from ``resource``, and wall time), once as drawn now
(:func:`autograd_viz.draw.render.dot.pipe`, with Note [Laying out big pictures quickly]'s
settings and its fallbacks) and, with ``--before``, once without the quick
settings (the picture as drawn before them).

Cases on our engine (no PyTorch needed): ``stacked``, a GPT-2-shaped model of
33 blocks with every call open (``--expand transformer``, about 2,000 nodes,
its module clusters stacked), ``all``, the same with 12 blocks and
``--expand all``, and a T5-shaped model of ``--t5-blocks`` encoder and decoder
blocks (24 + 24, 965 nodes; every decoder block reads the encoder's output, and
every block a position bias its stack's first one makes: long edges into one
node, the hardest pictures found), stacked and ``--expand all``. Its blocks are
small, so its long edges grow with the square of its nodes: at 48 + 48 blocks
(1,925 nodes) they took dot past 10 s until they were drawn to copies of their
far ends (``--uncopied`` lays it out without them too; docs/performance.md). A
recorded trace is added with ``--trace FILE[:EXPAND]`` (``EXPAND`` is what
``--expand`` gets, ``all`` by default, several joined by ``+``:
``t5.jsonl:encoder+decoder`` opens both stacks), as the tables in
docs/performance.md were made from T5s and GPT-2s from ``transformers``.

Usage:
    python -m benchmarks.dot_layout [--repeats 1] [--before] [--uncopied] [--no-gpt]
        [--t5-blocks 24 | 48+48] [--trace T.jsonl:all ...]

Results are printed as a table and appended as JSON lines to
``benchmarks/results/dot_layout.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import graphviz
import numpy as np
from rich.console import Console
from rich.table import Table

import engine
from autograd_viz import record
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.render import dot
from autograd_viz.draw.render.dot_render import QUICK_LAYOUT, QUICK_SETTINGS, far_edges, render
from autograd_viz.trace import Trace
from benchmarks.dot_modules import gpt_trace

RESULTS = Path(__file__).resolve().parent / "results" / "dot_layout.jsonl"


def t5_trace(layers: int = 16, width: int = 8, decoder: int | None = None) -> Trace:
    """A T5-shaped backward pass of ``layers`` encoder and ``decoder`` (``layers`` unless
    given) decoder blocks."""
    rng = np.random.default_rng(0)

    def linear(x: engine.Tensor, path: str, name: str) -> engine.Tensor:
        w = rng.standard_normal((width, width)) * 0.1
        with engine.scope(name, kind="Linear"):
            return x @ engine.tensor(w, requires_grad=True, name=f"{path}.{name}.weight")

    def block(x: engine.Tensor, memory: engine.Tensor, bias: engine.Tensor, path: str) -> Any:
        with engine.scope("attention", kind="T5Attention"):
            q, k = linear(x, path, "q"), linear(memory, path, "k")
            scores = ((q @ k.t()) + bias).softmax(-1)
            x = x + linear(scores @ linear(memory, path, "v"), path, "o")
        with engine.scope("ff", kind="T5DenseActDense"):
            return x + linear(linear(x, path, "wi").tanh(), path, "wo")

    def stack(
        x: engine.Tensor, name: str, memory: engine.Tensor | None, layers: int
    ) -> engine.Tensor:
        with engine.scope(name, kind="T5Stack"):
            for i in range(layers):
                with engine.scope(f"block.{i}", kind="T5Block"):
                    if i == 0:  # the position bias the first block makes and every block reads
                        table = rng.standard_normal((x.shape[0], x.shape[0]))
                        with engine.scope("relative_attention_bias", kind="Embedding"):
                            bias = (
                                engine.tensor(table, requires_grad=True, name=f"{name}.bias") * 1.0
                            )
                    x = block(x, x if memory is None else memory, bias, f"{name}.block.{i}")
        return x

    memory = stack(engine.tensor(rng.standard_normal((4, width))), "encoder", None, layers)
    decoder = layers if decoder is None else decoder
    y = stack(engine.tensor(rng.standard_normal((4, width))), "decoder", memory, decoder)
    with record() as trace:
        y.sum().backward()
    return trace


def timed(work: Callable[[], Any]) -> tuple[Any, float, float, float]:
    """``work()``'s result, wall seconds, this process's CPU seconds and its children's."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    start, start_cpu = time.perf_counter(), time.process_time()
    result = work()
    cpu = time.process_time() - start_cpu
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    return result, wall, cpu, child


def without_quick_settings(graph: graphviz.Digraph) -> graphviz.Digraph:
    """``graph`` as drawn before Note [Laying out big pictures quickly]: no settings, and its
    edges' labels on them."""
    plain = graph.copy()
    for name in QUICK_SETTINGS:
        plain.graph_attr.pop(name, None)
    plain.body = [
        line.replace("[xlabel=", "[label=").replace(" xlabel=", " label=")
        if " -> " in line
        else line
        for line in plain.body
    ]
    return plain


def measure(
    name: str, trace: Trace, expand: str, repeats: int, before: bool, uncopied: bool = False
) -> dict[str, Any]:
    """The DOT text's cost and ``dot``'s, for ``to_dot(trace, expand=expand.split("+"))``;
    with ``uncopied``, also drawn with its far edges along the ranks (Note [Far edges drawn
    to a copy] in draw/render/dot_render.py)."""
    opened = expand.split("+")
    builds = [timed(lambda: dot.to_dot(trace, expand=opened).source) for _ in range(repeats)]
    graph = dot.to_dot(trace, expand=opened)
    view = dot.select(dot.build_view(trace), ViewOptions(expand=tuple(opened)))
    row: dict[str, Any] = {
        "case": name,
        "expand": expand,
        "nodes": len(view.nodes),  # the backward graph's nodes and module boxes drawn
        "build_cpu_s": statistics.median(b[2] for b in builds),
        "far_edges_copied": len(far_edges(view)) if len(view.nodes) > QUICK_LAYOUT else 0,
    }
    variants = [("now", graph)]
    if uncopied:
        variants.append(("uncopied", render(view, far=False)))
    if before:
        variants.append(("before", without_quick_settings(render(view, far=False))))
    for label, drawing in variants:
        notices: list[str] = []
        runs = [timed(partial(dot.pipe, drawing, "svg", notices)) for _ in range(repeats)]
        row[f"{label}_dot_cpu_s"] = statistics.median(r[3] for r in runs)
        row[f"{label}_dot_wall_s"] = statistics.median(r[1] for r in runs)
        svg = runs[-1][0].decode()
        row["boxes"] = svg.count('class="node')  # every box drawn: nodes, tensors, the legend
        head = svg[svg.index("<svg") : svg.index(">", svg.index("<svg"))]
        row[f"{label}_size"] = " × ".join(
            part.split('"')[1] for part in head.split() if part.startswith(("width=", "height="))
        )
        row[f"{label}_notices"] = sorted(set(notices))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="runs per request (median)")
    parser.add_argument("--before", action="store_true", help="also lay out without the settings")
    parser.add_argument("--trace", action="append", default=[], help="FILE[:EXPAND] to add")
    parser.add_argument("--no-engine", action="store_true", help="only the --trace cases")
    parser.add_argument(
        "--uncopied", action="store_true", help="also lay out with far edges along the ranks"
    )
    parser.add_argument("--no-gpt", action="store_true", help="leave out the GPT-2-shaped cases")
    parser.add_argument(
        "--t5-blocks",
        default="24",
        help="blocks a stack of the T5-shaped case: N, or ENCODER+DECODER (48+48)",
    )
    args = parser.parse_args()
    encoder, _, decoder = args.t5_blocks.partition("+")
    if not encoder.isdecimal() or not (decoder or encoder).isdecimal():
        parser.error(f"--t5-blocks takes N or N+M blocks, not {args.t5_blocks!r}")

    cases: list[tuple[str, Trace, str]] = []
    if not args.no_engine:
        if not args.no_gpt:
            cases.append(("stacked: 33 GPT-2-shaped blocks", gpt_trace(33), "transformer"))
            cases.append(("all: 12 GPT-2-shaped blocks", gpt_trace(12), "all"))
        n = f"{encoder} + {decoder or encoder}"
        t5 = t5_trace(int(encoder), decoder=int(decoder or encoder))
        cases.append((f"stacked: {n} T5-shaped blocks", t5, "encoder+decoder"))
        cases.append((f"all: {n} T5-shaped blocks", t5, "all"))
    for spec in args.trace:
        path, _, expand = spec.partition(":")
        trace = Trace.load(path)
        trace.state_at(len(trace))  # index it once, as dot does on load
        cases.append((Path(path).name, trace, expand or "all"))

    rows = [
        measure(name, trace, how, args.repeats, args.before, args.uncopied)
        for name, trace, how in cases
    ]
    table = Table(title=f"dot of big pictures (median of {args.repeats})")
    columns = ("case", "--expand", "nodes", "boxes", "DOT text, CPU", "dot now: CPU / wall", "size")
    for column in columns:
        table.add_column(column, justify="left" if column in ("case", "--expand") else "right")
    table.add_column("far edges copied", justify="right")
    if args.uncopied:
        table.add_column("dot uncopied: CPU / wall", justify="right")
    if args.before:
        table.add_column("dot before: CPU / wall", justify="right")
    for row in rows:
        cells = [
            row["case"],
            row["expand"],
            f"{row['nodes']:,}",
            f"{row['boxes']:,}",
            f"{row['build_cpu_s']:.2f} s",
            f"{row['now_dot_cpu_s']:.1f} / {row['now_dot_wall_s']:.1f} s",
            row["now_size"],
            f"{row['far_edges_copied']:,}",
        ]
        if args.uncopied:
            cells.append(f"{row['uncopied_dot_cpu_s']:.1f} / {row['uncopied_dot_wall_s']:.1f} s")
        if args.before:
            cells.append(f"{row['before_dot_cpu_s']:.1f} / {row['before_dot_wall_s']:.1f} s")
        table.add_row(*cells)
    Console().print(table)
    for row in rows:
        for label in ("now", "uncopied", "before"):
            for line in row.get(f"{label}_notices", []):
                print(f"{row['case']} ({label}): {line}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a", encoding="utf-8") as file:
        for row in rows:
            row.update(python=sys.version.split()[0], machine=platform.machine())
            file.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
