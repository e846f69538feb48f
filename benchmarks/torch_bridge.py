"""What watching PyTorch's backward costs: recorded against plain, in one process.

Run: OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.torch_bridge [--repeat 15] [--cpu-time]

Two workloads, each run plain, under bare node hooks (a no-op pre-hook and
post hook on every node: the floor of any hook-based watcher that sees each
node start as it happens), under one bare post hook per node (the floor of a
watcher that sees each node when it ends, as ``record()`` does while only
recorders listen: Note [One hook per node] in
``autograd_viz/sources/pytorch/watch.py``) and under ``autograd_viz.record()``,
interleaved (Note [Interleaving] in harness.py):

* MLP: W3's network (1024-1024-1024-10, tanh, cross entropy, batch 256,
  float32): big tensors, few nodes; the figure is the backward's time.
* GRU: a GRUCell (batch 8, 32 wide) unrolled 20 steps: small tensors, many
  nodes; the figure is µs per node, and what watching adds per node (over
  plain, and over bare hooks: the recorder's own cost).

A fourth way, ``floor``, is the least a hook-based recorder with the same
content must do, written as plainly as CPython allows (``torch_floor.py``):
what ``record()`` costs beyond it is the price of its checks, its features
and its structure. On the MLP, whose few nodes' hooks cost nothing beside
their kernels, the fourth way is ``every value read once``: one post hook per
node reading each gradient, and each saved tensor once, by one ``sum`` (the
floor of exact summaries: a tensor's four numbers cannot cost less than one
pass over its memory).

Forward passes are built fresh each repeat and not timed. Prints a table.

``--split`` times the GRU's recorders again with every summary stubbed out
(one constant): what their summaries cost, and what the rest does.

``--held`` times the GRU's ``record()`` with the blocks of held gradients
reduced by PyTorch (as it runs) and by NumPy's float64 rows (as before), in
one process, interleaved.

``--collector`` runs the GRU's ``record()`` (``values="none"`` and every
gradient summarized) with Python's cyclic collector on, as users have it:
per recorded call, the collections it set off (by generation) and their
time, the objects the collector tracks that the call leaves alive (what the
trace keeps, and PyTorch's node objects the graph walk made), and its cost
with the collector on and off; and, for 100 calls in one recording, the
objects each call moves to the oldest generation (those alive when a middle
collection runs: what brings the next full collection nearer). See "The
collector's share" in docs/performance.md.

``--replay N`` also records a PyTorch trace of about N events (a GRUCell
unrolled as far as it takes), saves it, and times what ``autograd-viz
replay`` does before its first screen: loading the file as the command does
(``load_for_replay``: validated by ``Trace.load``, then frozen out of the
cyclic collector) and drawing the app headless (Textual's Pilot, 120×40).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

import autograd_viz
from autograd_viz.trace.summary import TensorSummary
from benchmarks.torch_floor import FloorWatcher, floor, floor_with_records, nodes_of, read_once

Build = Callable[[], torch.Tensor]


def mlp() -> tuple[str, Build]:
    torch.manual_seed(0)
    widths = (1024, 1024, 1024, 10)
    layers: list[torch.nn.Module] = []
    for a, b in itertools.pairwise(widths):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers[:-1])
    x = torch.randn(256, widths[0])
    y = torch.randint(0, widths[-1], (256,))

    def build() -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        return torch.nn.functional.cross_entropy(model(x), y)

    return "MLP 1024×3, batch 256", build


def gru() -> tuple[str, Build]:
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(32, 32)
    xs = torch.randn(20, 8, 32)

    def build() -> torch.Tensor:
        cell.zero_grad(set_to_none=True)
        h = torch.zeros(8, 32)
        for x in xs:
            h = cell(x, h)
        return h.pow(2).sum()

    return "GRUCell ×20, batch 8, 32 wide", build


def plain(loss: torch.Tensor) -> None:
    loss.backward()


def bare_hooks(loss: torch.Tensor) -> None:
    handles = []
    for fn in nodes_of(loss):
        handles.append(fn.register_prehook(lambda grads: None))
        handles.append(fn.register_hook(lambda grads_in, grads_out: None))
    try:
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()


def bare_post_hook(loss: torch.Tensor) -> None:
    handles = [fn.register_hook(lambda grads_in, grads_out: None) for fn in nodes_of(loss)]
    try:
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()


def recorded(loss: torch.Tensor) -> Any:
    with autograd_viz.record() as trace:
        loss.backward()
    return trace


Way = Callable[[torch.Tensor], Any]
WAYS: dict[str, Way] = {
    "plain": plain,
    "bare hooks": bare_hooks,
    "bare post hook": bare_post_hook,
    "record()": recorded,
}
MLP_WAYS: dict[str, Way] = {**WAYS, "every value read once": read_once}
"""The MLP's ways: ``every value read once`` is the floor of exact summaries of its large
tensors (``torch_floor.read_once``)."""
FLOOR_WAYS: dict[str, Way] = {**WAYS, "floor": floor, "floor + records": floor_with_records}
"""The GRU's ways: ``floor`` is the least any hook-based recorder with the same content
does, ``floor + records`` that plus the checks and a trace's record objects
(``torch_floor.py``); on the MLP's large tensors they would bound nothing."""


