"""Small PyTorch programs the bridge tests watch, and the checks they share."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz.sources.pytorch import (  # noqa: E402
    DERIVED_MISMATCH,
    DerivedMismatchWarning,
    name,
    watch_torch,
)
from autograd_viz.sources.pytorch import watch as watch_module  # noqa: E402
from autograd_viz.sources.pytorch.node import node_id  # noqa: E402
from autograd_viz.trace.recording import record  # noqa: E402
from engine import events  # noqa: E402

Program = Callable[[], tuple[Any, list[Any]]]


class Fails(torch.autograd.Function):
    """Passes its input on; its backward raises ``ValueError("no gradient today")``."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return x * 1

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        raise ValueError("no gradient today")


"""Builds a fresh forward pass: returns ``(run_backward, leaves)``."""


def walk(roots: list[Any]) -> list[Any]:
    """Every PyTorch node reachable from ``roots``."""
    seen: dict[int, Any] = {}
    stack = list(roots)
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen[id(fn)] = fn
        stack.extend(child for child, _ in fn.next_functions)
    return list(seen.values())


@contextmanager
def independent_order() -> Iterator[list[int]]:
    """The ids of the nodes as PyTorch starts them, seen by pre-hooks of our own.

    Wraps PyTorch's backward chokepoint on top of whatever is there, so that
    the nested graph task of a reentrant checkpoint is seen too.
    """
    import torch.autograd.graph as graph

    order: list[int] = []
    below = graph._engine_run_backward
    hooked_nodes: set[int] = set()  # a node an outer call shares is hooked once

    def hooked(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
        roots = [t.grad_fn for t in t_outputs if isinstance(t, torch.Tensor)]
        handles = []
        mine = []
        for fn in walk(roots):
            if id(fn) in hooked_nodes:
                continue
            nid = node_id(fn)
            hooked_nodes.add(id(fn))
            mine.append(id(fn))
            handles.append(fn.register_prehook(lambda grads, nid=nid: order.append(nid)))
        try:
            return below(t_outputs, *args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()
            hooked_nodes.difference_update(mine)

    graph._engine_run_backward = hooked
    torch.autograd._engine_run_backward = hooked
    try:
        yield order
    finally:
        graph._engine_run_backward = below
        torch.autograd._engine_run_backward = below


@contextmanager
def hook_handles(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every hook handle the bridge registers, to check that none is left."""
    handles: list[Any] = []
    original = watch_module.GraphTaskWatch._hook

    def spy(self: Any, node: Any) -> None:
        before = len(self._handles)
        original(self, node)
        handles.extend((handle, self) for handle in self._handles[before:])

    monkeypatch.setattr(watch_module.GraphTaskWatch, "_hook", spy)
    yield handles


def left_registered(handles: list[Any]) -> int:
    """How many of ``handles`` (each with the watch that registered it) still have their hook.

    A handle is a node's hook dict, the hook under the watch's key (Note [Keyed
    hooks] in hooks.py), or PyTorch's ``RemovableHandle``.
    """
    left = 0
    for handle, watch in handles:
        if isinstance(handle, dict):
            left += watch in handle
            continue
        hooks = handle.hooks_dict_ref()
        if hooks is not None and handle.id in hooks:
            left += 1
    return left


def grads_of(leaves: list[Any]) -> list[Any]:
    return [None if t.grad is None else t.grad.clone() for t in leaves]


def bitwise_equal(a: list[Any], b: list[Any]) -> bool:
    for x, y in zip(a, b, strict=True):
        if (x is None) != (y is None):
            return False
        if x is not None and not torch.equal(x.view(torch.int32), y.view(torch.int32)):
            return False
    return True


class Watched:
    """What one watched run produced."""

    def __init__(self) -> None:
        self.events: list[events.Event] = []
        self.order: list[int] = []
        self.trace: Any = None
        self.result: Any = None
        self.grads: list[Any] = []


def run_watched(program: Program, seed: int = 0) -> Watched:
    """Run ``program`` watched and recorded, with independent pre-hooks on its graph."""
    torch.manual_seed(seed)
    backward, leaves = program()
    for i, leaf in enumerate(leaves):
        name(leaf, f"leaf{i}")
    out = Watched()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DerivedMismatchWarning)
        with (
            watch_torch(),
            events.listen(out.events.append),
            record() as trace,
            independent_order() as order,
        ):
            out.result = backward()
    out.order = list(order)
    out.trace = trace
    out.grads = grads_of(leaves)
    return out


def run_plain(program: Program, seed: int = 0) -> list[Any]:
    torch.manual_seed(seed)
    backward, leaves = program()
    backward()
    return grads_of(leaves)


def started(evts: list[events.Event]) -> list[int]:
    """Node ids of observed node starts (a GraphRoot's start is derived)."""
    return [
        e.node_id  # type: ignore[misc]
        for e in evts
        if e.kind == "node_start" and not e.data.get("derived")
    ]


def mismatches(evts: list[events.Event]) -> list[events.Event]:
    return [e for e in evts if e.kind == DERIVED_MISMATCH]


class Backward:
    """A deferred backward call that knows its graph's roots."""

    def __init__(self, roots: list[Any], call: Callable[[], Any]) -> None:
        self.roots = roots
        self._call = call

    def __call__(self) -> Any:
        return self._call()


# -- the programs ------------------------------------------------------------------------


def random_program(seed: int) -> Program:
    """A random graph of pointwise ops over a few leaves, with fan-out and reuse."""

    def program() -> tuple[Backward, list[Any]]:
        rng = random.Random(seed)
        leaves = [torch.randn(4, requires_grad=True) for _ in range(rng.randint(1, 4))]
        values = list(leaves)
        for _ in range(rng.randint(3, 14)):
            a, b = rng.choice(values), rng.choice(values)
            op = rng.randrange(7)
            if op == 0:
                v = a + b
            elif op == 1:
                v = a * b
            elif op == 2:
                v = a - 2 * b
            elif op == 3:
                v = torch.tanh(a)
            elif op == 4:
                v = torch.sin(a) * b
            elif op == 5:
                v = a.exp().clamp(max=10.0)
            else:
                v = (a * b).sum() * a
            values.append(v)
        loss = sum(
            v.sum() for v in rng.sample(values[len(leaves) :], k=min(3, len(values) - len(leaves)))
        )
        return Backward([loss.grad_fn], loss.backward), leaves

    return program


def mlp() -> tuple[Backward, list[Any]]:
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
        torch.nn.Linear(16, 1),
    )  # fmt: skip
    x = torch.randn(5, 8)
    loss = model(x).pow(2).mean()
    return Backward([loss.grad_fn], loss.backward), list(model.parameters())


def gru() -> tuple[Backward, list[Any]]:
    cell = torch.nn.GRUCell(6, 8)
    h = torch.zeros(2, 8)
    xs = torch.randn(20, 2, 6)
    for x in xs:
        h = cell(x, h)
    loss = h.pow(2).sum()
    return Backward([loss.grad_fn], loss.backward), list(cell.parameters())


def transformer() -> tuple[Backward, list[Any]]:
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0)
    x = torch.randn(5, 3, 16, requires_grad=True)
    loss = layer(x).pow(2).mean()
    return Backward([loss.grad_fn], loss.backward), [x, *layer.parameters()]


def two_roots() -> tuple[Backward, list[Any]]:
    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(4, requires_grad=True)
    h = torch.tanh(w @ x)
    a, b = h.sum(), (h * x).pow(2).sum()

    def call() -> Any:
        torch.autograd.backward([a, b])

    return Backward([a.grad_fn, b.grad_fn], call), [w, x]


def grad_inputs() -> tuple[Backward, list[Any]]:
    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(4, requires_grad=True)
    h = torch.tanh(w @ x)
    loss = (h * h).sum() + x.sum()

    def call() -> Any:
        return torch.autograd.grad(loss, [x, h])

    return Backward([loss.grad_fn], call), [w, x]


def checkpointed() -> tuple[Backward, list[Any]]:
    inner = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Tanh(), torch.nn.Linear(6, 6))
    x = torch.randn(3, 6, requires_grad=True)
    y = torch.utils.checkpoint.checkpoint(inner, x, use_reentrant=True)
    loss = (y * y).sum()
    return Backward([loss.grad_fn], loss.backward), [x, *inner.parameters()]
