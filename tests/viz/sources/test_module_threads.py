"""Nodes made on a thread other than the backward's caller get the module calls that made them.

Sequence numbers are per thread (Note [Nodes made on another thread] in
``autograd_viz/sources/pytorch/module_calls.py``): a forward run in a
``threading.Thread`` numbers its nodes from its own counter, so they are
looked up in that thread's module calls, not in the caller's.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from autograd_viz.trace import GraphTaskInfo  # noqa: E402
from autograd_viz.trace.recording import record  # noqa: E402

pytestmark = pytest.mark.oracle


def _model() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def _in_thread(fn: Any) -> Any:
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def _scopes(info: GraphTaskInfo) -> dict[str, tuple[tuple[str, int], ...]]:
    return {
        f"{n.name}#{n.sequence_nr}": n.scope
        for n in info.nodes.values()
        if n.leaf is None and n.name != "SumBackward0"
    }


def _grads(model: Any) -> list[Any]:
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("busy_caller", [False, True])
def test_a_forward_run_in_a_thread_gets_its_modules(busy_caller: bool) -> None:
    x = torch.randn(5, 3)
    plain = _model()
    _in_thread(lambda: plain(x)).sum().backward()
    model = _model()
    # The caller runs modules of its own too: its sequence numbers then cover the
    # worker's, and a lookup in the caller's calls would give the worker's nodes these.
    other = nn.Sequential(nn.Tanh(), nn.Sigmoid(), nn.Tanh(), nn.Sigmoid())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "nodes ... have no module" warning
        with record() as trace:
            if busy_caller:
                other(torch.randn(5, 3, requires_grad=True) * 2)
            y = _in_thread(lambda: model(x))
            y.sum().backward()
    assert [g.tolist() for g in _grads(model)] == [g.tolist() for g in _grads(plain)]
    (info,) = trace.graph_tasks.values()
    scopes = _scopes(info)
    assert len(scopes) == 5  # Addmm, T, Tanh, Addmm, T: made on the worker
    paths = {tuple(path for path, _call in scope) for scope in scopes.values()}
    assert paths == {("model", "0"), ("model", "1"), ("model", "2")}
    assert info.modules == {"model": "Sequential", "0": "Linear", "1": "Tanh", "2": "Linear"}
    leaves = {n.leaf.name for n in info.nodes.values() if n.leaf is not None}
    assert leaves == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_replicas_in_threads_as_data_parallel_runs_them() -> None:
    """Two threads each run the model on half a batch; the caller adds their outputs."""
    model = _model()
    halves = torch.randn(2, 4, 3).unbind(0)
    with record() as trace:
        outs: list[Any] = [None, None]

        def replica(i: int) -> None:
            outs[i] = model(halves[i])

        workers = [threading.Thread(target=replica, args=(i,)) for i in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        (outs[0].sum() + outs[1].sum()).backward()
    (info,) = trace.graph_tasks.values()
    made = [n for n in info.nodes.values() if n.leaf is None]
    inside = [n for n in made if n.scope]
    assert {n.name for n in made if not n.scope} == {"SumBackward0", "AddBackward0"}
    assert len(inside) == 10
    calls = {scope[0] for scope in (n.scope for n in inside)}
    assert calls == {("model", 0), ("model", 1)}  # one call of the model per thread
    for call in calls:  # each call holds its own Linear, Tanh, Linear
        names = sorted(n.name for n in inside if n.scope[0] == call)
        assert names == ["AddmmBackward0"] * 2 + ["TBackward0"] * 2 + ["TanhBackward0"]
