"""What following PyTorch's modules costs: module hooks and module scopes, in one process.

Run: OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.torch_modules [--repeat 15] [--cpu-time]

The two workloads of ``benchmarks.torch_bridge`` (W3's MLP: few nodes, big
tensors; a GRUCell unrolled 20 steps: many nodes, small tensors), each a
whole step (forward and backward, as recording a model's step does), four
ways, interleaved (Note [Interleaving] in harness.py), the collector off:

* ``plain``: PyTorch alone;
* ``module hooks``: the global module hooks that follow module calls
  (``autograd_viz.sources.pytorch.module_calls.arm``) and nothing else: what a
  program pays in its forward while it is recorded, × plain;
* ``record(), no modules``: the step recorded with module tracking taken out
  (no hooks, no lookup of the nodes' calls);
* ``record()``: the step recorded as it is.

The last column is what module tracking adds to a recording, per node of
the backward graph: ``record()`` minus ``record(), no modules``; on a busy
machine it is within the noise of a recording, so a second table times the
two parts alone: the hooks in the forward (per module call: the forward with
them over the forward without, over the calls) and the lookup when backward
starts (per node: the graph's plan and scopes with module tracking over
without).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

import autograd_viz
from autograd_viz.sources.pytorch import graph as torch_graph
from autograd_viz.sources.pytorch import module_calls
from autograd_viz.sources.pytorch.leaf_names import LeafNamer
from benchmarks.torch_bridge import Build, gru, measure, mlp, nodes_of


@contextlib.contextmanager
def _no_module_tracking() -> Iterator[None]:
    """Recording with no module hooks and no lookup of the nodes' module calls."""
    kept = module_calls.arm, torch_graph._find_calls
    module_calls.arm = lambda: None
    torch_graph._find_calls = lambda order: None
    try:
        yield
    finally:
        module_calls.arm, torch_graph._find_calls = kept


def _plain(build: Build) -> Any:
    build().backward()


def _hooks(build: Build) -> Any:
    module_calls.arm()
    try:
        build().backward()
    finally:
        module_calls.disarm()


def _recorded_without(build: Build) -> Any:
    with _no_module_tracking(), autograd_viz.record():
        build().backward()


def _recorded(build: Build) -> Any:
    with autograd_viz.record():
        build().backward()


def _on(run: Callable[[Build], Any], build: Build) -> Callable[[Any], Any]:
    """``run`` as ``measure`` calls a way; the loss it builds is not used."""
    return lambda _loss: run(build)


WAYS = {
    "plain": _plain,
    "module hooks": _hooks,
    "record(), no modules": _recorded_without,
    "record()": _recorded,
}


def _forward(build: Build, hooks: bool) -> Callable[[Any], Any]:
    def run(_loss: Any) -> Any:
        if not hooks:
            return build()
        module_calls.arm()
        try:
            return build()
        finally:
            module_calls.disarm()

    return run


def _lookup(build: Build, tracked: bool) -> Callable[[Any], Any]:
    """The graph's plan and its nodes' scopes, as a recorded backward makes them."""
    module_calls.arm()
    try:
        loss = build()
    finally:
        module_calls.disarm()
    roots = [(loss.grad_fn, 0)]

    def run(_loss: Any) -> Any:
        with contextlib.ExitStack() as stack:
            if not tracked:
                stack.enter_context(_no_module_tracking())
            plan = torch_graph.plan_graph_task(roots, [], True, LeafNamer(sys._getframe(1)))
            return plan.modules.scopes(plan.nodes)

    return run


def parts(repeat: int, clock: Callable[[], float]) -> None:
    """The two parts directly: the hooks in the forward, the lookup when backward starts."""
    table = Table(title="Module tracking's parts, median of interleaved repeats, gc off")
    for column in ("workload", "module calls", "nodes", "hooks, µs per call", "lookup, µs/node"):
        table.add_column(column, justify="left" if column == "workload" else "right")
    for make in (mlp, gru):
        label, build = make()
        nodes = len(nodes_of(build()))
        calls = _count_calls(build)
        ways = {
            "forward": _forward(build, False),
            "forward, hooks": _forward(build, True),
            "plan": _lookup(build, False),
            "plan, scopes": _lookup(build, True),
        }
        for run in ways.values():
            run(None)
        medians = measure(lambda: torch.zeros(()), ways, repeat, clock)
        hooks = (medians["forward, hooks"] - medians["forward"]) / calls * 1e6
        lookup = (medians["plan, scopes"] - medians["plan"]) / nodes * 1e6
        table.add_row(label, f"{calls}", f"{nodes}", f"{hooks:.1f}", f"{lookup:.1f}")
    Console(width=120).print(table)


def _count_calls(build: Build) -> int:
    count = 0

    def hook(module: Any, args: Any) -> None:
        nonlocal count
        count += 1

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        build()
    finally:
        handle.remove()
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time the calling thread's CPU time (steadier on a busy machine) instead of wall time",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # the ways without tracking say their nodes have no module
    table = Table(title="Following PyTorch's modules: a step (forward + backward), gc off")
    for column in ("workload", "nodes", "way", "step", "× plain", "+µs/node by modules"):
        table.add_column(column, justify="left" if column in ("workload", "way") else "right")
    clock = time.thread_time if args.cpu_time else time.perf_counter
    for make in (mlp, gru):
        label, build = make()
        nodes = len(nodes_of(build()))
        ways = {way: _on(run, build) for way, run in WAYS.items()}
        for _ in range(2):  # warm up every path once
            for run in ways.values():
                run(None)
        # measure() builds a loss per run; these ways build their own, inside the recording.
        medians = measure(lambda: torch.zeros(()), ways, args.repeat, clock)
        base = medians["plain"]
        added = (medians["record()"] - medians["record(), no modules"]) / nodes * 1e6
        for way, seconds in medians.items():
            table.add_row(
                label,
                f"{nodes}",
                way,
                f"{seconds * 1e3:.2f} ms",
                f"{seconds / base:.2f}×",
                f"{added:.1f}" if way == "record()" else "",
            )
        table.add_section()
    Console(width=120).print(table)
    parts(args.repeat, clock)
    clock_name = "thread CPU time" if args.cpu_time else "wall time"
    print(f"torch {torch.__version__}, one intra-op thread; {args.repeat} repeats; {clock_name}")


if __name__ == "__main__":
    main()
