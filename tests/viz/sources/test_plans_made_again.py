"""A watched call's plan made again for the next call over a graph of the same shape.

Note [Plans made again] in ``autograd_viz/sources/pytorch/graph.py``: the trace of a
run whose plans are made again is the trace of the same run walked anew at every call.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz.sources.pytorch import graph  # noqa: E402
from autograd_viz.trace import Trace  # noqa: E402
from autograd_viz.trace.recording import record  # noqa: E402
from tests.viz.sources.test_batched_events import _comparable  # noqa: E402

Step = Callable[[int], None]
"""One training step of a program, by its index: forward and backward."""


@pytest.fixture(autouse=True)
def _no_kept_plans() -> Iterator[None]:
    graph._KEPT.clear()
    yield
    graph._KEPT.clear()


def _walked_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call walks its graph anew: no plan is kept."""
    graph._KEPT.clear()
    from autograd_viz.sources.pytorch import call_derive, chokepoint

    for module in (graph, chokepoint, call_derive):
        monkeypatch.setattr(module, "release", lambda plan: None)


def _nodes(trace: Trace) -> list[list[tuple[Any, ...]]]:
    """Each graph task's nodes in walk order, ids renamed by first appearance."""
    out = []
    for info in trace.graph_tasks.values():
        ids: dict[int, int] = {}
        ranks = {nr: i for i, nr in enumerate(sorted(n.sequence_nr for n in info.nodes.values()))}

        def rename(node: int, ids: dict[int, int] = ids) -> int:
            return ids.setdefault(node, len(ids))

        nodes = []
        for node in info.nodes.values():
            edges = tuple(None if e is None else (rename(e[0]), e[1]) for e in node.next_edges)
            leaf = None if node.leaf is None else (node.leaf.name, node.leaf.shape, node.leaf.grad)
            nodes.append(
                (
                    rename(node.id),
                    node.name,
                    ranks[node.sequence_nr],
                    node.topological_nr,
                    node.device,
                    edges,
                    node.inputs,
                    node.dependencies,
                    node.status,
                    node.saved,
                    node.hooks,
                    leaf,
                    node.scope,
                )
            )
        out.append(nodes)
    return out


WAYS = ("none", "all", "calls", "calls, last 2")
"""``values`` at the node level, or the call level (derived as each call ends, or the
last two derived when the recording ends)."""


def _recorded(program: Callable[[], Step], steps: int, way: str) -> Trace:
    torch.manual_seed(0)
    step = program()
    if way.startswith("calls"):
        options: dict[str, Any] = {"observe": "calls", "last": 2 if "last" in way else None}
    else:
        options = {"values": way}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no module calls followed
        with record(**options) as trace:
            for i in range(steps):
                step(i)
    return trace


def _same_as_walked_anew(
    program: Callable[[], Step], monkeypatch: pytest.MonkeyPatch, steps: int = 4
) -> Trace:
    made_again = {way: _recorded(program, steps, way) for way in WAYS}
    with monkeypatch.context() as patch:
        _walked_anew(patch)
        anew = {way: _recorded(program, steps, way) for way in WAYS}
    for way in WAYS:
        assert _comparable(made_again[way]) == _comparable(anew[way])
        assert _nodes(made_again[way]) == _nodes(anew[way])
    assert len(made_again["calls, last 2"].graph_tasks) == 2
    return made_again["all"]


