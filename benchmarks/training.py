"""Training runs: what a call that is not recorded costs, and memory over a long recording.

Run: OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.training [--steps 300] [--repeat 7]
     [--memory 5000]

* **Calls not recorded.** A training step (forward, backward, an SGD update)
  timed plain and inside ``record(steps=...)`` that records none of the timed
  calls: every backward call still goes through the call gate
  (Note [Backward calls] in ``engine/calls.py``) and runs with nobody
  listening. Two loops: W3's MLP (1024-1024-1024-10, tanh, batch 256) and a
  small-tensor MLP (32-32-32-10, batch 8: many short calls, the gate's worst
  case), and a one-node backward (the gate alone). Blocks of steps,
  interleaved (Note [Interleaving] in harness.py), the collector off, timed
  in the calling thread's CPU time; the table gives the fastest block's step,
  the ratio over plain and the microseconds each call adds.
* **``--memory N``**: ``autograd-viz record`` on an N-step loop of a 256-wide
  MLP, each way in a process of its own (plain ``python``, streamed, ``--every
  10``, ``--last 10``): maximum RSS and the trace file's size.
* **``--light``**: ``record(values=...)`` at each tier beside bare node
  hooks, ``detect_anomaly`` and ``torch.profiler`` limited to the autograd
  nodes, on the MLP and the GRU of ``benchmarks.torch_bridge``; the tiers
  alone on a small chain of our engine.
* **``--parts``**: where a call-level call's time goes on the GRU: the call
  held by a flight recorder, the names read at its start, the graph walk,
  and deriving a held call when the ring is written.
* **``--nan``**: what ``autograd-viz nan --every N`` costs a call it does not
  record, on W3's MLP step and a GRU step (GRUCell ×20, SGD): plain, inside
  ``watch_nan(steps=...)`` that records none of the timed calls with the
  check at the parameters (Note [Checking calls not recorded] in
  ``autograd_viz/nan/unrecorded.py``) taken out, and with it; the last
  column is what that check adds, over plain.
* **``--nan-every``**: the backward call alone that ``nan --every N`` leaves
  out, on the MLP and the GRU of ``benchmarks.torch_bridge``, beside plain
  and the call level's flight recorder (``record(observe="calls",
  last=1)``, the light tier): each built (the forward, checked) untimed,
  then its backward timed in thread CPU time, per node over plain.
* **``--open TRACE``**: finding the calls of a long trace and loading the
  first, middle and last of them alone (``replay``/``dot``/``timeline``
  ``--call K``), with this process's maximum RSS after each; ``--whole``
  also loads the whole file once, for comparison.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

import autograd_viz

Step = Callable[[], None]


def training_step(widths: tuple[int, ...], batch: int) -> Step:
    """One step of an MLP with tanh between layers, cross entropy and an SGD update."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for a, b in itertools.pairwise(widths):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers[:-1])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, widths[0])
    y = torch.randint(0, widths[-1], (batch,))

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    return step


def _block(step: Step, steps: int, watched: bool) -> float:
    """CPU seconds per step over ``steps`` steps, plain or inside a recording that keeps none.

    The calling thread's CPU time (``time.thread_time``): with one intra-op
    thread, PyTorch's CPU work runs there, and other processes on a busy
    machine do not count.
    """
    if not watched:
        started = time.thread_time()
        for _ in range(steps):
            step()
        return (time.thread_time() - started) / steps
    with autograd_viz.record(steps=[10**12]):  # counts every call, records none
        started = time.thread_time()
        for _ in range(steps):
            step()
        elapsed = time.thread_time() - started
    return elapsed / steps