def measure(
    build: Build, ways: dict[str, Way], repeat: int, clock: Callable[[], float]
) -> dict[str, float]:
    """Median seconds of one backward per way, ways interleaved, the collector off."""
    samples: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(repeat):
        for way, run in ways.items():
            loss = build()
            gc.collect()
            gc.disable()
            try:
                started = clock()
                run(loss)
                samples[way].append(clock() - started)
            finally:
                gc.enable()
    return {way: statistics.median(times) for way, times in samples.items()}


def replay_first_screen(events: int) -> None:
    """Record about ``events`` events of a PyTorch backward, then time load + first screen."""
    import asyncio
    import tempfile
    from pathlib import Path

    from autograd_viz.cli.tui import load_for_replay
    from autograd_viz.tui import ReplayDriver, VizApp

    torch.manual_seed(0)
    cell = torch.nn.GRUCell(8, 8)
    steps = max(1, events // 85)  # about 85 events per unrolled step
    h = torch.zeros(2, 8)
    for x in torch.randn(steps, 2, 8):
        h = cell(x, h)
    with autograd_viz.record() as trace:
        h.sum().backward()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gru.jsonl"
        trace.save(path)
        # The command opens the file in a process of its own: nothing recorded is left.
        del trace, h, cell
        gc.collect()
        size = path.stat().st_size
        started = time.perf_counter()
        loaded = load_for_replay(str(path))  # as the command loads it
        load_s = time.perf_counter() - started

        async def first_screen() -> float:
            t0 = time.perf_counter()
            app = VizApp(ReplayDriver(loaded), source=str(path))
            async with app.run_test(size=(120, 40)) as pilot:
                await pilot.pause()
                return time.perf_counter() - t0

        screen_s = asyncio.run(first_screen())
    table = Table(title=f"replay of a PyTorch trace: {len(loaded):,} events, {size / 1e6:.1f} MB")
    for column in ("load the file", "first screen", "total"):
        table.add_column(column, justify="right")
    table.add_row(f"{load_s:.2f} s", f"{screen_s:.2f} s", f"{load_s + screen_s:.2f} s")
    Console().print(table)


_NO_NUMBERS = TensorSummary((), "float32", "cpu")


@contextlib.contextmanager
def _summaries_stubbed() -> Iterator[None]:
    """Every summary ``record()`` and the floors make is one constant, made once."""
    from autograd_viz.sources.pytorch import emitter, graph, saved

    patched = [
        (emitter, "resolved_summary", lambda tensor, max_values, hold=False: _NO_NUMBERS),
        (emitter, "hold_or_none", lambda tensor, meta, max_values: _NO_NUMBERS),
        (saved, "hold_saved", lambda tensor, max_values: None),
        (saved, "summarize_tensor", lambda tensor, device, max_values=0: _NO_NUMBERS),
        (graph, "summarize_tensor", lambda tensor, device, max_values=0: _NO_NUMBERS),
        (FloorWatcher, "summary", lambda self, tensor: None if tensor is None else _NO_NUMBERS),
    ]
    kept = [(owner, name, getattr(owner, name)) for owner, name, _ in patched]
    try:
        for owner, name, value in patched:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in kept:
            setattr(owner, name, value)


def _stubbed(way: Way) -> Way:
    def run(loss: torch.Tensor) -> Any:
        with _summaries_stubbed():
            return way(loss)

    return run


def split() -> None:
    """Time the GRU's ways with and without their summaries: what summaries cost each."""
    label, build = gru()
    nodes = len(nodes_of(build()))
    ways: dict[str, Way] = {"bare hooks": bare_hooks}
    for name in ("floor", "floor + records", "record()"):
        ways[name] = FLOOR_WAYS[name]
        ways[f"{name}, summaries stubbed"] = _stubbed(FLOOR_WAYS[name])
    for run in ways.values():
        run(build())
    medians = measure(build, ways, 21, time.thread_time)
    hooks = medians["bare hooks"]
    table = Table(title=f"{label}: µs per node beyond bare hooks, thread CPU time")
    for column in ("way", "all", "summaries stubbed", "the summaries"):
        table.add_column(column, justify="left" if column == "way" else "right")
    for name in ("floor", "floor + records", "record()"):
        whole = (medians[name] - hooks) / nodes * 1e6
        rest = (medians[f"{name}, summaries stubbed"] - hooks) / nodes * 1e6
        table.add_row(name, f"{whole:.1f}", f"{rest:.1f}", f"{whole - rest:.1f}")
    Console().print(table)


@contextlib.contextmanager
def _held_in_numpy() -> Iterator[None]:
    """Held gradients' blocks reduced in NumPy rows, float64, as before PyTorch reduced them.

    See Note [Held summaries in tensor ops] in ``autograd_viz/sources/pytorch/held.py``:
    the blocks are the same (stacked a shape at a time, one reduction per memory);
    only what reduces their rows differs.
    """
    from autograd_viz.sources.deferred import settle_rows
    from autograd_viz.sources.pytorch import held
    from autograd_viz.sources.pytorch.host_view import host_view

    def numpy_rows(blocks: list[tuple[torch.Tensor, list[Any]]]) -> None:
        for rows, summaries in blocks:
            settle_rows(host_view(rows), summaries)

    kept = held.settle_blocks
    held.settle_blocks = numpy_rows
    try:
        yield
    finally:
        held.settle_blocks = kept


def held_reductions(repeat: int) -> None:
    """Time the GRU's ``record()`` with its held blocks reduced by PyTorch and by NumPy."""

    def numpy_way(loss: torch.Tensor) -> None:
        with _held_in_numpy():
            recorded(loss)

    label, build = gru()
    nodes = len(nodes_of(build()))
    ways: dict[str, Way] = {
        "plain": plain,
        "record()": recorded,
        "record(), held blocks in NumPy": numpy_way,
    }
    for run in ways.values():
        run(build())
    medians = measure(build, ways, repeat, time.thread_time)
    table = Table(title=f"{label}: µs per node over plain, thread CPU time, medians")
    table.add_column("way")
    table.add_column("+µs/node", justify="right")
    for name in ways:
        if name != "plain":
            table.add_row(name, f"{(medians[name] - medians['plain']) / nodes * 1e6:.1f}")
    Console().print(table)


def kept_by(run: Way, build: Build) -> tuple[int, Counter[str]]:
    """The objects the collector tracks that one call of ``run`` leaves alive, by type.

    Counted after a full collection and the young collections a long run
    would make (tuples and dicts of plain values leave the collector then),
    while the call's result (a trace, its graph) is still held, as a
    training step holds it until the next.
    """
    loss = build()
    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    gc.disable()
    try:
        result = run(loss)
        gc.collect(0)
        gc.collect(1)
        new = [o for o in gc.get_objects() if id(o) not in before]
    finally:
        gc.enable()
    del result, loss
    return len(new), Counter(type(o).__name__ for o in new)


class _Collections:
    """The cyclic collector's collections while installed (``with``), tallied under
    :attr:`label`: ``[gen 0, gen 1, gen 2, ns]`` per label; none while the label is ``None``."""

    def __init__(self) -> None:
        self.label: str | None = None
        self.spent: dict[str, list[float]] = {}
        self._started = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        elif self.label is not None:
            spent = self.spent.setdefault(self.label, [0.0, 0.0, 0.0, 0.0])
            spent[info["generation"]] += 1
            spent[3] += time.perf_counter_ns() - self._started

    def __enter__(self) -> _Collections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self)


