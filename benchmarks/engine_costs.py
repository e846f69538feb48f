"""What our engine's own features cost: EV and ER (events) and TH (threads).

EV times ``y.backward()`` through the W1 chain with no listener, with a
listener that does nothing, and with ``autograd_viz``'s :class:`Recorder`
recording, then measures a saved trace (bytes per event, load, seek) by
running :func:`benchmarks.trace_seek.measure` on a 100k-node chain.

ER times the backward of W3's MLP (big tensors, few nodes) the same three
ways: there the recorder's cost is in summarizing gradients, not per event.

"emit sites compiled out" is the same engine imported, in a child process,
with every ``HUB.active`` guard and what it guards removed
(:mod:`benchmarks.no_events`); "no listener" is the engine as it is, in the
same kind of child process: its ratio over the first is what instrumentation
costs when nobody listens.

TH runs a chain whose every step crosses to a simulated device and back,
``y = (y.to("sim:0") * 1.0001).to("cpu") + 0.0``, against the same four nodes
a step on the CPU alone (``clone`` in place of ``to``) and on ``sim:0`` alone.
Each step hands the gradient from the caller's thread to the ``sim:0``
worker and back: two hand-offs.

Usage: ``python -m benchmarks.run --workload EV,ER,TH``.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from rich.console import Console

import engine
from autograd_viz import record
from benchmarks import no_events, trace_seek, workloads
from benchmarks.harness import Case, Cell, Timings, Workload, check_close, now
from benchmarks.peers import ours
from benchmarks.peers.common import STEP

TRACE_STEPS = 50_000
"""Chain steps of the trace EV saves, loads and seeks in: 100k nodes."""


def _leaf() -> Any:
    return engine.tensor([1.0], dtype=engine.float64, requires_grad=True)


def _chain_cases(default: int, nodes_per_step: int) -> Callable[[list[int] | None], list[Case]]:
    return lambda sizes: [
        Case(f"n={n:,}", {"n": n}, nodes_per_step * n) for n in sizes or [default]
    ]


def _timed_backward(n: int, backward: Callable[[Any], None]) -> Timings:
    x = _leaf()
    y = x
    for _ in range(n):
        y = y * STEP + 0.0
    start = now()
    backward(y)
    done = now()
    check_close(f"events chain n={n}", float(x.grad.numpy()[0]), STEP**n, 1e-9)
    return {"backward": done - start}


def _no_op(event: engine.events.Event) -> None:
    pass


def _with_no_op(y: Any) -> None:
    with engine.events.listen(_no_op):
        y.backward()


def _recording(y: Any) -> None:
    with record():
        y.backward()


def _in_child(strip: bool) -> Callable[[Case], Timings]:
    def run(case: Case) -> Timings:
        timings = no_events.chain_backward(case.params["n"], gc.isenabled(), strip=strip)
        return {"backward": timings["backward"]}

    return run


def events(sizes: list[int] | None) -> Workload:
    """EV: backward with no listener, a no-op listener, and a recorder."""
    variants = {
        "no-op listener": _with_no_op,
        "recorder": _recording,
    }
    return Workload(
        key="EV",
        title="EV events: W1 chain backward by listener, µs per node",
        unit="µs/node",
        scale=1e6,
        cases=_chain_cases(10_000, 2),
        contenders={
            "emit sites compiled out": _in_child(strip=True),
            "no listener": _in_child(strip=False),
            **{
                name: lambda case, b=backward: _timed_backward(case.params["n"], b)
                for name, backward in variants.items()
            },
        },
        shown=("backward",),
        references=("emit sites compiled out", "no listener"),
        notes=(
            "emit sites compiled out: the engine imported with every HUB.active guard and what "
            "it guards removed (benchmarks/no_events.py); no listener: the engine as it is. Both "
            "in fresh child processes, same protocol (best of three warm runs).",
        ),
    )


def trace_figures(console: Console, steps: int = TRACE_STEPS) -> dict[str, float]:
    """Record, save, load and seek a trace of a ``2 * steps``-node chain."""
    return trace_seek.measure(steps, seeks=300, console=console)


# -- ER ------------------------------------------------------------------------------


def _mlp_backward(batch: int, dtype: str, backward: Callable[[Any], None]) -> Timings:
    """W3's MLP step with our engine (``ours.mlp``); only the backward is timed."""
    timings, norm = ours.mlp(workloads.mlp_data(batch, dtype), backward)
    expected = workloads.mlp_expected(batch, dtype)
    check_close(f"recorded mlp {dtype}", norm, expected, workloads.CHECK_RTOL[dtype])
    return {"backward": timings["backward"]}


