"""The bridge on grad(), inputs=, errors, retain_graph, create_graph and stealing."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz.sources import once  # noqa: E402
from autograd_viz.sources.pytorch import DerivedMismatchWarning, watch_torch  # noqa: E402
from autograd_viz.sources.pytorch.node import node_id  # noqa: E402
from autograd_viz.trace.recording import record  # noqa: E402
from engine import events  # noqa: E402
from tests.viz.sources.pytorch_programs import (  # noqa: E402
    Fails,
    hook_handles,
    independent_order,
    left_registered,
    mismatches,
    started,
    walk,
)


def _watched(call: Any) -> tuple[list[events.Event], Any, list[int], Any]:
    seen: list[events.Event] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", DerivedMismatchWarning)
        with (
            watch_torch(),
            events.listen(seen.append),
            record() as trace,
            independent_order() as order,
        ):
            result = call()
    return seen, trace, list(order), result


def _engine_would_run(loss: Any) -> dict[int, bool]:
    """PyTorch's own answer, asked inside a hook on the first node that runs."""
    answers: dict[int, bool] = {}
    nodes = walk([loss.grad_fn])

    def ask(grads: Any) -> None:
        for fn in nodes:  # PyTorch answers for neither leaves (in grad()) nor the root
            if fn.name() != "torch::autograd::AccumulateGrad" and fn is not loss.grad_fn:
                answers[node_id(fn)] = torch._C._will_engine_execute_node(fn)

    handle = loss.grad_fn.register_prehook(ask)
    return answers, handle  # type: ignore[return-value]


def test_grad_prunes_and_captures_as_pytorch_does() -> None:
    torch.manual_seed(0)
    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(4, requires_grad=True)
    h = torch.tanh(w @ x)
    loss = (h * h).sum() + (x * 3).sum()
    expected = torch.autograd.grad(loss, [x, h], retain_graph=True)
    answers, handle = _engine_would_run(loss)
    try:
        seen, trace, order, result = _watched(lambda: torch.autograd.grad(loss, [x, h]))
    finally:
        handle.remove()
    assert started(seen) == order
    assert mismatches(seen) == []
    assert all(torch.equal(a, b) for a, b in zip(result, expected, strict=True))
    (task,) = trace.graph_tasks.values()
    assert answers
    for nid, runs in answers.items():
        assert (task.nodes[nid].status == "needed") == runs, task.nodes[nid].name
    captures = [e for e in trace.events if e.kind == "capture"]
    assert sorted(e.data["output_index"] for e in captures) == [0, 1]
    end = trace.events[-1]
    assert end.kind == "graph_task_end" and end.data["status"] == "ok"
    final = trace.state_at(len(trace))
    assert final.graph_tasks[task.id].status == "ok"
    assert w.grad is None and x.grad is None


def test_backward_with_inputs_runs_only_what_reaches_them() -> None:
    torch.manual_seed(1)
    w = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    loss = ((w * 2).sin() + b.exp()).sum()
    seen, _, order, _ = _watched(lambda: loss.backward(inputs=[w]))
    assert started(seen) == order
    assert mismatches(seen) == []
    assert b.grad is None and w.grad is not None
    assert any(e.kind == "skip" and e.data["derived"] for e in seen)


def test_an_error_in_a_node_ends_the_graph_task_and_removes_every_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = torch.randn(3, requires_grad=True)
    loss = (Fails.apply(x * 2) * 3).sum()
    seen: list[events.Event] = []
    with (
        hook_handles(monkeypatch) as handles,
        watch_torch(),
        events.listen(seen.append),
        pytest.raises(ValueError, match="no gradient today"),
    ):
        loss.backward()
    error = next(e for e in seen if e.kind == "error")
    assert error.node_name == "FailsBackward"
    assert seen[-1].kind == "graph_task_end" and seen[-1].data["status"] == "error"
    assert left_registered(handles) == 0
    # PyTorch stays usable, watched or not.
    y = torch.randn(2, requires_grad=True)
    with watch_torch(), events.listen(seen.append):
        (y * y).sum().backward()
    assert torch.equal(y.grad, 2 * y.detach())