def _gru_loop() -> Step:
    cell = torch.nn.GRUCell(6, 8)
    xs = torch.randn(5, 2, 6)

    def step(i: int) -> None:
        h = torch.zeros(2, 8)
        for x in xs:
            h = cell(x, h)
        h.pow(2).sum().backward()

    return step


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each kept plan a call tried, whether it was made again (its graph matched)."""
    tried: list[bool] = []
    original = graph._made_again

    def counted(*args: Any) -> Any:
        plan = original(*args)
        tried.append(plan is not None)
        return plan

    monkeypatch.setattr(graph, "_made_again", counted)
    return tried


def test_a_training_loop_records_what_it_records_walked_anew(
    monkeypatch: pytest.MonkeyPatch, made: list[bool]
) -> None:
    trace = _same_as_walked_anew(_gru_loop, monkeypatch)
    assert len(trace.graph_tasks) == 4
    # Every call but the first (the later runs' models are others, of the same shape), and
    # the flight recorder derives only the two calls it keeps: 3 + 4 + 4 + 2.
    assert made == [True] * 13


def _batch_grows() -> Step:
    layer = torch.nn.Linear(3, 2)

    def step(i: int) -> None:
        x = torch.randn(i + 1, 3, requires_grad=True)  # a new leaf, a new shape
        torch.tanh(layer(x)).sum().backward()

    return step


def test_shapes_and_leaves_are_read_again_at_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _same_as_walked_anew(_batch_grows, monkeypatch)
    batches = []
    for nodes in _nodes(trace):
        tanh = next(n for n in nodes if n[1] == "TanhBackward0")
        batches.append(tanh[6][0][0][0])  # its input slot's shape, first dimension
    assert batches == [1, 2, 3, 4]


def _shape_changes() -> Step:
    w = torch.randn(4, requires_grad=True)

    def step(i: int) -> None:
        y = w
        for _ in range(i % 3 + 1):  # one, two, three ops: another graph under the same root
            y = torch.sin(y) if i % 2 else torch.cos(y)
        y.sum().backward()

    return step


def test_another_graph_under_the_same_root_is_walked_anew(
    monkeypatch: pytest.MonkeyPatch, made: list[bool]
) -> None:
    trace = _same_as_walked_anew(_shape_changes, monkeypatch, steps=6)
    assert len(trace.graph_tasks) == 6
    assert made and made.count(True) == 0  # no two calls in a row had the same graph


def _hooked_later() -> Step:
    w = torch.randn(3, requires_grad=True)

    def step(i: int) -> None:
        h = torch.exp(w.expand(40, 3))  # 120 elements: a size that may be held
        if i >= 2:
            h.register_hook(lambda grad: grad.mul_(2))  # in place: what it receives changes
        (h * h).sum().backward()

    return step


def test_hooks_added_at_a_later_call_are_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _same_as_walked_anew(_hooked_later, monkeypatch)
    hooked = [[n[1] for n in nodes if n[10]] for nodes in _nodes(trace)]
    assert hooked == [[], [], ["ExpBackward0"], ["ExpBackward0"]]


def test_a_plan_in_use_is_not_made_again_for_another_call() -> None:
    from autograd_viz.sources.pytorch.leaf_names import LeafNamer

    w = torch.randn(3, requires_grad=True)

    def plan_of(loss: Any) -> Any:
        return graph.plan_graph_task([(loss.grad_fn, 0)], [], True, LeafNamer(None), reuse=True)

    first = plan_of(torch.exp(w).sum())
    graph.release(first)
    kept = set(map(id, first.nodes))
    assert all(node.fn is None and node.variable is None for node in first.nodes)
    second = plan_of(torch.exp(w).sum())  # takes the kept plan
    third = plan_of(torch.exp(w).sum())  # while the second runs: a plan of its own
    assert set(map(id, second.nodes)) == kept
    assert not set(map(id, third.nodes)) & kept
    assert [n.fn.name() for n in second.nodes] == [n.fn.name() for n in third.nodes]
    graph.release(second)
    graph.release(third)


def test_threads_recording_one_shape_at_once_each_get_their_own_graph() -> None:
    import threading

    from autograd_viz.sources.pytorch.bookkeeping import DerivedMismatchWarning

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    failed: list[BaseException] = []

    def train(seed: int) -> None:
        try:
            generator = torch.Generator().manual_seed(seed)
            for _ in range(20):
                model(torch.randn(4, 8, generator=generator)).sum().backward()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    with warnings.catch_warnings():
        warnings.simplefilter("error", DerivedMismatchWarning)
        with record(values="none") as trace:
            threads = [threading.Thread(target=train, args=(seed,)) for seed in range(3)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    assert failed == []
    shapes = {tuple(node[1:8]) for nodes in _nodes(trace) for node in nodes}
    first = _nodes(trace)[0]
    assert len(trace.graph_tasks) == 60
    assert all(len(nodes) == len(first) for nodes in _nodes(trace))
    assert shapes == {tuple(node[1:8]) for node in first}
    assert not [e for e in trace.events if e.kind == "derived_mismatch"]