def _plain_backward(y: Any) -> None:
    y.backward()


def recorded_mlp(sizes: list[int] | None) -> Workload:
    """ER: W3's MLP backward with no listener, a no-op listener, and a recorder."""
    variants = {
        "no listener": _plain_backward,
        "no-op listener": _with_no_op,
        "recorder": _recording,
    }
    return Workload(
        key="ER",
        title="ER events on big tensors: W3 MLP backward by listener, ms per backward",
        unit="ms",
        scale=1e3,
        cases=lambda sizes: [
            Case(f"batch {batch} {dtype}", {"batch": batch, "dtype": dtype}, 1)
            for batch in sizes or [256]
            for dtype in workloads.MLP_DTYPES
        ],
        contenders={
            name: lambda case, b=backward: _mlp_backward(
                case.params["batch"], case.params["dtype"], b
            )
            for name, backward in variants.items()
        },
        shown=("backward",),
        references=("no listener",),
        notes=(
            "The recorder summarizes every gradient it sees (min, max, mean, norm, NaN and "
            "Inf counts), several times per gradient: as an output, in a buffer, as an input.",
        ),
    )


# -- TH ------------------------------------------------------------------------------


def _hop(y: Any) -> Any:
    return (y.to("sim:0") * STEP).to("cpu") + 0.0


def _stay(y: Any) -> Any:
    return (y.clone() * STEP).clone() + 0.0


def _device_chain(n: int, start_on: str, step: Callable[[Any], Any]) -> Timings:
    x = _leaf()
    start = now()
    y = x.to(start_on)
    for _ in range(n):
        y = step(y)
    built = now()
    y.backward()
    done = now()
    check_close(f"device chain n={n}", float(x.grad.numpy()[0]), STEP**n, 1e-9)
    return {"forward": built - start, "backward": done - built}


def _hand_off_cost(cells: list[Cell]) -> list[str]:
    """Extra backward µs per hand-off: (alternating − CPU only) per node × 4 nodes / 2 hops."""
    lines = []
    by_key = {(c.case.label, c.collect, c.contender): c for c in cells}
    for cell in cells:
        if cell.contender != "cpu⇄sim:0":
            continue
        cpu = by_key.get((cell.case.label, cell.collect, "cpu"))
        if cpu is None or not cpu.samples:
            continue
        extra = (cell.median("backward", 1e6) - cpu.median("backward", 1e6)) * 2
        gc = "on" if cell.collect else "off"
        lines.append(f"{cell.case.label} gc {gc}: a hand-off adds {extra:.1f} µs to backward")
    return lines


def threads(sizes: list[int] | None) -> Workload:
    """TH: a chain hopping between the CPU and ``sim:0`` against one that stays put."""
    variants = {"cpu": ("cpu", _stay), "sim:0": ("sim:0", _stay), "cpu⇄sim:0": ("cpu", _hop)}
    return Workload(
        key="TH",
        title="TH threads: 4 nodes a step, CPU only, sim:0 only, or crossing, µs per node",
        unit="µs/node",
        scale=1e6,
        cases=_chain_cases(10_000, 4),
        contenders={
            name: lambda case, where=where, step=step: _device_chain(case.params["n"], where, step)
            for name, (where, step) in variants.items()
        },
        shown=("forward", "backward"),
        references=("cpu",),
        notes=(
            "cpu, sim:0: y = (y.clone() * 1.0001).clone() + 0.0 on that device.",
            "cpu⇄sim:0: y = (y.to('sim:0') * 1.0001).to('cpu') + 0.0, two hand-offs a step.",
        ),
        summarize=_hand_off_cost,
    )


BUILDERS: dict[str, Callable[[list[int] | None], Workload]] = {
    "EV": events,
    "ER": recorded_mlp,
    "TH": threads,
}
"""Engine workloads by ``--workload`` key."""