def test_retain_graph_twice_leaves_no_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(2)
    w = torch.randn(3, requires_grad=True)
    loss = (w.sin() * w).sum()
    seen: list[events.Event] = []
    with hook_handles(monkeypatch) as handles, watch_torch(), events.listen(seen.append):
        loss.backward(retain_graph=True)
        loss.backward(retain_graph=True)
    assert left_registered(handles) == 0
    assert mismatches(seen) == []
    ends = [e for e in seen if e.kind == "graph_task_end"]
    assert [e.data["status"] for e in ends] == ["ok", "ok"]
    # The same nodes keep their ids over both calls.
    starts = [e for e in seen if e.kind == "graph_task_start"]
    assert starts[0].node_id == starts[1].node_id
    accumulate = [e for e in seen if e.kind == "accumulate" and e.data["target"] == "leaf"]
    assert [e.data["action"] for e in accumulate] == ["created", "added"]
    # After the watch is closed, a listener hears nothing from PyTorch.
    later: list[events.Event] = []
    with events.listen(later.append):
        loss.backward()
    assert later == []


def test_create_graph_stays_differentiable() -> None:
    torch.manual_seed(3)
    x = torch.randn(3, requires_grad=True)
    (plain,) = torch.autograd.grad((x**3).sum(), [x], create_graph=True)
    (plain2,) = torch.autograd.grad(plain.sum(), [x])
    seen: list[events.Event] = []
    with watch_torch(), events.listen(seen.append):
        (g,) = torch.autograd.grad((x**3).sum(), [x], create_graph=True)
        (g2,) = torch.autograd.grad(g.sum(), [x])
    assert g.requires_grad
    assert torch.equal(g, plain) and torch.equal(g2, plain2)
    assert mismatches(seen) == []


def _stolen(watched: bool) -> bool:
    """Whether x.grad is the very buffer MulBackward0 produced (AccumulateGrad stole it)."""
    x = torch.randn(1000, requires_grad=True)
    loss = (x * 2).sum()
    mul = loss.grad_fn.next_functions[0][0]
    produced: list[int] = []
    handle = mul.register_hook(lambda outs, ins: produced.append(outs[0].data_ptr()) or None)
    try:
        if watched:
            with watch_torch(), record():
                loss.backward()
        else:
            loss.backward()
    finally:
        handle.remove()
    return x.grad.data_ptr() == produced[0]


def test_grad_is_still_stolen_when_watched() -> None:
    assert _stolen(watched=False)
    assert _stolen(watched=True)


def test_reentrant_checkpoint_is_a_nested_graph_task() -> None:
    torch.manual_seed(4)
    inner = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4, requires_grad=True)
    y = torch.utils.checkpoint.checkpoint(inner, x, use_reentrant=True)
    loss = y.pow(2).sum()
    seen, trace, order, _ = _watched(loss.backward)
    outer, nested = trace.graph_tasks.values()
    assert nested.parent == outer.id and nested.reentrant_depth == 1
    enter = next(e for e in seen if e.kind == "reentrant_enter")
    assert enter.data["parent_graph_task"] == outer.id
    running = [e for e in seen if e.kind in ("node_start", "node_end") and e.graph_task == outer.id]
    checkpoint_start = next(
        i for i, e in enumerate(seen) if e.node_name == "CheckpointFunctionBackward"
    )
    nested_start = next(i for i, e in enumerate(seen) if e.kind == "graph_task_start"
                        and e.graph_task == nested.id)  # fmt: skip
    assert checkpoint_start < nested_start
    assert running and started(seen) == order


def test_unsupported_torch_warns_once_and_watches_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch.autograd.graph as graph

    monkeypatch.delattr(graph, "_engine_run_backward")
    with pytest.warns(RuntimeWarning, match="cannot be watched"), watch_torch() as handle:
        assert not handle.watching


def test_a_contradicted_derivation_is_an_event_and_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autograd_viz.sources.pytorch import graph

    w = torch.randn(3, requires_grad=True)
    h = w * 2
    loss = (h.sin() + h.cos()).sum()
    # A hook the bridge cannot see (as one registered in C++) replaces the sum PyTorch
    # delivers to h's node: the derived buffer total is then wrong, and the bridge must
    # say so. (A hook it sees is a hook event instead: test_pytorch_hooks.py.)
    h.register_hook(lambda grad: grad * 0)
    monkeypatch.setattr(graph, "hooks_of", lambda fn, variable: ())
    seen: list[events.Event] = []
    with (
        watch_torch(),
        events.listen(seen.append),
        pytest.warns(DerivedMismatchWarning, match="differs from the sum"),
    ):
        loss.backward()
    (mismatch,) = mismatches(seen)
    assert mismatch.data["check"] == "buffer" and mismatch.data["derived"]
    assert mismatch.node_name == "MulBackward0"


