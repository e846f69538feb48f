"""Replay agrees with the engine: the last state is what really happened, every step is sound."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import engine
from autograd_viz.trace import Trace
from autograd_viz.trace.recording import record
from autograd_viz.trace.replay import ExecutionState, Frame, NodeStatus, Replayer
from autograd_viz.trace.summary import TensorSummary
from engine.engine import MAX_RECURSION_DEPTH
from tests.graphs import FailsInBackward, Reentrant

MAX_VALUES = 1024
"""Large enough that every summary in these cases keeps its values."""


@dataclass
class Case:
    """A recorded backward and what the caller saw."""

    trace: Trace
    leaves: dict[str, engine.Tensor] = field(default_factory=dict)
    """Leaf tensors by name; the last state's ``.grad`` must match theirs."""
    captured: dict[int, tuple[engine.Tensor | None, ...]] = field(default_factory=dict)
    """What each ``grad()`` call returned, by graph task id."""
    errors: dict[int, BaseException] = field(default_factory=dict)
    """The exception each failed call raised, by graph task id."""
    anomalies: int = 0


def _newest_task(trace: Trace) -> int:
    return max(gid for gid, info in trace.graph_tasks.items() if info.parent is None)


def _named(*tensors: engine.Tensor) -> dict[str, engine.Tensor]:
    return {t.name: t for t in tensors if t.name}


# -- cases -------------------------------------------------------------------------------


def _seeds_inputs() -> Case:
    x = engine.tensor([0.5, 0.75], requires_grad=True, name="x")
    y = engine.tensor([0.1, 0.90], requires_grad=True, name="y")
    with record(MAX_VALUES) as trace:
        engine.backward([engine.exp(x * y).sum()], inputs=[x])
    assert y.grad is None
    return Case(trace, _named(x, y))


def _paper_rnn() -> Case:
    engine.manual_seed(0)
    x = engine.randn(1, 10, dtype=engine.float64, requires_grad=True, name="x")
    prev_h = engine.randn(1, 20, dtype=engine.float64, requires_grad=True, name="prev_h")
    w_h = engine.randn(20, 20, dtype=engine.float64, requires_grad=True, name="W_h")
    w_x = engine.randn(20, 10, dtype=engine.float64, requires_grad=True, name="W_x")
    with record(MAX_VALUES) as trace:
        i2h = engine.matmul(w_x, x.T)
        h2h = engine.matmul(w_h, prev_h.T)
        (i2h + h2h).tanh().sum().backward()
    return Case(trace, _named(x, prev_h, w_h, w_x))


def _diamond_twice() -> Case:
    a = engine.tensor([1.0, 2.0], requires_grad=True, name="a")
    b = engine.tensor([3.0, 4.0], requires_grad=True, name="b")
    with record(MAX_VALUES) as trace:
        c = a * b
        e = (c + c.exp()) * a
        loss = (e + b.sin()).sum()
        loss.backward(retain_graph=True)
        loss.backward()  # accumulates into the same .grad
    return Case(trace, _named(a, b))


def _grad_with_captures() -> Case:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    y = engine.tensor([3.0, -1.0], requires_grad=True, name="y")
    with record(MAX_VALUES) as trace:
        h = x * y
        out = (h.exp() + h + y.cos()).sum()
        result = engine.grad(out, [x, h])
    assert x.grad is None and y.grad is None
    return Case(trace, _named(x, y), captured={_newest_task(trace): tuple(result)})


def _grad_prunes_by_inputs() -> Case:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    y = engine.tensor([0.5, 0.25], requires_grad=True, name="y")
    z = engine.tensor([2.0, 2.0], requires_grad=True, name="z")
    with record(MAX_VALUES) as trace:
        loss = (x * y).sum() + (z.exp() * y).sum()
        result = engine.grad(loss, [z], retain_graph=True)
        captured = {_newest_task(trace): tuple(result)}
        engine.backward([loss], inputs=[x, y])
    pruned = [n for n in trace.graph_tasks[_newest_task(trace)].nodes.values()]
    assert any(n.status == "pruned" for n in pruned)
    return Case(trace, _named(x, y, z), captured=captured)


