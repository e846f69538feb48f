"""``benchmarks.torch_floor``: the floor watcher records what ``record()`` records."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import autograd_viz  # noqa: E402
from benchmarks.torch_bridge import gru, mlp, nodes_of  # noqa: E402
from benchmarks.torch_floor import floor  # noqa: E402


def _grads(build: Any) -> tuple[Any, list[Any]]:
    """A fresh loss and the leaves its backward accumulates into."""
    loss = build()
    return loss, [fn.variable for fn in nodes_of(loss) if hasattr(fn, "variable")]


@pytest.mark.parametrize("make", [gru, mlp])
def test_floor_records_the_same_steps_and_numbers_as_record(make: Any) -> None:
    _, build = make()
    loss, params = _grads(build)
    floor_events = floor(loss)
    floor_grads = [p.grad.clone() for p in params]

    loss, params = _grads(build)
    with autograd_viz.record() as trace:
        loss.backward()
    recorded_grads = [p.grad.clone() for p in params]

    # Watching by the floor changes nothing either: the same gradients, bit for bit.
    assert all(torch.equal(a, b) for a, b in zip(floor_grads, recorded_grads, strict=True))
    assert Counter(e[0] for e in floor_events) == Counter(e.kind for e in trace.events)
    ours = [e for e in trace.events if e.kind == "node_end"]
    theirs = [e for e in floor_events if e[0] == "node_end"]
    assert len(ours) == len(theirs) > 0
    for mine, floors in zip(ours, theirs, strict=True):
        outputs = mine.data["outputs"]
        assert len(outputs) == len(floors[4])
        for summary, numbers in zip(outputs, floors[4], strict=True):
            if summary is None:
                assert numbers is None
                continue
            shape, _, low, high, mean, norm = numbers
            assert summary.shape == shape
            assert (summary.min, summary.max) == (low, high)
            assert math.isclose(summary.mean, mean, rel_tol=1e-6, abs_tol=1e-9)
            assert math.isclose(summary.norm, norm, rel_tol=1e-5)
