"""Batched events: a recorder alone takes the bridge's events in batches, and gets the same trace."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz.sources.batches import batch_max_values  # noqa: E402
from autograd_viz.sources.pytorch import name  # noqa: E402
from autograd_viz.sources.pytorch.bookkeeping import DerivedMismatchWarning  # noqa: E402
from autograd_viz.trace import Trace  # noqa: E402
from autograd_viz.trace.recorder import Recorder  # noqa: E402
from autograd_viz.trace.recording import record  # noqa: E402
from engine import events  # noqa: E402
from engine.events import HUB, Event  # noqa: E402
from tests.viz.sources.pytorch_programs import (  # noqa: E402
    Fails,
    Program,
    checkpointed,
    grad_inputs,
    gru,
    random_program,
    transformer,
    two_roots,
)
from tests.viz.sources.summary_numbers import first_difference  # noqa: E402

PROGRAMS: dict[str, Program] = {
    **{f"random{seed}": random_program(seed) for seed in range(6)},
    "gru20": gru,
    "transformer": transformer,
    "two_roots": two_roots,
    "grad_inputs": grad_inputs,
    "checkpoint": checkpointed,
}


def test_the_hub_batches_only_when_every_listener_is_a_recorder_with_one_max_values() -> None:
    first, second, other = Recorder(16), Recorder(16), Recorder(4)
    assert batch_max_values(HUB.listeners) is None
    with events.listen(first):
        assert batch_max_values(HUB.listeners) == 16
        with events.listen(second):
            assert batch_max_values(HUB.listeners) == 16
        with events.listen(other):
            assert batch_max_values(HUB.listeners) is None  # two max_values: one by one
        with events.listen(lambda event: None):
            assert (
                batch_max_values(HUB.listeners) is None
            )  # a listener that wants every event as it comes
        assert batch_max_values(HUB.listeners) == 16
    assert batch_max_values(HUB.listeners) is None


def _recorded(program: Program, listener: Any = None) -> tuple[Trace, Any]:
    torch.manual_seed(0)
    backward, leaves = program()
    for i, leaf in enumerate(leaves):
        name(leaf, f"leaf{i}")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DerivedMismatchWarning)
        with (
            record() as trace,
            events.listen(listener) if listener is not None else contextlib.nullcontext(),
        ):
            batched = batch_max_values(HUB.listeners)
            result = backward()
    assert (batched is None) == (listener is not None)
    return trace, result


def _comparable(trace: Trace) -> list[tuple[Any, ...]]:
    """The events with ids renamed by first appearance, sequence numbers by rank.

    (PyTorch's ``sequence_nr`` counts every node the thread ever made.)
    """
    ids: dict[tuple[str, int], int] = {}
    ranks = {nr: i for i, nr in enumerate(sorted({e.sequence_nr for e in trace.events} - {None}))}

    def rename(kind: str, value: Any) -> Any:
        return None if value is None else ids.setdefault((kind, value), len(ids))

    out = []
    for e in trace.events:
        data = dict(e.data)
        if "from_node" in data:
            data["from_node"] = rename("node", data["from_node"])
        if "queue_owner" in data:
            data["queue_owner"] = data["queue_owner"].split()[0]
        for key in ("roots", "outputs", "parent_graph_task"):
            data.pop(key, None)  # ids of the other run's graph; the nodes are compared below
        out.append(
            (
                e.kind,
                e.thread,
                e.device,
                rename("task", e.graph_task),
                rename("node", e.node_id),
                e.node_name,
                ranks.get(e.sequence_nr),
                e.topological_nr,
                data,
            )
        )
    return out


@pytest.mark.parametrize("program", list(PROGRAMS.values()), ids=list(PROGRAMS))
def test_batched_recording_equals_recording_one_by_one(program: Program) -> None:
    seen: list[Event] = []
    batched, _ = _recorded(program)
    one_by_one, _ = _recorded(program, seen.append)
    assert first_difference(_comparable(batched), _comparable(one_by_one)) is None
    assert [e.index for e in batched.events] == list(range(len(batched)))
    assert [e.seq for e in batched.events] == sorted(e.seq for e in batched.events)
    assert [info.first_event for info in batched.graph_tasks.values()] == [
        info.first_event for info in one_by_one.graph_tasks.values()
    ]
    for info in batched.graph_tasks.values():
        assert batched.events[info.first_event].kind == "graph_task_start"
    # Replay reads both the same way.
    end_a, end_b = batched.state_at(len(batched)), one_by_one.state_at(len(one_by_one))
    assert {s.name: s.grad for s in end_a.leaves.values()} == {
        s.name: s.grad for s in end_b.leaves.values()
    }


def test_a_listener_that_subscribes_mid_backward_gets_only_later_events() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 4, requires_grad=True)
    late: list[Event] = []
    subscribed: list[int] = []

    def subscribe_now(grad: torch.Tensor) -> None:
        subscribed.append(next(HUB.seq))  # every event after this one has a larger seq
        events.subscribe(late.append)

    middle = x.exp() * 2
    middle.register_hook(subscribe_now)
    loss = (middle.sin() * x).sum()
    try:
        with record() as trace:
            loss.backward()
    finally:
        events.unsubscribe(late.append)
    assert subscribed and late
    assert all(e.seq > subscribed[0] for e in late)
    # The recorder missed nothing: its trace is complete and in order.
    kinds = [e.kind for e in trace.events]
    assert kinds[0] == "graph_task_start" and kinds[-1] == "graph_task_end"
    assert [e.seq for e in trace.events] == sorted(e.seq for e in trace.events)
    assert [e.seq for e in late] == [e.seq for e in trace.events if e.seq > subscribed[0]]
    assert [e.node_id for e in trace.events if e.kind == "node_start"] == [
        e.node_id for e in trace.events if e.kind == "node_end"
    ]


def _row(kind: str, seq: int, graph_task: int) -> tuple[Any, ...]:
    return (kind, seq, seq * 10, "main", "cpu", graph_task, None, None, None, None, {})


def test_rows_that_arrive_after_later_events_are_merged_in_seq_order() -> None:
    recorder = Recorder()
    later = [Event("hook", seq, seq * 10, "other", "cpu", 7) for seq in (5, 8)]
    for event in later:
        recorder(event)
    recorder.take_events([_row("hook", 3, 9), _row("hook", 4, 9), _row("hook", 6, 9)])
    recorder.take_events([_row("hook", 9, 9)])
    trace = recorder.trace
    assert [e.seq for e in trace.events] == [3, 4, 5, 6, 8, 9]
    assert [e.index for e in trace.events] == list(range(6))
    assert [e.thread for e in trace.events] == ["main", "main", "other", "main", "other", "main"]


@pytest.mark.parametrize("apart", [False, True], ids=["rows with data", "data apart"])
def test_rows_with_their_data_apart_are_recorded_as_rows_with_it(apart: bool) -> None:
    # Note [Rows apart from their data]: the same trace either way, merged, kept and cut alike.
    recorder = Recorder()
    recorder(Event("hook", 5, 50, "other", "cpu", 7, data={"n": 5}))
    recorder._cut.add(8)
    batches = [
        [(*_row("hook", 3, 9)[:-1], {"n": 3}), (*_row("hook", 4, 8)[:-1], {"n": 4})],
        [(*_row("hook", 6, 9)[:-1], {"n": 6}), (*_row("hook", 7, 9)[:-1], {"n": 7})],
    ]
    for rows in batches:
        if apart:
            recorder.take_events([row[:-1] for row in rows], [row[-1] for row in rows])
        else:
            recorder.take_events(rows)
    trace = recorder.trace
    assert [(e.seq, e.graph_task, dict(e.data)) for e in trace.events] == [
        (3, 9, {"n": 3}),
        (5, 7, {"n": 5}),
        (6, 9, {"n": 6}),
        (7, 9, {"n": 7}),
    ]
    assert [e.index for e in trace.events] == list(range(4))


def test_a_closed_recorder_takes_no_rows() -> None:
    recorder = Recorder()
    recorder.close()
    recorder.take_events([_row("hook", 1, 1)])
    assert len(recorder.trace) == 0


@pytest.mark.parametrize(
    "program", [random_program(1), random_program(4), gru], ids=["r1", "r4", "gru"]
)
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "one by one"])
def test_node_inputs_are_summaries_of_what_each_node_received(
    program: Program, batched: bool
) -> None:
    from autograd_viz.sources.pytorch.node import node_id
    from autograd_viz.sources.pytorch.summary import summarize_tensor
    from tests.viz.sources.pytorch_programs import walk

    torch.manual_seed(0)
    backward, _ = program()
    received: dict[int, list[Any]] = {}

    def summarize_received(nid: int) -> Any:
        def hook(grads: tuple[Any, ...]) -> None:
            summaries = tuple(None if g is None else summarize_tensor(g, "cpu", 16) for g in grads)
            received.setdefault(nid, []).append(summaries)

        return hook

    handles = [fn.register_prehook(summarize_received(node_id(fn))) for fn in walk(backward.roots)]
    try:
        with (
            record() as trace,
            contextlib.nullcontext() if batched else events.listen(lambda event: None),
        ):
            backward()
    finally:
        for handle in handles:
            handle.remove()
    starts = [e for e in trace.events if e.kind == "node_start" and not e.data.get("derived")]
    assert starts and any(
        len(e.data["inputs"]) > 1 or e.node_name != "AccumulateGrad" for e in starts
    )
    for event in starts:
        received_ = received[event.node_id].pop(0)
        assert first_difference(tuple(event.data["inputs"]), received_) is None, event.node_name


def test_backward_calls_on_two_threads_are_recorded_whole_and_in_order() -> None:
    import threading

    torch.manual_seed(0)
    cells = [torch.nn.GRUCell(8, 8) for _ in range(2)]
    inputs = [torch.randn(6, 2, 8) for _ in range(2)]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def run(i: int) -> None:
        try:
            h = torch.zeros(2, 8)
            for x in inputs[i]:
                h = cells[i](x, h)
            start.wait()
            for _ in range(3):
                h.sum().backward(retain_graph=True)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    with record() as trace:
        assert batch_max_values(HUB.listeners) is not None
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    assert len(trace.graph_tasks) == 6
    assert [e.index for e in trace.events] == list(range(len(trace)))
    assert [e.seq for e in trace.events] == sorted(e.seq for e in trace.events)
    for gid, info in trace.graph_tasks.items():
        mine = [e for e in trace.events if e.graph_task == gid]
        assert trace.events[info.first_event] is mine[0] and mine[0].kind == "graph_task_start"
        assert mine[-1].kind == "graph_task_end"
        starts = [e.node_id for e in mine if e.kind == "node_start"]
        assert starts == [e.node_id for e in mine if e.kind == "node_end"]
        assert not [e for e in mine if e.kind == "derived_mismatch"]
    # Replay reads it to the end: each cell's .grad is three backward calls' worth.
    leaves = trace.state_at(len(trace)).leaves
    assert len(leaves) == 8
    for state in leaves.values():
        assert state.grad is not None


def test_a_failing_backward_recorded_in_batches_keeps_its_error_and_end() -> None:
    x = torch.randn(3, requires_grad=True)
    loss = (Fails.apply(x * 2) * 3).sum()
    with record() as trace, pytest.raises(ValueError, match="no gradient today"):
        assert batch_max_values(HUB.listeners) is not None
        loss.backward()
    kinds = [e.kind for e in trace.events]
    assert kinds[0] == "graph_task_start" and kinds[-2:] == ["error", "graph_task_end"]
    error, end = trace.events[-2:]
    assert error.node_name == "FailsBackward" and error.data["message"] == "no gradient today"
    assert end.data["status"] == "error" and end.data["exc_type"] == "ValueError"
    assert [e.seq for e in trace.events] == sorted(e.seq for e in trace.events)
    # The next backward is recorded whole, in batches again.
    y = torch.randn(2, requires_grad=True)
    with record() as again:
        (y * y).sum().backward()
    assert [e.kind for e in again.events][-1] == "graph_task_end"
    assert again.events[-1].data["status"] == "ok"
    assert torch.equal(y.grad, 2 * y.detach())


def _modified_in_place() -> tuple[Any, list[Any]]:
    x = torch.randn(4, 4, requires_grad=True)
    y = x.exp()
    loss = (y * 2).sin().sum()
    y.mul_(2)  # ExpBackward0 saved its result: it raises when it runs
    return loss.backward, [x]


def _backward_twice() -> tuple[Any, list[Any]]:
    x = torch.randn(4, 4, requires_grad=True)
    loss = (x.exp() * 2).sum()
    loss.backward()  # frees the saved tensors: the next call fails at MulBackward0
    return loss.backward, [x]


@pytest.mark.parametrize(
    ("program", "failing"),
    [(_modified_in_place, "ExpBackward0"), (_backward_twice, "MulBackward0")],
    ids=["modified in place", "backward twice"],
)
def test_a_node_that_fails_unseen_gets_the_start_recorded_one_by_one(
    program: Program, failing: str
) -> None:
    # Batched, a plain node is watched by its post hook alone (Note [One hook per node]):
    # one that raises never reaches it, and its start is derived from the model queue.
    recorder_of_last: list[Trace] = []

    def recorded(program: Program, listener: Any = None) -> None:
        torch.manual_seed(0)
        backward, _ = program()
        with (
            record() as trace,
            events.listen(listener) if listener is not None else contextlib.nullcontext(),
        ):
            recorder_of_last[:] = [trace]
            backward()

    batched_trace: list[Trace] = []
    one_by_one: list[Trace] = []
    for into, listener in ((batched_trace, None), (one_by_one, lambda event: None)):
        with pytest.raises(RuntimeError):
            recorded(program, listener)
        into.append(recorder_of_last[0])
    batched, plain = _comparable(batched_trace[0]), _comparable(one_by_one[0])
    starts = [i for i, e in enumerate(batched) if e[0] == "node_start"]
    last = batched[starts[-1]]
    assert last[5] == failing and last[8].pop("derived") is True
    assert [e[0] for e in batched[-3:]] == ["node_start", "error", "graph_task_end"]
    assert batched[-2][5] == failing
    assert batched == plain  # the derived start's inputs are what the node received


@pytest.mark.parametrize("values", ["none", "all"])
def test_a_recorded_call_leaves_no_node_of_its_plan_for_the_collector(values: str) -> None:
    # A plain node's post hook is the call's TorchNode itself (Note [One hook per node]):
    # nothing refers back to the watch once the call ends, so the plan goes by reference
    # counting, but for the plan kept for the next call (Note [Plans made again]), which
    # holds nothing of the call: no PyTorch node, no leaf, no watch.
    import gc

    from autograd_viz.sources.pytorch import graph
    from autograd_viz.sources.pytorch.node import TorchNode

    torch.manual_seed(0)
    backward, _ = gru()
    gc.collect()
    gc.disable()
    try:
        with record(values=values) as trace:
            backward()
        alive = [o for o in gc.get_objects() if type(o) is TorchNode]
    finally:
        gc.enable()
    assert len(trace.graph_tasks) == 1
    kept = {id(node) for plan in graph._KEPT.values() for node in plan.order}
    assert [node for node in alive if id(node) not in kept] == []
    assert [(n.fn, n.variable, n.watch) for n in alive] == [(None, None, None)] * len(alive)