def _hooks() -> Case:
    x = engine.tensor([1.0, -2.0], requires_grad=True, name="x")
    x.register_hook(lambda g: g * 10.0)
    with record(MAX_VALUES) as trace:
        h = x * x
        h.retain_grad()
        h.register_hook(lambda g: g + 1.0)
        h.grad_fn.register_prehook(lambda grads: None)
        h.grad_fn.register_hook(lambda outputs, inputs: None)
        (h * 3.0).sum().backward()
    assert sum(e.kind == "hook" for e in trace.events) == 5
    np.testing.assert_array_equal(x.grad.numpy(), [80.0, -160.0])
    return Case(trace, _named(x))


def _two_devices() -> Case:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    w = engine.tensor([0.5, -0.25], device="sim:1", requires_grad=True, name="w")
    with record(MAX_VALUES) as trace:
        a = (x.to("sim:0") * 2.0).to("cpu")
        b = (x.to("sim:1") * w).to("cpu")
        c = (x.to("sim:0").exp() * 3.0).to("cpu")
        (a + b + c).sum().backward()
    threads = {e.thread for e in trace.events if e.kind == "node_start"}
    assert {"autograd-sim:0", "autograd-sim:1"} <= threads
    return Case(trace, _named(x, w))


class _Reentrant(engine.Function):
    """Calls ``engine.grad`` and then ``backward`` from its own backward."""

    results: list[tuple[engine.Tensor | None, ...]] = []  # noqa: RUF012 - what the inner grad() returned

    @staticmethod
    def forward(ctx: object, x: engine.Tensor) -> engine.Tensor:
        return x * 1.0

    @staticmethod
    def backward(ctx: object, grad: engine.Tensor) -> engine.Tensor:
        inner = engine.tensor([1.0, 2.0], requires_grad=True, name="inner")
        with engine.enable_grad():
            out = (inner * inner).sum()
            _Reentrant.results.append(tuple(engine.grad(out, [inner], retain_graph=True)))
        out.backward()
        _Reentrant.last_inner = inner  # type: ignore[attr-defined]
        return grad * 2.0


def _reentrant() -> Case:
    _Reentrant.results = []
    x = engine.tensor([2.0, 3.0], requires_grad=True, name="x")
    with record(MAX_VALUES) as trace:
        (_Reentrant.apply(x) * x).sum().backward()
    inner_grad = [gid for gid, info in trace.graph_tasks.items() if info.parent and info.outputs]
    (returned,) = _Reentrant.results
    inner = _Reentrant.last_inner  # type: ignore[attr-defined]
    return Case(trace, {**_named(x), "inner": inner}, captured={inner_grad[0]: returned})


def _reentrant_on_the_pool() -> Case:
    x = engine.tensor([2.0], requires_grad=True, name="x")
    with record(MAX_VALUES) as trace:
        Reentrant.apply(x, MAX_RECURSION_DEPTH + 3).sum().backward()
    assert any(e.data["on_pool"] for e in trace.events if e.kind == "reentrant_enter")
    return Case(trace, _named(x))


def _error() -> Case:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    with record(MAX_VALUES) as trace:
        # exp runs first (higher sequence_nr), then FailsInBackward fails while MulBackward0 waits.
        loss = (FailsInBackward.apply(x) + (x.to("sim:0") * 2.0).to("cpu") + x.exp()).sum()
        with pytest.raises(ValueError, match="this backward always fails") as info:
            loss.backward()
    return Case(trace, _named(x), errors={_newest_task(trace): info.value})


def _anomaly() -> Case:
    x = engine.tensor([0.0, 1.0], requires_grad=True, name="x")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with engine.detect_anomaly(), record(MAX_VALUES) as trace:
            loss = (x.sqrt() * 0.0).sum()
            with pytest.raises(RuntimeError, match="returned nan values") as info:
                loss.backward()
    return Case(trace, _named(x), errors={_newest_task(trace): info.value}, anomalies=1)


CASES: dict[str, Callable[[], Case]] = {
    "seeds-inputs": _seeds_inputs,
    "paper-rnn": _paper_rnn,
    "diamond-twice": _diamond_twice,
    "grad-captures": _grad_with_captures,
    "grad-prunes": _grad_prunes_by_inputs,
    "hooks": _hooks,
    "two-devices": _two_devices,
    "reentrant": _reentrant,
    "reentrant-pool": _reentrant_on_the_pool,
    "error": _error,
    "anomaly": _anomaly,
}


@pytest.fixture(params=list(CASES))
def case(request: pytest.FixtureRequest) -> Case:
    return CASES[request.param]()