def collector_share(repeat: int) -> None:
    """The GRU's recorded calls with the collector on: its collections, and what they cost."""
    label, build = gru()
    nodes = len(nodes_of(build()))
    none: Way = lambda loss: _recorded_at(loss, "none")  # noqa: E731
    ways: dict[str, Way] = {"plain": plain, 'record(values="none")': none, "record()": recorded}
    for run in ways.values():
        for _ in range(3):
            run(build())
    table = Table(title=f"{label}: the cyclic collector, per recorded call, thread CPU time")
    for column in (
        "way", "collections (gen 0/1/2)", "collector µs/node", "+µs/node gc on", "+µs/node gc off",
        "objects kept", "most kept",
    ):  # fmt: skip
        table.add_column(column, justify="left" if column in ("way", "most kept") else "right")
    on: dict[str, list[float]] = {way: [] for way in ways}
    with _Collections() as seen:
        for _ in range(repeat):  # the ways interleaved, the collector on
            for way, run in ways.items():
                loss = build()
                seen.label = way
                t0 = time.thread_time()
                run(loss)
                on[way].append(time.thread_time() - t0)
                seen.label = None
                del loss
    off = measure(build, ways, repeat, time.thread_time)
    base_on = statistics.mean(on["plain"])
    for way, run in ways.items():
        n0, n1, n2, ns = seen.spent.get(way, [0.0, 0.0, 0.0, 0.0])
        count, kinds = kept_by(run, build) if way != "plain" else (0, Counter())
        table.add_row(
            way,
            f"{n0 / repeat:.1f} / {n1 / repeat:.2f} / {n2 / repeat:.2f}",
            f"{ns / repeat / nodes / 1e3:.1f}",
            "" if way == "plain" else f"{(statistics.mean(on[way]) - base_on) / nodes * 1e6:.1f}",
            "" if way == "plain" else f"{(off[way] - off['plain']) / nodes * 1e6:.1f}",
            f"{count:,}",
            ", ".join(f"{name} {n}" for name, n in kinds.most_common(4)),
        )
    Console(width=160).print(table)
    print(
        f"{len(gc.get_objects()):,} objects tracked in this process; gc thresholds "
        f"{gc.get_threshold()}; means over {repeat} calls (gc on), medians (gc off)"
    )
    long = Table(
        title=f"{label}: {repeat} calls in one recording, the trace kept, the collector on, "
        "thread CPU time"
    )
    for column in (
        "values", "+µs/node", "collector µs/node", "objects tracked per call kept",
        "moved to the oldest generation per call",
    ):  # fmt: skip
        long.add_column(column, justify="left" if column == "values" else "right")
    for values in ("none", "all"):
        moved = promoted_per_call(build, values, repeat)
        long.add_row(values, *one_recording(build, nodes, values, repeat), f"{moved:,.0f}")
    Console(width=160).print(long)


