"""``benchmarks.torch_floor``: the floor watchers record what ``record()`` records."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import autograd_viz  # noqa: E402
from autograd_viz.trace.summary import TensorSummary  # noqa: E402
from benchmarks import torch_bridge  # noqa: E402
from benchmarks.torch_bridge import gru, mlp, nodes_of  # noqa: E402
from benchmarks.torch_floor import FloorWatcher, RecordsFloorWatcher, read_once  # noqa: E402


def _grads(build: Any) -> tuple[Any, list[Any]]:
    """A fresh loss and the leaves its backward accumulates into."""
    loss = build()
    return loss, [fn.variable for fn in nodes_of(loss) if hasattr(fn, "variable")]


def _numbers(summary: Any) -> tuple[Any, ...]:
    """A floor summary as ``(shape, min, max, mean, norm)``: a list, or a record."""
    if isinstance(summary, list):
        shape, _, low, high, mean, norm = summary
        return shape, low, high, mean, norm
    assert type(summary) is TensorSummary
    return summary.shape, summary.min, summary.max, summary.mean, summary.norm


@pytest.mark.parametrize("make", [gru, mlp])
@pytest.mark.parametrize("watcher", [FloorWatcher, RecordsFloorWatcher])
def test_floor_records_the_same_steps_and_numbers_as_record(make: Any, watcher: Any) -> None:
    _, build = make()
    loss, params = _grads(build)
    floor = watcher()
    floor.run(loss)
    floor_grads = [p.grad.clone() for p in params]

    loss, params = _grads(build)
    with autograd_viz.record() as trace:
        loss.backward()
    recorded_grads = [p.grad.clone() for p in params]

    # Watching by the floor changes nothing either: the same gradients, bit for bit.
    assert all(torch.equal(a, b) for a, b in zip(floor_grads, recorded_grads, strict=True))
    assert floor.mismatches == 0  # its checks (if any) agree with PyTorch
    kinds = [e[0] if isinstance(e, tuple) and len(e) == 5 else e.kind for e in floor.events]
    assert Counter(kinds) == Counter(e.kind for e in trace.events)
    ours = [e.data["outputs"] for e in trace.events if e.kind == "node_end"]
    if watcher is FloorWatcher:
        theirs = [e[4] for e in floor.events if e[0] == "node_end"]
    else:
        theirs = [e.data["outputs"] for e in floor.events if e.kind == "node_end"]
    assert len(ours) == len(theirs) > 0
    for mine, floors in zip(ours, theirs, strict=True):
        assert len(mine) == len(floors)
        for summary, other in zip(mine, floors, strict=True):
            if summary is None:
                assert other is None
                continue
            shape, low, high, mean, norm = _numbers(other)
            assert summary.shape == shape
            assert (summary.min, summary.max) == (low, high)
            assert math.isclose(summary.mean, mean, rel_tol=1e-6, abs_tol=1e-9)
            # A float32 norm of a million elements is within about 1.3e-5 of the float64 one;
            # ours, gathered from cache-sized pieces in float64, within 2e-6 (Note [Summaries
            # of large tensors]): the floor's whole-tensor float32 norm sets the tolerance.
            assert math.isclose(summary.norm, norm, rel_tol=3e-5)


def test_split_stubs_every_summary_and_puts_everything_back() -> None:
    _, build = gru()
    with torch_bridge._summaries_stubbed():
        loss = build()
        with autograd_viz.record() as stubbed:
            loss.backward()
        floor = FloorWatcher()
        floor.run(build())
    outputs = [s for e in stubbed.events if e.kind == "node_end" for s in e.data["outputs"]]
    assert outputs and all(s is torch_bridge._NO_NUMBERS for s in outputs if s is not None)
    floor_outputs = [s for e in floor.events if e[0] == "node_end" for s in e[4]]
    assert floor_outputs and all(
        s is torch_bridge._NO_NUMBERS for s in floor_outputs if s is not None
    )

    loss = build()
    with autograd_viz.record() as real:
        loss.backward()
    outputs = [s for e in real.events if e.kind == "node_end" for s in e.data["outputs"]]
    assert not any(s is torch_bridge._NO_NUMBERS for s in outputs)
    assert all(s is None or s.norm is not None for s in outputs)


def test_the_promotions_counted_are_the_objects_alive_at_a_middle_collection() -> None:
    import gc

    gc.collect()
    with torch_bridge._Promotions() as alive:
        kept = [[] for _ in range(5000)]  # lists: tracked until they die
        gc.collect(1)
    with torch_bridge._Promotions() as gone:
        dropped = [[] for _ in range(5000)]
        del dropped
        gc.collect(1)
    assert len(kept) == 5000
    assert alive.moved >= 5000
    assert gone.moved < 1000


def test_reading_every_value_once_reads_what_record_summarizes() -> None:
    # The MLP's floor of exact summaries: every memory record() summarizes, read once each,
    # and the gradients as without it.
    _, build = mlp()
    loss, params = _grads(build)
    reads = read_once(loss)
    floor_grads = [p.grad.clone() for p in params]
    loss, params = _grads(build)
    with autograd_viz.record() as trace:
        loss.backward()
    assert all(torch.equal(p.grad, g) for p, g in zip(params, floor_grads, strict=True))
    summaries = [s for e in trace.events for s in _tensors(e.data) if s.numel]
    (task,) = trace.graph_tasks.values()
    saved = [s for n in task.nodes.values() for s in n.saved if s is not None]
    # Each memory once: record() summarizes some twice over (a transposed view, a total);
    # the floor reads no fewer memories than the distinct shapes record() summarized.
    assert 0 < len({(s.shape, s.dtype) for s in summaries + saved}) <= reads
    assert reads <= len(summaries) + len(saved)


def _tensors(data: Any) -> list[TensorSummary]:
    found: list[TensorSummary] = []
    for value in data.values():
        values = value if isinstance(value, list | tuple) else (value,)
        found += [v for v in values if isinstance(v, TensorSummary)]
    return found