# -- the last state is what happened ----------------------------------------------------


def _assert_summary(summary: TensorSummary | None, tensor: engine.Tensor | None) -> None:
    if tensor is None:
        assert summary is None
        return
    assert summary is not None
    data = np.asarray(tensor.data)
    assert summary.shape == data.shape and summary.dtype == str(data.dtype)
    assert summary.device == str(tensor.device)
    assert summary.values is not None
    np.testing.assert_array_equal(np.asarray(summary.values), data.astype(np.float64).ravel())


def test_last_state_matches_the_engine(case: Case) -> None:
    trace = case.trace
    state = trace.state_at(len(trace))
    assert state.step == state.total == len(trace) and state.next_event is None
    leaf_ids = {leaf.name: node_id for node_id, leaf in state.leaves.items()}
    for name, tensor in case.leaves.items():
        _assert_summary(state.leaves[leaf_ids[name]].grad, tensor.grad)
    assert set(state.captured) == set(case.captured)
    for gid, returned in case.captured.items():
        captured = state.captured[gid]
        assert sorted(captured) == list(range(len(returned)))
        for i, value in enumerate(returned):
            _assert_summary(captured[i], value)
    for gid, task in state.graph_tasks.items():
        exc = case.errors.get(gid)
        if exc is None:
            assert (task.status, task.error) == ("ok", None)
        else:
            assert task.status == "error"
            assert task.error == f"{type(exc).__name__}: {exc}"
    first_errors = {e.graph_task: e for e in state.errors if e.data["first"]}
    assert set(first_errors) == set(case.errors)
    for gid, exc in case.errors.items():
        error = first_errors[gid]
        assert (error.data["exc_type"], error.data["message"]) == (type(exc).__name__, str(exc))
        assert state.node(error.node_id, gid).status is NodeStatus.FAILED
    assert len(state.anomalies) == case.anomalies
    assert set(state.graph_tasks) == set(trace.graph_tasks)
    for gid, info in trace.graph_tasks.items():
        nodes = state.nodes(gid)
        assert set(nodes) == set(info.nodes)
        if gid in case.errors:
            assert all(n.status is not NodeStatus.RUNNING for n in nodes.values())
            continue
        for node_id, node in nodes.items():
            snapshot = info.nodes[node_id]
            if snapshot.status == "needed":
                assert node.status is NodeStatus.DONE, node.name
                assert node.remaining == 0, node.name
            elif snapshot.captures:
                assert node.status is NodeStatus.DONE, node.name  # captured, never run
            else:
                assert node.status is NodeStatus.PRUNED, node.name
    assert all(not queue for queue in state.queues.values())
    assert all(not thread.stack for thread in state.threads.values())


def test_an_error_leaves_the_rest_of_the_graph_unrun() -> None:
    case = _error()
    trace = case.trace
    state = trace.state_at(len(trace))
    gid = _newest_task(trace)
    statuses = {n.name: n.status for n in state.nodes(gid).values()}
    assert statuses["FailsInBackwardBackward"] is NodeStatus.FAILED
    assert statuses["AccumulateGrad"] in (NodeStatus.WAITING, NodeStatus.PARTIAL)
    assert state.leaves[next(iter(state.leaves))].grad is None
    (error,) = state.errors
    assert state.node(error.node_id, gid).error == "ValueError: this backward always fails"


def test_an_anomaly_is_the_nan_the_engine_rejected() -> None:
    case = _anomaly()
    state = case.trace.state_at(len(case.trace))
    (anomaly,) = state.anomalies
    assert anomaly.node_name == "SqrtBackward0" and anomaly.data["value"] == "nan"
    assert anomaly.data["grad"].nan_count == 1
    assert "x.sqrt()" in "".join(anomaly.data["traceback"])
    assert state.node(anomaly.node_id).status is NodeStatus.FAILED


def test_queues_and_threads_span_devices() -> None:
    case = _two_devices()
    trace = case.trace
    seen_queues: set[str] = set()
    for k in range(len(trace) + 1):
        seen_queues |= {d for d, q in trace.state_at(k).queues.items() if q}
    assert {"cpu", "sim:0", "sim:1"} <= seen_queues
    threads = trace.state_at(len(trace)).threads
    assert threads["autograd-sim:0"].device == "sim:0"
    assert threads["autograd-sim:1"].device == "sim:1"