class _Promotions:
    """Objects each middle-generation collection moves to the oldest one, summed (``with``).

    What a run hands the full collections, which walk every object of the process: an
    object alive when a young collection runs moves on, whether it dies soon after or not.
    Counted by listing the oldest generation around each such collection (slow: untimed).
    """

    def __init__(self) -> None:
        self.moved = 0
        self._before = 0
        self._busy = False

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 1 or self._busy:
            return
        self._busy = True
        count = len(gc.get_objects(2))
        if phase == "start":
            self._before = count
        else:
            self.moved += count - self._before
        self._busy = False

    def __enter__(self) -> _Promotions:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self)


def promoted_per_call(build: Build, values: str, calls: int) -> float:
    """Objects moved to the oldest generation per call, ``calls`` calls in one ``record()``
    (a run apart from the timed ones: counting them is slow)."""
    gc.collect()
    with autograd_viz.record(values=values), _Promotions() as promotions:
        for _ in range(calls):
            loss = build()
            loss.backward()
            del loss
    return promotions.moved / calls


def one_recording(build: Build, nodes: int, values: str, calls: int) -> tuple[str, str, str]:
    """``calls`` backward calls in one ``record()``, as a training loop records: what each
    adds over plain (blocks of plain calls before and after), the collections' time, and the
    objects the collector tracks that the trace keeps, per call."""

    def plain_block() -> float:
        total = 0.0
        for _ in range(calls):
            loss = build()
            t0 = time.thread_time()
            loss.backward()
            total += time.thread_time() - t0
        return total / calls

    before = plain_block()
    gc.collect()
    tracked = len(gc.get_objects())
    total = 0.0
    with _Collections() as seen, autograd_viz.record(values=values) as trace:
        for _ in range(calls):
            loss = build()
            seen.label = values
            t0 = time.thread_time()
            loss.backward()
            total += time.thread_time() - t0
            seen.label = None
            del loss
    gc.collect()
    kept = (len(gc.get_objects()) - tracked) / calls
    del trace
    base = (before + plain_block()) / 2
    spent = seen.spent.get(values, [0.0, 0.0, 0.0, 0.0])
    return (
        f"{(total / calls - base) / nodes * 1e6:.1f}",
        f"{spent[3] / calls / nodes / 1e3:.1f}",
        f"{kept:,.0f}",
    )


