"""The PyTorch bridge: PyTorch's own backward, watched, gives our engine's events."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz.sources.pytorch import name, watch_torch  # noqa: E402
from autograd_viz.sources.pytorch.summary import summarize_tensor  # noqa: E402
from autograd_viz.trace.recording import record  # noqa: E402
from engine import events  # noqa: E402
from tests.viz.sources.pytorch_programs import (  # noqa: E402
    Program,
    bitwise_equal,
    checkpointed,
    gru,
    hook_handles,
    left_registered,
    mismatches,
    mlp,
    random_program,
    run_plain,
    run_watched,
    started,
    transformer,
    two_roots,
)

PROGRAMS: dict[str, Program] = {
    **{f"random{seed}": random_program(seed) for seed in range(24)},
    "mlp": mlp,
    "gru20": gru,
    "transformer": transformer,
    "two_roots": two_roots,
    "checkpoint": checkpointed,
}


@pytest.mark.parametrize("program", list(PROGRAMS.values()), ids=list(PROGRAMS))
def test_watched_backward_matches_pytorch(
    program: Program, monkeypatch: pytest.MonkeyPatch
) -> None:
    with hook_handles(monkeypatch) as handles:
        watched = run_watched(program)
    plain = run_plain(program)
    # The node order recorded is the one independent pre-hooks saw.
    assert started(watched.events) == watched.order
    assert [e.node_id for e in watched.trace.events if e.kind == "node_start"
            and not e.data.get("derived")] == watched.order  # fmt: skip
    # No derived enqueue contradicted PyTorch.
    assert mismatches(watched.events) == []
    # Watching changed no gradient, bit for bit, and left no hook behind.
    assert bitwise_equal(watched.grads, plain)
    assert handles and left_registered(handles) == 0
    # Replay's final leaves are PyTorch's .grad (run_watched names leaf i "leaf{i}").
    final = {
        state.name: state.grad
        for state in watched.trace.state_at(len(watched.trace)).leaves.values()
    }
    assert final
    for i, grad in enumerate(watched.grads):
        if grad is not None:
            assert final[f"leaf{i}"] == summarize_tensor(grad, "cpu", 16)


def test_replayed_leaf_grads_equal_pytorch_grads() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    x = name(torch.randn(5, 3, requires_grad=True), "x")
    loss = model(x).pow(2).sum()
    with watch_torch(), record(max_values=64) as trace:
        loss.backward()
    final = trace.state_at(len(trace)).leaves
    got = {state.name: state.grad for state in final.values()}
    expected = {qualified: p.grad for qualified, p in model.named_parameters()}
    expected["x"] = x.grad
    assert set(got) == set(expected)
    for leaf_name, grad in expected.items():
        assert got[leaf_name] == summarize_tensor(grad, "cpu", 64)


def test_parameters_are_named_by_their_qualified_names() -> None:
    torch.manual_seed(0)
    encoder = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0),
        num_layers=2,
        enable_nested_tensor=False,
    )
    loss = encoder(torch.randn(4, 2, 8)).sum()
    with watch_torch(), record() as trace:
        loss.backward()
    names = {
        info.leaf.name
        for task in trace.graph_tasks.values()
        for info in task.nodes.values()
        if info.leaf is not None
    }
    assert "layers.0.linear1.weight" in names
    assert "layers.1.self_attn.in_proj_weight" in names


def _leaf_names(trace: Any) -> list[str]:
    return sorted(
        info.leaf.name
        for task in trace.graph_tasks.values()
        for info in task.nodes.values()
        if info.leaf is not None
    )


def test_a_leaf_is_named_by_its_variable_else_by_its_shape() -> None:
    a = torch.randn(2, 3, requires_grad=True)

    def loss_of(t: Any) -> Any:
        return (t * torch.ones(4, 1, requires_grad=True).sum()).sum()

    with watch_torch(), record() as trace:
        loss_of(a).backward()  # the ones tensor is bound to no variable anywhere
    assert _leaf_names(trace) == ["a", "tensor[4, 1]"]


def test_naming_leaves_keeps_nothing_the_function_deletes_alive() -> None:
    # Reading a function's variables to name leaves must not keep them: a batch
    # deleted after backward is freed at once, as without us.
    batch = torch.randn(64, 3)
    gone = weakref.ref(batch)
    w = torch.randn(3, requires_grad=True)
    with watch_torch(), record() as trace:
        (batch @ w).sum().backward()
    assert _leaf_names(trace) == ["w"]
    del batch
    gc.collect()
    assert gone() is None


def test_naming_leaves_leaves_the_users_locals_dict_alone() -> None:
    seen = locals()  # the user holds the dict the frame keeps: it is theirs
    w = torch.randn(3, requires_grad=True)
    with watch_torch(), record() as trace:
        (w * 2).sum().backward()
    assert _leaf_names(trace) == ["w"]
    assert "w" in seen and seen["w"] is w


def test_several_separate_modules_prefix_their_parameters_with_their_variable() -> None:
    block = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh())
    head = torch.nn.Linear(3, 1)
    with watch_torch(), record() as trace:
        head(block(torch.randn(2, 3))).sum().backward()
    assert _leaf_names(trace) == ["block.0.bias", "block.0.weight", "head.bias", "head.weight"]


def test_a_submodule_in_view_does_not_rename_its_parameters() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    first = model[0]  # a submodule bound to a variable of its own
    with watch_torch(), record() as trace:
        model(torch.randn(2, 3)).sum().backward()
    assert first is model[0]
    assert _leaf_names(trace) == ["0.bias", "0.weight", "1.bias", "1.weight"]


def test_graph_task_start_names_its_source_and_snapshot() -> None:
    x = torch.randn(3, requires_grad=True)
    seen: list[events.Event] = []
    with watch_torch(), events.listen(seen.append):
        (x * x).sum().backward()
    start = seen[0]
    assert start.kind == "graph_task_start"
    assert start.data["source"] == f"torch {torch.__version__}"
    info = start.data["graph_snapshot"](16)
    assert info.id == start.graph_task and info.root == start.node_id
    mul = next(i for i in info.nodes.values() if i.name == "MulBackward0")
    acc = next(i for i in info.nodes.values() if i.name == "AccumulateGrad")
    assert mul.next_edges == ((acc.id, 0), (acc.id, 0))
    assert acc.dependencies == 2 and acc.sequence_nr == 2**64 - 1 and acc.topological_nr == 0
    assert mul.topological_nr == 1 and info.nodes[info.root].topological_nr == 2


def test_ids_never_collide_with_our_engine() -> None:
    import engine

    x = torch.randn(3, requires_grad=True)
    e = engine.tensor([1.0, 2.0], requires_grad=True)
    seen: list[events.Event] = []
    with watch_torch(), events.listen(seen.append):
        (x * x).sum().backward()
        (e * e).sum().backward()
    starts = [ev for ev in seen if ev.kind == "graph_task_start"]
    assert len({ev.graph_task for ev in starts}) == 2
    ids_by_task: dict[int, set[int]] = {}
    for ev in seen:
        if ev.node_id is not None:
            ids_by_task.setdefault(ev.graph_task, set()).add(ev.node_id)
    first, second = ids_by_task.values()
    assert not first & second


def test_derived_events_say_so() -> None:
    w = torch.randn(3, requires_grad=True)
    seen: list[events.Event] = []
    with watch_torch(), events.listen(seen.append):
        (w * w + w).sum().backward()
    for ev in seen:
        derived = ev.kind in ("enqueue", "dependency_decrement", "skip") or (
            ev.kind == "accumulate" and ev.data["target"] == "buffer"
        )
        assert bool(ev.data.get("derived")) == derived, ev


def test_buffer_sums_are_the_totals_pytorch_delivers() -> None:
    w = torch.randn(3, requires_grad=True)
    with watch_torch(), record(max_values=16) as trace:
        (w.sin() * 3 + w.cos() + w * w).sum().backward()
    acc = [e for e in trace.events if e.kind == "accumulate" and e.data["target"] == "buffer"
           and e.node_name == "AccumulateGrad"]  # fmt: skip
    assert [e.data["action"] for e in acc] == ["created", "added", "added", "added"]
    start = next(
        e for e in trace.events if e.kind == "node_start" and e.node_name == "AccumulateGrad"
    )
    assert acc[-1].data["total"] == start.data["inputs"][0]


def test_nobody_listening_means_pytorch_runs_untouched() -> None:
    x = torch.randn(3, requires_grad=True)
    with watch_torch():
        import torch.autograd.graph as graph

        assert graph._engine_run_backward.__wrapped__ is not None  # armed
        (x * x).sum().backward()
    assert not hasattr(torch.autograd.graph._engine_run_backward, "__wrapped__")
    assert torch.autograd._engine_run_backward is torch.autograd.graph._engine_run_backward


def test_every_entry_point_is_a_graph_task() -> None:
    x = torch.randn(3, requires_grad=True)
    seen: list[events.Event] = []
    with watch_torch(), events.listen(seen.append):
        (x * 2).sum().backward()
        torch.autograd.backward([(x * 3).sum()])
        torch.autograd.grad((x * 4).sum(), [x])
    assert sum(e.kind == "graph_task_start" for e in seen) == 3
    assert sum(e.kind == "graph_task_end" for e in seen) == 3


def test_naming_parameters_walks_each_visible_module_once(monkeypatch: Any) -> None:
    from autograd_viz.sources.pytorch import leaf_names, module_calls

    walks: list[Any] = []
    real = module_calls.walk_modules

    def counted(module: Any, remove_duplicate: bool) -> Any:
        walks.append(module)
        return real(module, remove_duplicate)

    monkeypatch.setattr(module_calls, "walk_modules", counted)  # named_parameters_once's
    shared = torch.nn.Linear(3, 3)
    block = torch.nn.Sequential(shared, torch.nn.Tanh(), torch.nn.Linear(3, 3))
    head = torch.nn.Linear(3, 3)
    head.weight = shared.weight  # tied: named once, by the larger module
    names = leaf_names._qualified_names(
        {id(block): ("block", block), id(head): ("head", head), id(shared): ("shared", shared)}
    )
    assert sorted(map(id, walks)) == sorted(map(id, (block, head, shared)))
    assert names[id(shared.weight)] == "block.0.weight"
    assert names[id(head.bias)] == "head.bias"
    assert id(shared.bias) in names and names[id(shared.bias)] == "block.0.bias"