# -- every step is sound ---------------------------------------------------------------------


def test_every_step_follows_the_engine(case: Case) -> None:
    trace = case.trace
    single_thread = len({e.thread for e in trace.events}) == 1
    queued: dict[tuple[int, int], str] = {}  # (graph task, node) -> queue, from the raw events
    running: set[int] = set()
    previous = trace.state_at(0)
    assert not previous.graph_tasks and not previous.threads
    for step, event in enumerate(trace.events, start=1):
        state = trace.state_at(step)
        assert state.event is event and previous.next_event is event
        gid, node_id = event.graph_task, event.node_id
        key = (gid, node_id or 0)
        if event.kind == "graph_task_start":
            running.add(gid)
        elif event.kind == "graph_task_end":
            running.discard(gid)
            queued = {k: q for k, q in queued.items() if k[0] != gid}
        elif event.kind == "dependency_decrement":
            before = previous.node(node_id, gid).remaining
            after = state.node(node_id, gid).remaining
            assert after == before - 1 == event.data["remaining"]
        elif event.kind == "enqueue" and node_id is not None:
            queued[key] = event.data["queue"]
        elif event.kind == "node_start":
            assert previous.node(node_id, gid).remaining == 0
            assert state.node(node_id, gid).status is NodeStatus.RUNNING
            assert state.threads[event.thread].running == Frame(gid, node_id, event.node_name)
            if single_thread and key in queued:
                # One thread pops in priority order: the node is the head of its queue.
                head = previous.queues[queued[key]][0]
                assert (head.graph_task, head.node_id) == key
        elif event.kind == "node_end":
            assert state.node(node_id, gid).status is NodeStatus.DONE
        if event.kind in ("node_start", "capture", "hook"):
            queued.pop(key, None)  # popped from its queue
        in_queues = {
            (entry.graph_task, entry.node_id): device
            for device, entries in state.queues.items()
            for entry in entries
        }
        assert in_queues == queued, (step, event)
        for (task, node), _ in queued.items():
            assert state.node(node, task).status is NodeStatus.QUEUED
        if node_id is not None and gid in running:
            node = state.node(node_id, gid)
            assert node.status is not NodeStatus.QUEUED or key in queued
            if node.status is NodeStatus.RUNNING:
                assert node.remaining == 0 and node.thread == event.thread
        for entries in state.queues.values():
            order = [(-e.reentrant_depth, -e.sequence_nr) for e in entries]
            assert order == sorted(order)
            for entry in entries:
                info = trace.graph_tasks[entry.graph_task]
                assert entry.reentrant_depth == info.reentrant_depth
                assert entry.sequence_nr == info.nodes[entry.node_id].sequence_nr
        previous = state


def test_a_reentrant_backward_nests_graph_tasks_on_one_thread() -> None:
    case = _reentrant()
    trace = case.trace
    outer = _newest_task(trace)
    nested = []
    for step in range(len(trace) + 1):
        for thread in trace.state_at(step).threads.values():
            tasks = [f for f in thread.stack if f.node_id is None]
            if len(tasks) >= 2:
                nested.append(thread.stack)
                assert thread.reentrant_depth == len(tasks) - 1
    assert nested, "no state shows the nested graph task"
    stack = nested[0]
    assert stack[0] == Frame(outer, None, None)
    assert stack[1].graph_task == outer and stack[1].name == "_ReentrantBackward"
    assert stack[2].node_id is None and trace.graph_tasks[stack[2].graph_task].parent == outer


def test_many_paper_rnn_queues_hold_two_nodes_at_once() -> None:
    case = _paper_rnn()
    trace = case.trace
    lengths = [len(q) for k in range(len(trace) + 1) for q in trace.state_at(k).queues.values()]
    assert max(lengths) >= 2


# -- seeking ---------------------------------------------------------------------------------


def _long_trace() -> Trace:
    """A few thousand events over several graph tasks and devices."""
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    w = engine.tensor([0.5, 0.5], device="sim:1", requires_grad=True, name="w")
    with record(MAX_VALUES) as trace:
        y = x
        for _ in range(120):
            y = y * 1.001 + 0.0
        (y.to("sim:1") * w).sum().backward(retain_graph=True)
        engine.grad(y.sum(), [x])
        _Reentrant.apply(x).sum().backward()
    assert len(trace) > 5 * 256
    return trace


