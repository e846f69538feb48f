"""Instrumentation: every step emits an event, listeners are isolated, tensors are weak."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import engine
from engine import events
from engine.events import EVENT_KINDS, HUB, LazySummary


def _diamond() -> tuple[engine.Tensor, engine.Tensor]:
    x = engine.tensor([1.0, -2.0], requires_grad=True, name="x")
    a = x * 3.0
    b = x * x
    return x, (a + b).sum()


def test_events_are_ordered_and_carry_node_identity(recorded: list[events.Event]) -> None:
    _x, loss = _diamond()
    loss.backward()
    seqs = [e.seq for e in recorded]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert recorded[0].kind == "graph_task_start" and recorded[-1].kind == "graph_task_end"
    assert {e.graph_task for e in recorded} == {recorded[0].graph_task}
    for e in recorded:
        assert e.kind in EVENT_KINDS
        if e.kind in ("node_start", "node_end", "enqueue", "dependency_decrement"):
            assert e.node_id is not None and e.node_name and e.sequence_nr is not None
            assert e.topological_nr is not None


def test_dependencies_reach_zero_before_a_node_runs(recorded: list[events.Event]) -> None:
    _x, loss = _diamond()
    loss.backward()
    start = recorded[0]
    remaining = dict(start.data["dependencies"])
    for e in recorded:
        if e.kind == "dependency_decrement":
            remaining[e.node_id] -= 1
            assert e.data["remaining"] == remaining[e.node_id]
        if e.kind == "node_start" and e.node_id in remaining:
            assert remaining[e.node_id] == 0, f"{e.node_name} started with dependencies left"
    assert all(v == 0 for v in remaining.values())


def test_accumulate_events_report_created_then_added(recorded: list[events.Event]) -> None:
    x, loss = _diamond()
    loss.backward()
    acc = x.gradient_edge().function
    buffer_events = [
        e
        for e in recorded
        if e.kind == "accumulate" and e.data["target"] == "buffer" and e.node_id == acc.node_id
    ]
    assert [e.data["action"] for e in buffer_events] == ["created", "added", "added"]  # x*3, x*x
    total = buffer_events[-1].data["total"].summary
    np.testing.assert_allclose(total.mean, np.mean(3.0 + 2 * x.data), rtol=1e-6)
    leaf = [e for e in recorded if e.kind == "accumulate" and e.data["target"] == "leaf"]
    assert (
        len(leaf) == 1 and leaf[0].data["action"] == "created" and leaf[0].data["leaf_name"] == "x"
    )


def test_node_end_summaries_describe_outputs(recorded: list[events.Event]) -> None:
    x = engine.tensor([0.0, 4.0], requires_grad=True)
    x.sqrt().sum().backward()
    sqrt_end = next(e for e in recorded if e.kind == "node_end" and e.node_name == "SqrtBackward0")
    summary = sqrt_end.data["outputs"][0].summary
    assert summary.shape == (2,) and summary.inf_count == 1 and summary.nan_count == 0
    assert summary.max == float("inf") and not summary.finite


def test_hook_and_enqueue_events(recorded: list[events.Event]) -> None:
    x = engine.tensor([1.0], requires_grad=True)
    x.register_hook(lambda g: g * 2.0)
    (x * 3.0).sum().backward()
    hooks = [e for e in recorded if e.kind == "hook"]
    assert len(hooks) == 1 and hooks[0].data["hook"] == "tensor_pre" and hooks[0].data["replaced"]
    enqueues = [e for e in recorded if e.kind == "enqueue"]
    assert enqueues[0].data["reason"] == "root"
    assert all(e.data["queue"] == "cpu" for e in enqueues)


def test_with_no_listener_nothing_is_built() -> None:
    assert not HUB.active
    built: list[object] = []
    original = events.Event.__init__

    def spy(self: events.Event, *args: object, **kwargs: object) -> None:
        built.append(args)
        original(self, *args, **kwargs)

    events.Event.__init__ = spy  # type: ignore[method-assign]
    try:
        _x, loss = _diamond()
        loss.backward()
    finally:
        events.Event.__init__ = original  # type: ignore[method-assign]
    assert built == []


def test_several_listeners_each_get_every_event() -> None:
    a: list[events.Event] = []
    b: list[events.Event] = []
    with events.listen(a.append), events.listen(b.append):
        _x, loss = _diamond()
        loss.backward()
    assert a == b and len(a) > 10
    assert not HUB.active


def test_lazy_summary_does_not_keep_the_array_alive() -> None:
    array = np.array([1.0, np.nan, np.inf, -2.0], dtype=np.float32)
    lazy = LazySummary(array, "sim:0")
    assert (lazy.shape, lazy.dtype, lazy.device) == ((4,), "float32", "sim:0")
    assert lazy.array() is array and lazy.summary is None  # the engine takes no statistics
    ref = weakref.ref(array)
    del array
    gc.collect()
    assert ref() is None and lazy.array() is None
    scalar = np.float64(2.5)  # NumPy scalars cannot be weakly referenced; they are tiny
    assert LazySummary(scalar, "cpu").array() is scalar


def test_listener_must_be_callable() -> None:
    with pytest.raises(TypeError, match="must be callable"):
        events.subscribe(42)  # type: ignore[arg-type]


class _Cancelled(RuntimeError):
    """What a debugger raises from a listener to stop a live backward."""

    _engine_propagate = True


@pytest.mark.parametrize("kind", ["node_start", "enqueue", "dependency_decrement", "accumulate"])
def test_a_propagating_listener_cancels_backward_cleanly(kind: str) -> None:
    def cancel(event: events.Event) -> None:
        if event.kind == kind and event.device == "sim:0":
            raise _Cancelled(f"stopped at {kind}")

    x = engine.tensor([1.0, 2.0], requires_grad=True)
    loss = ((x.to("sim:0") * 2.0).to("cpu") + x).sum()
    with events.listen(cancel), pytest.raises(_Cancelled, match=f"stopped at {kind}"):
        loss.backward()
    # Nothing hangs and every thread keeps working.
    y = engine.tensor([1.0, 2.0], requires_grad=True)
    ((y.to("sim:0") * 2.0).to("cpu") + y).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [3.0, 3.0])


def test_the_positions_of_a_row_are_the_events_fields() -> None:
    # Note [Rows of events]: a source's plain row is read with these names.
    positions = {name: getattr(events, name.upper()) for name in events.Event._fields}
    assert list(positions.values()) == list(range(len(events.Event._fields)))
    event = events.Event("node_end", 3, 4, "t", "cpu", 9, 1, "MulBackward0", 2, 1, {"a": 1})
    assert all(event[i] == getattr(event, name) for name, i in positions.items())
