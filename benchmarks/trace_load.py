"""Loading a trace with the compiled readers and with the schema's readers called field by field.

Note [One reader] in ``autograd_viz/trace/schema.py`` compiles the readers of
the file's common records into straight-line functions; this measures what
that earns. The
workload records the backward of ``steps`` steps of ``y = tanh(y * w)`` and
``y = y + w`` over 3-element float64 tensors (summaries with values, as
``record()`` keeps them by default), saves it, and loads it back alternately
with the compiled readers and without them (every record read by
:mod:`autograd_viz.trace.schema`'s readers, a call per field), checking
that both give the same trace. Alternating matters: this machine's speed drifts over minutes.

Usage:
    python -m benchmarks.trace_load [--steps 5000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import engine
from autograd_viz import Trace, record
from autograd_viz.trace import file
from autograd_viz.trace import schema as s


def record_workload(steps: int) -> Trace:
    """Record the backward of the workload above."""
    x = engine.tensor([1.0, 2.0, 3.0], dtype=engine.float64, requires_grad=True)
    weights = [
        engine.tensor([0.5, 1.0, 1.5], dtype=engine.float64, requires_grad=True) for _ in range(50)
    ]
    y = x
    for i in range(steps):
        w = weights[i % len(weights)]
        y = (y * w).tanh() if i % 3 else y + w
    with record() as trace:
        y.sum().backward()
    return trace


@contextmanager
def field_by_field() -> Iterator[None]:
    """Every record read by the schema's readers themselves, none compiled."""
    saved = (file._RECORDS, file._EVENT_DATA)
    file._RECORDS = {"node": s.NODE.read, "event": s.EVENT.read}  # type: ignore[assignment]
    data = {kind: reader.read for kind, reader in s.EVENT_DATA_READERS.items()}
    file._EVENT_DATA = data  # type: ignore[assignment]
    try:
        yield
    finally:
        file._RECORDS, file._EVENT_DATA = saved


def _load(path: str) -> tuple[float, Trace]:
    start = time.perf_counter()
    trace = Trace.load(path)
    return time.perf_counter() - start, trace


def _same(a: Trace, b: Trace) -> bool:
    return [tuple(e) for e in a.events] == [tuple(e) for e in b.events] and (
        a.graph_tasks == b.graph_tasks
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure, print one line per reader, and return the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5, help="alternations of the two ways")
    args = parser.parse_args(argv)
    trace = record_workload(args.steps)
    path = os.path.join(tempfile.mkdtemp(), "trace.jsonl")
    trace.save(path)
    times: dict[str, list[float]] = {"compiled": [], "field by field": []}
    for _ in range(args.repeat):
        took, quick = _load(path)
        times["compiled"].append(took)
        with field_by_field():
            took, slow = _load(path)
        times["field by field"].append(took)
        if not _same(quick, slow):
            raise SystemExit("the two readers read different traces")
    events, size = len(trace.events), os.path.getsize(path)
    print(f"{events} events, {size / 1e6:.1f} MB; best of {args.repeat}, alternating:")
    best = {name: min(values) for name, values in times.items()}
    for name, value in best.items():
        print(f"  {name:15s} {value:6.2f} s  {value / events * 1e6:5.1f} µs/event")
    ratio = best["field by field"] / best["compiled"]
    print(f"  field by field / compiled: {ratio:.2f}×")
    return {"events": events, "bytes": size, **best}


if __name__ == "__main__":
    main()