def test_anomaly_mode_failing_a_node_routes_nothing_and_names_it() -> None:
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    seen: list[events.Event] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # anomaly mode's own warnings
        anomaly = torch.autograd.detect_anomaly(check_nan=True)
    with warnings.catch_warnings(), anomaly:
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("error", DerivedMismatchWarning)
        loss = (x.sqrt() * 0).sum()  # sqrt's backward at 0 gives inf * 0 = nan
        with (
            watch_torch(),
            events.listen(seen.append),
            pytest.raises(RuntimeError, match="returned nan values"),
        ):
            loss.backward()
    (error,) = [e for e in seen if e.kind == "error"]
    assert error.node_name == "SqrtBackward0"
    assert error.data["traceback"]  # anomaly mode recorded the forward stack
    end = [e for e in seen if e.node_name == "SqrtBackward0"][-2:]
    assert [e.kind for e in end] == ["node_end", "error"]  # nothing routed in between
    assert x.grad is None


def test_a_recorded_torch_trace_survives_save_and_load(tmp_path: Any) -> None:
    from autograd_viz.trace import Trace

    torch.manual_seed(5)
    w = torch.randn(3, 3, requires_grad=True)
    x = torch.randn(3, requires_grad=True)
    h = torch.tanh(w @ x)
    loss = (h * h).sum() + h.sum()
    with watch_torch(), record() as trace:
        torch.autograd.grad(loss, [x, h], retain_graph=True)
        loss.backward()
    path = tmp_path / "torch.jsonl"
    trace.save(path)
    assert Trace.load(path) == trace


def test_armed_but_unheard_registers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(3, requires_grad=True)
    with hook_handles(monkeypatch) as handles, watch_torch():
        (x * x).sum().backward()
    assert handles == []


def test_backward_into_a_non_leaf_input() -> None:
    torch.manual_seed(6)
    w = torch.randn(3, requires_grad=True)
    h = w.exp()
    loss = (h.sin() * h).sum()
    seen, trace, order, _ = _watched(lambda: loss.backward(inputs=[h]))
    assert started(seen) == order
    assert mismatches(seen) == []
    assert h.grad is not None and w.grad is None
    (task,) = trace.graph_tasks.values()
    assert task.outputs == ((node_id(h.grad_fn), 0),)


def test_a_given_name_is_forgotten_with_its_tensor() -> None:
    import gc

    from autograd_viz.sources.pytorch import name
    from autograd_viz.sources.pytorch.leaf_names import _GIVEN, given_name

    t = name(torch.randn(2), "temporary")
    assert given_name(t) == "temporary"
    key = id(t)
    del t
    gc.collect()
    assert key not in _GIVEN
    with pytest.raises(TypeError, match="names a torch.Tensor"):
        name([1.0], "x")  # type: ignore[arg-type]


def test_grad_into_a_gradient_edge() -> None:
    torch.manual_seed(7)
    w = torch.randn(3, requires_grad=True)
    h = w.exp()
    loss = (h.cos() * h).sum()
    edge = torch.autograd.graph.get_gradient_edge(h)
    (expected,) = torch.autograd.grad(loss, [edge], retain_graph=True)
    seen, _, order, (got,) = _watched(lambda: torch.autograd.grad(loss, [edge]))
    assert started(seen) == order
    assert mismatches(seen) == []
    assert torch.equal(got, expected)
    (capture,) = [e for e in seen if e.kind == "capture"]
    assert capture.node_id == node_id(h.grad_fn)


def test_device_thread_graphs_run_on_the_calling_thread_while_watched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autograd_viz.sources.pytorch import chokepoint

    # Pretend the CPU were a device PyTorch runs on its own threads.
    monkeypatch.setattr(chokepoint, "_CALLING_THREAD", frozenset({"meta"}))
    monkeypatch.setattr(once, "said", set())
    x = torch.randn(3, requires_grad=True)
    seen: list[events.Event] = []
    multithreaded_inside: list[bool] = []

    def note(grads: Any) -> None:
        multithreaded_inside.append(torch._C._is_multithreading_enabled())

    y = x * x
    y.grad_fn.register_prehook(note)
    with (
        watch_torch(),
        events.listen(seen.append),
        pytest.warns(RuntimeWarning, match="set_multithreading_enabled"),
    ):
        y.sum().backward()
    assert multithreaded_inside == [False]  # off for the watched call only
    assert torch._C._is_multithreading_enabled()
    assert [e.kind for e in seen][-1] == "graph_task_end"
    assert "derived_mismatch" not in {e.kind for e in seen}
    assert torch.equal(x.grad, 2 * x.detach())