def _view(state: ExecutionState, gids: list[int]) -> dict[str, Any]:
    return {
        "step": state.step,
        "nodes": {gid: state.nodes(gid) for gid in gids},
        "queues": dict(state.queues),
        "threads": dict(state.threads),
        "graph_tasks": dict(state.graph_tasks),
        "leaves": state.leaves,
        "captured": state.captured,
        "errors": state.errors,
        "anomalies": state.anomalies,
        "event": state.event,
    }


def test_seeking_in_any_order_gives_the_state_of_a_fresh_replay() -> None:
    trace = _long_trace()
    n = len(trace)
    gids = list(trace.graph_tasks)
    every_step = Replayer(Trace(trace.header, trace.graph_tasks, trace.events), 1)
    rng = random.Random(20240611)
    boundaries = [s for k in range(1, n // 256 + 1) for s in (256 * k - 1, 256 * k, 256 * k + 1)]
    steps = [0, n, *boundaries, *rng.sample(range(n + 1), 60)]
    rng.shuffle(steps)
    steps += list(range(n, n - 300, -1))  # backward across a checkpoint, one step at a time
    steps += list(range(0, 300))
    small_checkpoints = Replayer(trace, 7)
    for step in steps:
        expected = _view(every_step.state_at(step), gids)
        assert _view(trace.state_at(step), gids) == expected, step
        assert _view(small_checkpoints.state_at(step), gids) == expected, step


def test_seeking_does_not_change_earlier_states() -> None:
    trace = _long_trace()
    gids = list(trace.graph_tasks)
    early = trace.state_at(300)
    before = _view(early, gids)
    trace.state_at(len(trace))
    trace.state_at(10)
    assert _view(early, gids) == before
    assert _view(trace.state_at(300), gids) == before


@pytest.mark.parametrize("step", [-1, 10**6])
def test_steps_outside_the_trace_are_an_index_error(step: int) -> None:
    trace = _seeds_inputs().trace
    with pytest.raises(IndexError, match=rf"step {step} is outside this trace \(0 \.\. "):
        trace.state_at(step)


@pytest.mark.parametrize("every", [0, -3, True, 2.5])
def test_replayer_rejects_a_bad_checkpoint_interval(every: Any) -> None:
    trace = _seeds_inputs().trace
    with pytest.raises((ValueError, TypeError), match="checkpoint_every must be"):
        Replayer(trace, every)


def test_the_root_input_buffer_holds_the_seed_gradient() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with record() as trace:
        (x * x).sum().backward(engine.tensor(3.0))
    start = trace.state_at(1)
    (task,) = trace.graph_tasks.values()
    root = start.node(task.root)
    assert root.slots[0] is not None and root.slots[0].values == (3.0,)
    assert root.contributions == (1,)


# -- ties: the queue shown is the order the engine pops (Note [Replaying the ready queues]) ----


@pytest.mark.parametrize("count", [5, 8, 13])
def test_the_queue_shown_is_the_order_tied_tasks_run(count: int) -> None:
    xs = [engine.tensor([1.0], requires_grad=True, name=f"x{i}") for i in range(count)]
    with record() as trace:
        engine.cat(xs).sum().backward()
    _shown_order_is_run_order(trace, count)


@pytest.mark.parametrize("count", [5, 8])
def test_the_queue_shown_for_pytorch_is_the_order_pytorch_runs(count: int) -> None:
    torch = pytest.importorskip("torch")
    xs = [torch.ones(1, requires_grad=True) for _ in range(count)]
    with record() as trace:
        torch.cat(xs).sum().backward()
    assert "derived_mismatch" not in {e.kind for e in trace.events}
    _shown_order_is_run_order(trace, count)


def _shown_order_is_run_order(trace: Trace, count: int) -> None:
    starts = [e for e in trace.events if e.kind == "node_start"]
    leaf_starts = [e.node_id for e in starts if e.node_name == "AccumulateGrad"]
    assert len(leaf_starts) == count
    first = next(e for e in starts if e.node_name == "AccumulateGrad")
    shown = [q.node_id for q in trace.state_at(first.index).queues["cpu"]]
    assert shown == leaf_starts  # heap order: 1,3,5,2,4 for five, not first in, first out
    arrival = sorted(
        leaf_starts,
        key=lambda n: next(e.index for e in trace.events if e.kind == "enqueue" and e.node_id == n),
    )
    assert shown != arrival