def _recorded_at(loss: torch.Tensor, values: str) -> Any:
    with autograd_viz.record(values=values) as trace:
        loss.backward()
    return trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--replay", type=int, default=0, metavar="EVENTS")
    parser.add_argument(
        "--split",
        action="store_true",
        help="time the GRU's ways with their summaries stubbed out too: what summaries cost",
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time the calling thread's CPU time (steadier on a busy machine: CPU backward "
        "with one intra-op thread runs there) instead of wall time",
    )
    parser.add_argument(
        "--held",
        action="store_true",
        help="time the GRU's record() with its held gradients reduced by PyTorch and by NumPy",
    )
    parser.add_argument(
        "--collector",
        action="store_true",
        help="the GRU's recorded calls with the cyclic collector on: its collections, their "
        "time, and the objects a call leaves alive",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.collector:
        collector_share(args.repeat)
        return
    if args.held:
        held_reductions(args.repeat)
        return
    if args.replay:
        replay_first_screen(args.replay)
        return
    if args.split:
        split()
        return
    table = Table(title="Watching PyTorch's backward: median of interleaved repeats, gc off")
    for column in ("workload", "nodes", "way", "backward", "× plain", "µs/node", "+µs/node"):
        table.add_column(column, justify="left" if column in ("workload", "way") else "right")
    table.add_column("+µs/node over bare hooks", justify="right")
    beyond_hooks: dict[str, float] = {}
    for make, ways in ((mlp, MLP_WAYS), (gru, FLOOR_WAYS)):
        label, build = make()
        nodes = len(nodes_of(build()))
        for _ in range(2):  # warm up every path once
            for run in ways.values():
                run(build())
        medians = measure(
            build, ways, args.repeat, time.thread_time if args.cpu_time else time.perf_counter
        )
        base, hooks = medians["plain"], medians["bare hooks"]
        beyond_hooks = {way: seconds - hooks for way, seconds in medians.items()}
        for way, seconds in medians.items():
            table.add_row(
                label,
                f"{nodes}",
                way,
                f"{seconds * 1e3:.2f} ms",
                f"{seconds / base:.2f}×",
                f"{seconds / nodes * 1e6:.1f}",
                "" if way == "plain" else f"{(seconds - base) / nodes * 1e6:.1f}",
                # what recording adds beyond the hooks any hook-based watcher needs
                "" if way in ("plain", "bare hooks") else f"{(seconds - hooks) / nodes * 1e6:.1f}",
            )
        table.add_section()
    Console(width=132).print(table)  # wide enough that no figure is cut
    # Over the floor: a ratio of two costs taken in one run, steady as the machine drifts.
    ours, floor_cost = beyond_hooks["record()"], beyond_hooks["floor + records"]
    print(f"GRU, beyond bare hooks: record() is {ours / floor_cost:.2f}× the floor with records")
    one_hook = (beyond_hooks["record()"] - beyond_hooks["bare post hook"]) / nodes * 1e6
    print(f"GRU, record() beyond one bare post hook per node: {one_hook:.1f} µs per node")
    clock = "thread CPU time" if args.cpu_time else "wall time"
    print(f"torch {torch.__version__}, one intra-op thread; {args.repeat} repeats; {clock}")


if __name__ == "__main__":
    main()