def not_recorded(steps: int, repeat: int) -> None:
    table = Table(title="A training step when its backward call is not recorded (CPU time)")
    for column in ("loop", "plain", "record(steps=...)", "× plain", "+µs per call"):
        table.add_column(column, justify="left" if column == "loop" else "right")
    loops = {
        "W3 MLP 1024×3, batch 256": (training_step((1024, 1024, 1024, 10), 256), steps // 10),
        "small MLP 32×3, batch 8": (training_step((32, 32, 32, 10), 8), steps),
        "one-node backward": (_one_node(), steps * 5),
    }
    for label, (step, n) in loops.items():
        for _ in range(3):
            step()
        plain: list[float] = []
        watched: list[float] = []
        gc.disable()
        try:
            for _ in range(repeat):
                plain.append(_block(step, n, False))
                watched.append(_block(step, n, True))
        finally:
            gc.enable()
        # The fastest block of each: what a busy machine adds is never negative.
        p, w = min(plain), min(watched)
        table.add_row(
            label,
            f"{p * 1e6:.0f} µs",
            f"{w * 1e6:.0f} µs",
            f"{w / p:.3f}×",
            f"{(w - p) * 1e6:.1f}",
        )
    Console(width=120).print(table)
    print(
        f"{steps} steps per block (W3: a tenth), the fastest of {repeat} blocks each, interleaved"
    )


def _gru_step() -> Step:
    """A GRUCell (batch 8, 32 wide) unrolled 20 steps, a squared loss and an SGD update."""
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(32, 32)
    optimizer = torch.optim.SGD(cell.parameters(), lr=1e-3)
    xs = torch.randn(20, 8, 32)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        h = torch.zeros(8, 32)
        for x in xs:
            h = cell(x, h)
        h.pow(2).sum().backward()
        optimizer.step()

    return step


def _nan_block(step: Step, steps: int, way: str) -> float:
    """CPU seconds per step: plain, or under ``watch_nan`` recording none of the calls,
    without (``"unchecked"``) or with (``"checked"``) the check at the parameters."""
    from autograd_viz.nan import watch as nan_watch

    if way == "plain":
        return _block(step, steps, False)
    leaf_check = nan_watch.LeafCheck
    if way == "unchecked":
        nan_watch.LeafCheck = lambda *_args, **_kwargs: None  # type: ignore[assignment,misc]
    try:
        with nan_watch.watch_nan(steps=[10**12], keep_trace=False):
            started = time.thread_time()
            for _ in range(steps):
                step()
            elapsed = time.thread_time() - started
    finally:
        nan_watch.LeafCheck = leaf_check  # type: ignore[misc]
    return elapsed / steps


def nan_not_recorded(steps: int, repeat: int) -> None:
    table = Table(title="A step whose backward `nan --every` does not record (CPU time)")
    columns = ("loop", "plain", "nan, unchecked", "nan, checked", "check +µs", "check / plain")
    for column in columns:
        table.add_column(column, justify="left" if column == "loop" else "right")
    loops = {
        "W3 MLP 1024×3, batch 256": (training_step((1024, 1024, 1024, 10), 256), steps // 10),
        "GRUCell ×20, batch 8": (_gru_step(), steps),
    }
    for label, (step, n) in loops.items():
        for _ in range(3):
            step()
        times: dict[str, list[float]] = {"plain": [], "unchecked": [], "checked": []}
        gc.disable()
        try:
            for _ in range(repeat):
                for way, kept in times.items():
                    kept.append(_nan_block(step, n, way))
        finally:
            gc.enable()
        p, u, c = (min(times[way]) for way in ("plain", "unchecked", "checked"))
        table.add_row(
            label,
            f"{p * 1e6:.0f} µs",
            f"{u * 1e6:.0f} µs",
            f"{c * 1e6:.0f} µs",
            f"{(c - u) * 1e6:.1f}",
            f"{(c - u) / p:+.2%}",
        )
    Console(width=120).print(table)
    print(
        f"{steps} steps per block (W3: a tenth), the fastest of {repeat} blocks each, interleaved"
    )


def nan_left_out(repeat: int) -> None:
    """The backward of a call ``nan --every`` leaves out, per node over plain.

    Inside ``watch_nan(steps=...)`` that records none of the calls (with the
    check at the parameters, Note [Checking calls not recorded]), each loss
    is built (its forward checked op by op, untimed) and its backward timed
    alone, in thread CPU time with the collector off, interleaved with plain
    and with the call level's flight recorder (``record(observe="calls",
    last=1)``: what a call costs the light tier). The backward is called
    from a frame that holds the model, as a training loop's does, so that the
    check at the parameters finds them; a first call in each block, untimed,
    finds them once.
    """
    from autograd_viz.nan.watch import watch_nan
    from benchmarks.torch_bridge import gru, mlp, nodes_of

    table = Table(title="The backward of a call `nan --every` leaves out (fastest, CPU time)")
    for column in ("workload", "nodes", "way", "backward", "× plain", "+µs per node"):
        table.add_column(column, justify="left" if column in ("workload", "way") else "right")
    ways: dict[str, Callable[[], Any]] = {
        "nan --every, a call left out": lambda: watch_nan(steps=[10**12], keep_trace=False),
        "record(observe='calls', last=1)": lambda: autograd_viz.record(observe="calls", last=1),
    }
    for make in (mlp, gru):
        label, build = make()
        (model,) = [
            cell.cell_contents
            for cell in build.__closure__ or ()
            if isinstance(cell.cell_contents, torch.nn.Module)
        ]

        def backward(loss: torch.Tensor, model: torch.nn.Module = model) -> None:
            if model.training:  # the model, in this frame as in a training loop's
                loss.backward()

        nodes = len(nodes_of(build()))
        samples: dict[str, list[float]] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(2):
                backward(build())
            for _ in range(repeat):
                _timed(samples, "plain", backward, build())
                for way, context in ways.items():
                    with context():
                        backward(build())  # untimed: the parameters found once
                        _timed(samples, way, backward, build())
        _add_rows(table, label, nodes, samples)
        table.add_section()
    Console(width=120).print(table)
    print(f"torch {torch.__version__}, one intra-op thread; the fastest of {repeat} each")


def _one_node() -> Step:
    """A backward call with one node: what the call gate costs, alone."""
    x = torch.ones(1, requires_grad=True)

    def step() -> None:
        (x * 2.0).sum().backward()

    return step


LOOP = """
    import sys

    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.Tanh(), torch.nn.Linear(256, 256), torch.nn.Tanh(),
        torch.nn.Linear(256, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, 256)
    y = torch.randint(0, 10, (64,))
    for _ in range(int(sys.argv[1])):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
"""


def memory(steps: int) -> None:
    table = Table(title=f"Recording a {steps:,}-step loop (256-wide MLP): each in its own process")
    for column in ("way", "max RSS", "over plain", "trace file", "wall"):
        table.add_column(column, justify="left" if column == "way" else "right")
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "loop.py"
        script.write_text(textwrap.dedent(LOOP), encoding="utf-8")
        trace = Path(tmp) / "t.jsonl"
        record = [sys.executable, "-m", "autograd_viz", "record", "-o", str(trace)]
        ways = {
            "plain python": [sys.executable],
            "record (streamed)": record,
            "record --every 10": [*record, "--every", "10"],
            "record --last 10": [*record, "--last", "10"],
        }
        plain_rss = 0
        for way, command in ways.items():
            rss, wall = _run([*command, str(script), str(steps)])
            plain_rss = plain_rss or rss
            size = trace.stat().st_size if trace.exists() and way != "plain python" else 0
            table.add_row(
                way,
                f"{rss / 2**20:.0f} MB",
                "" if way == "plain python" else f"+{(rss - plain_rss) / 2**20:.0f} MB",
                f"{size / 1e6:.1f} MB" if size else "",
                f"{wall:.1f} s",
            )
            if trace.exists():
                trace.unlink()
    Console(width=120).print(table)


def open_calls(path: str, whole: bool) -> None:
    """Time opening calls of a long trace by number, as ``--call K`` does, in this process."""
    from autograd_viz.trace import Trace
    from autograd_viz.trace.index import calls_in, load_call

    size = os.path.getsize(path)
    table = Table(title=f"Opening one call of {path} ({size / 1e6:.0f} MB)")
    for column in ("what", "time", "max RSS after"):
        table.add_column(column, justify="left" if column == "what" else "right")
    started = time.perf_counter()
    spans = calls_in(path)
    table.add_row(
        f"find the {len(spans):,} calls", f"{time.perf_counter() - started:.3f} s", _rss()
    )
    for where, span in (
        ("first", spans[0]),
        ("middle", spans[len(spans) // 2]),
        ("last", spans[-1]),
    ):
        number = span.call if span.call is not None else spans.index(span)
        started = time.perf_counter()
        trace = load_call(path, number)
        elapsed = time.perf_counter() - started
        table.add_row(
            f"load_call: the {where} (call {number}, {len(trace.events):,} events)",
            f"{elapsed:.3f} s",
            _rss(),
        )
    if whole:
        started = time.perf_counter()
        trace = Trace.load(path)
        table.add_row(
            f"Trace.load, the whole file ({len(trace.events):,} events)",
            f"{time.perf_counter() - started:.1f} s",
            _rss(),
        )
    Console(width=120).print(table)


def light_tier(repeat: int) -> None:
    """The tiers of ``record(values=...)`` beside what a watcher without summaries could cost.

    On the MLP and the GRU of ``benchmarks.torch_bridge``, each backward timed
    alone (thread CPU time, the collector off, the ways interleaved, the
    fastest of ``repeat``): plain; inside one ``record(values=..., last=1)``
    block per tier (a flight recorder left on: set up once, each call
    recorded, the last kept); the call level (``observe="calls"``) as a flight
    recorder, which holds each call and derives it only when the ring is
    written (its writing timed apart, per node of the call it derives), and
    deriving every call as it ends; a no-op pre and post hook on every node (what
    any hook-based watcher pays before it does anything); ``detect_anomaly``;
    and ``torch.profiler`` limited to the autograd nodes' records
    (``RecordScope.BACKWARD_FUNCTION``: one ``evaluate_function`` record per
    node, with its sequence number, thread and times), left running over the
    calls, then the price per node of taking its records out (Kineto
    processes every record when the profiler stops, whether or not it is
    read; a profiler that is never stopped holds every record of the run).
    """
    from torch._C._autograd import _disable_profiler, _enable_profiler, _prepare_profiler
    from torch._C._profiler import (
        ProfilerActivity,
        ProfilerConfig,
        ProfilerState,
        RecordScope,
        _ExperimentalConfig,
    )

    from benchmarks.torch_bridge import bare_hooks, gru, mlp, nodes_of, plain

    def anomaly(loss: torch.Tensor) -> None:
        with torch.autograd.detect_anomaly():
            loss.backward()

    table = Table(title="A backward call by values tier, and the floors (fastest, CPU time)")
    for column in ("workload", "nodes", "way", "backward", "× plain", "+µs per node"):
        table.add_column(column, justify="left" if column in ("workload", "way") else "right")
    activities = {ProfilerActivity.CPU}
    config = ProfilerConfig(
        ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig(), ""
    )
    for make in (mlp, gru):
        label, build = make()
        nodes = len(nodes_of(build()))
        samples: dict[str, list[float]] = {}
        written: list[float] = []
        plain_ways = {"plain": plain, "bare hooks": bare_hooks, "detect_anomaly": anomaly}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # anomaly mode's warning; the bridge's module note
            for _ in range(2):
                for run in plain_ways.values():
                    run(build())
            for _ in range(repeat):
                for way, run in plain_ways.items():
                    _timed(samples, way, run, build())
                for values in ("all", "leaves", "none"):
                    with autograd_viz.record(values=values, last=1):
                        _timed(samples, f"record(values={values!r})", plain, build())
                # The call level: no node watched; a flight recorder holds the call and
                # walks its graph when it is written (Note [Calls derived later]): timed apart.
                ring = autograd_viz.record(observe="calls", last=1)
                ring.__enter__()
                try:
                    _timed(samples, "record(observe='calls', last=1)", plain, build())
                finally:
                    gc.collect()
                    gc.disable()  # as _timed: the derivation's own time
                    started = time.thread_time()
                    ring.__exit__(None, None, None)
                    written.append(time.thread_time() - started)
                    gc.enable()
                # Without last, each call is walked and derived when it ends.
                with autograd_viz.record(observe="calls"):
                    _timed(samples, "record(observe='calls')", plain, build())
            _prepare_profiler(config, activities)
            scopes = {RecordScope.BACKWARD_FUNCTION}
            _enable_profiler(config, activities, scopes)  # type: ignore[call-arg]
            try:
                for _ in range(repeat):
                    _timed(samples, "torch.profiler, nodes only, running", plain, build())
            finally:
                started = time.perf_counter()
                records = _disable_profiler().events()
                stop = time.perf_counter() - started
                started = time.perf_counter()
                kept = [
                    (e.sequence_nr(), e.start_thread_id(), e.start_ns(), e.duration_ns())
                    for e in records
                ]
                read = time.perf_counter() - started
        writing = f"{min(written) / nodes * 1e6:.1f}" if written else ""
        held = ("  + writing the ring: the held call derived", writing)
        under = {way: held for way in samples if way.endswith("last=1)")}
        _add_rows(table, label, nodes, samples, under=under)
        calls = len(samples["torch.profiler, nodes only, running"])
        per_node = calls * nodes
        table.add_row(
            label, f"{nodes}", "  + stopping it (Kineto's processing)", "", "",
            f"{stop / per_node * 1e6:.1f}",
        )  # fmt: skip
        table.add_row(
            label, f"{nodes}", f"  + reading its {len(kept):,} records", "", "",
            f"{read / per_node * 1e6:.1f}",
        )  # fmt: skip
        table.add_section()
    _engine_tiers(table, repeat)
    Console(width=120).print(table)
    print(f"torch {torch.__version__}, one intra-op thread; the fastest of {repeat} each")


def call_level_parts(repeat: int) -> None:
    """Where a call-level call's time goes on the GRU: the call held, and its derivation's parts.

    Each part timed alone in thread CPU time, the collector off, the fastest
    of ``repeat``: the backward call inside a call-level flight recorder (what
    every call of a run pays), a whole step (the forward, where module calls
    are followed, and the backward), the calling code's names read at its start,
    the graph walk (``plan_graph_task``), and deriving a held call into a
    recorder (the walk, the replayed scheduler, the snapshot and the records:
    what writing the ring pays for each call it holds).
    """
    import sys

    from autograd_viz.sources.pytorch.graph import plan_graph_task
    from autograd_viz.sources.pytorch.leaf_names import LeafNamer
    from autograd_viz.trace.calls import CallSelection
    from autograd_viz.trace.recorder import HeldCalls
    from autograd_viz.trace.recording import Recording
    from benchmarks.torch_bridge import gru, nodes_of, plain

    label, build = gru()
    nodes = len(nodes_of(build()))
    samples: dict[str, list[float]] = {}
    frame = sys._getframe()

    def walk(roots: list[tuple[Any, int]]) -> None:
        plan_graph_task(roots, [], True, LeafNamer(frame))

    def names(at: Any) -> None:
        LeafNamer(at).module_variables()

    for _ in range(2):
        plain(build())

    def step(_: None) -> None:
        build().backward()

    for _ in range(repeat):
        _timed(samples, "plain", plain, build())
        _timed(samples, "a whole step, plain (forward and backward)", step, None)
        recording = Recording(calls=CallSelection(last=1), values="none", watch="calls")
        with recording.running():
            _timed(samples, "the call, held", plain, build())
            # The forward too: module calls are followed (global module hooks).
            _timed(samples, "a whole step, held", step, None)
            assert recording.ring is not None
            part = recording.ring._parts[-1][0]
            assert isinstance(part, HeldCalls)
            _timed(samples, "deriving the held call", lambda held: held.trace(), part)
        _timed(samples, "the calling code's names", names, frame)
        loss = build()
        loss.backward()  # the graph after its call, as the ring walks it
        _timed(samples, "the graph walk (plan_graph_task)", walk, [(loss.grad_fn, 0)])
    table = Table(title=f"The call level on the {label} ({nodes} nodes): its parts")
    for column in ("part", "fastest", "µs per node"):
        table.add_column(column, justify="left" if column == "part" else "right")
    bases = {
        "the call, held": min(samples["plain"]),
        "a whole step, held": min(samples["a whole step, plain (forward and backward)"]),
    }
    for way, times in samples.items():
        best = min(times)
        if "plain" in way:
            per_node = ""
        elif way in bases:
            over = best - bases[way]
            per_node = f"{over / nodes * 1e6:.2f} over plain ({best / bases[way]:.2f}×)"
        else:
            per_node = f"{best / nodes * 1e6:.2f}"
        table.add_row(way, f"{best * 1e3:.3f} ms", per_node)
    Console(width=120).print(table)
    print(f"torch {torch.__version__}, one intra-op thread; the fastest of {repeat} each")


def _engine_tiers(table: Table, repeat: int) -> None:
    """The tiers on our engine: a tanh chain of three 32-wide layers, 20 times (124 nodes)."""
    import numpy as np

    import engine

    rng = np.random.default_rng(0)
    weights = [
        engine.tensor(rng.standard_normal((32, 32)) * 0.1, requires_grad=True) for _ in range(3)
    ]
    x = engine.tensor(rng.standard_normal((8, 32)))

    def build() -> Any:
        h = x
        for _ in range(20):
            for w in weights:
                h = (h @ w).tanh()
        return h.sum()

    def backward(loss: Any) -> None:
        loss.backward()

    label = "our engine: tanh 32×3 ×20, batch 8"
    samples: dict[str, list[float]] = {}
    for _ in range(repeat):
        _timed(samples, "plain", backward, build())
        for values in ("all", "leaves", "none"):
            with autograd_viz.record(values=values, last=1) as trace:
                _timed(samples, f"record(values={values!r})", backward, build())
    nodes = sum(1 for e in trace.events if e.kind == "node_start")
    _add_rows(table, label, nodes, samples)


def _add_rows(
    table: Any,
    label: str,
    nodes: int,
    samples: dict[str, list[float]],
    under: dict[str, tuple[str, str]] | None = None,
) -> None:
    """One row a way: its fastest time, that over plain's, and the µs a node it adds;
    ``under[way]`` (a text and its µs a node) is a row added below it."""
    base = min(samples["plain"])
    for way, times in samples.items():
        best = min(times)
        table.add_row(
            label,
            f"{nodes}",
            way,
            f"{best * 1e3:.2f} ms",
            f"{best / base:.2f}×",
            "" if way == "plain" else f"{(best - base) / nodes * 1e6:.1f}",
        )
        if under and way in under:
            table.add_row(label, f"{nodes}", under[way][0], "", "", under[way][1])


def _timed(
    samples: dict[str, list[float]],
    way: str,
    run: Callable[[Any], None],
    loss: Any,
) -> None:
    """Time ``run(loss)`` in this thread's CPU time, the collector off, into ``samples[way]``."""
    gc.collect()
    gc.disable()
    try:
        started = time.thread_time()
        run(loss)
        samples.setdefault(way, []).append(time.thread_time() - started)
    finally:
        gc.enable()


def _rss() -> str:
    return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB"


def _run(command: list[str]) -> tuple[int, float]:
    """Run ``command`` alone; its maximum RSS in bytes and its wall time."""
    code = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.perf_counter() - t)"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code, *command], env=env, check=True, capture_output=True, text=True
    ).stdout.split()
    return int(out[0]) * 1024, float(out[1])  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="steps per block (small loop)")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--memory", type=int, default=0, metavar="N")
    parser.add_argument("--open", default=None, metavar="TRACE", help="time --call on TRACE")
    parser.add_argument(
        "--whole", action="store_true", help="with --open: also load the whole file once"
    )
    parser.add_argument(
        "--light", action="store_true", help="time the values tiers against hooks and the profiler"
    )
    parser.add_argument(
        "--parts", action="store_true", help="time the parts of a call-level call on the GRU"
    )
    parser.add_argument(
        "--nan", action="store_true", help="time nan --every's check of the calls it leaves out"
    )
    parser.add_argument(
        "--nan-every",
        action="store_true",
        help="time the backward of a call nan --every leaves out, per node",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.nan_every:
        nan_left_out(args.repeat)
        return
    if args.nan:
        nan_not_recorded(args.steps, args.repeat)
        return
    if args.parts:
        call_level_parts(args.repeat)
        return
    if args.light:
        light_tier(args.repeat)
        return
    if args.open:
        open_calls(args.open, args.whole)
        return
    if args.memory:
        memory(args.memory)
        return
    not_recorded(args.steps, args.repeat)
    print(f"torch {torch.__version__}, one intra-op thread; max RSS {_self_rss()} MB")


def _self_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


if __name__ == "__main__":
    main()