def test_threads_sharing_a_model_each_get_their_own_graph_task() -> None:
    import threading

    torch.manual_seed(8)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    losses = [model(torch.randn(3, 4)).pow(2).sum() for _ in range(4)]
    seen: list[events.Event] = []
    lock = threading.Lock()

    def listener(event: events.Event) -> None:
        with lock:
            seen.append(event)

    with (
        warnings.catch_warnings(),
        watch_torch(),
        events.listen(listener),
    ):
        warnings.simplefilter("error", DerivedMismatchWarning)
        threads = [threading.Thread(target=loss.backward) for loss in losses]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert mismatches(seen) == []
    ends = [e for e in seen if e.kind == "graph_task_end"]
    assert len(ends) == 4 and all(e.data["status"] == "ok" for e in ends)
    per_task: dict[int, int] = {}
    for e in seen:
        if e.kind == "node_start":
            per_task[e.graph_task] = per_task.get(e.graph_task, 0) + 1
    assert sorted(per_task.values()) == [11, 11, 11, 11]


def test_the_last_listener_leaving_mid_backward_stops_the_watch_quietly() -> None:
    torch.manual_seed(9)
    w = torch.randn(3, requires_grad=True)
    seen: list[events.Event] = []

    def leaves_at_second_start(event: events.Event) -> None:
        seen.append(event)
        if event.kind == "node_start" and sum(e.kind == "node_start" for e in seen) == 2:
            events.unsubscribe(leaves_at_second_start)

    with warnings.catch_warnings(), watch_torch():
        warnings.simplefilter("error", DerivedMismatchWarning)
        events.subscribe(leaves_at_second_start)
        (w.sin() * w.cos()).sum().backward()
        assert not events.HUB.active
        assert sum(e.kind == "node_start" for e in seen) == 2
        # The next watched call starts afresh.
        later: list[events.Event] = []
        with events.listen(later.append):
            (w.sin() * w.cos()).sum().backward()
    assert later[-1].kind == "graph_task_end" and mismatches(later) == []


def test_batched_grad_runs_unwatched_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setattr(once, "said", set())
    x = torch.randn(3, requires_grad=True)
    y = x * 2
    seen: list[events.Event] = []
    with (
        watch_torch(),
        events.listen(seen.append),
        pytest.warns(RuntimeWarning, match="batched grad"),
    ):
        (jacobian,) = torch.autograd.grad(y, [x], torch.eye(3), is_grads_batched=True)
    assert torch.equal(jacobian, 2 * torch.eye(3))
    assert not any(e.kind == "graph_task_start" for e in seen)


def test_a_failure_of_the_watch_never_fails_the_backward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autograd_viz.sources.pytorch import bookkeeping

    def broken(*args: Any) -> None:
        raise KeyError("a bug in the bridge")

    monkeypatch.setattr(bookkeeping.Bookkeeping, "pass_outputs", broken)
    monkeypatch.setattr(once, "said", set())
    x = torch.randn(3, requires_grad=True)
    seen: list[events.Event] = []
    with (
        watch_torch(),
        events.listen(seen.append),
        pytest.warns(RuntimeWarning, match="stopped watching a backward call after KeyError"),
    ):
        (x.sin() * 2).sum().backward()
    assert torch.equal(x.grad, 2 * x.detach().cos())
    assert seen[-1].kind == "graph_task_end" and seen[-1].data["status"] == "ok"


def test_a_stepped_device_graph_is_watched_on_the_calling_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autograd_viz.sources.pytorch import chokepoint
    from engine.activity import ACTIVITY

    # Pretend the CPU were a device, and a live session were stepping.
    monkeypatch.setattr(chokepoint, "_CALLING_THREAD", frozenset({"meta"}))
    monkeypatch.setattr(ACTIVITY, "tracking", 1)
    monkeypatch.setattr(once, "said", set())
    x = torch.randn(3, requires_grad=True)
    seen: list[events.Event] = []
    with watch_torch(), events.listen(seen.append), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the note that threads are off
        (x * x).sum().backward()
    assert seen[-1].kind == "graph_task_end" and mismatches(seen) == []
