"""Parameters used outside their module's call, named by the model and drawn in their module.

A parameter is not always used by the module holding it: a parent stacks its
heads' weights, a language model ties its output layer to its embedding
(GPT-2's ``lm_head.weight`` is ``transformer.wte.weight``), a forward hook reads
a parameter of a module never called. Each is named as the model's
``named_parameters()`` names it, drawn in the module its name points to (TUI
tree, dot clusters, ``--around``, timeline), read back by ``--around`` and the
TUI's ``/``, and watching changes no gradient and keeps nothing alive.
"""

from __future__ import annotations

import gc
import io
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
from rich.console import Console

import autograd_viz
from autograd_viz import cli
from autograd_viz.draw.model import select
from autograd_viz.draw.model.graph_view import from_state
from autograd_viz.draw.model.tree import ModuleTree
from autograd_viz.timeline import to_chrome_trace
from autograd_viz.trace import Trace
from autograd_viz.trace.scopes import owner_scope
from autograd_viz.tui.panels import inspect_node
from tests.viz.tui.tuiting import find_in_tree, replay_app, run_app, status

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = pytest.importorskip("torch")
    nn = torch.nn
F = torch.nn.functional

pytestmark = pytest.mark.oracle


class Heads(nn.Module):
    """Three heads whose weights the block stacks itself: no head is ever called."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.heads = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))

    def forward(self, x: Any) -> Any:
        w = torch.stack([cast(torch.Tensor, m.weight) for m in self.heads])
        return torch.tanh(self.inp(x)) @ w


class Stacked(nn.Module):
    """The stacking block inside a model, and one more stack in the model's own forward."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.block = Heads()
        self.extra = nn.ModuleList(nn.Linear(8, 8) for _ in range(2))

    def forward(self, x: Any) -> Any:
        out = self.block(self.pre(x)).sum(0)
        return out @ torch.stack([cast(torch.Tensor, m.weight) for m in self.extra]).sum(0)


class Body(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(20, 8)
        self.h = nn.Sequential(nn.Linear(8, 8), nn.Tanh())

    def forward(self, ids: Any) -> Any:
        return self.h(self.wte(ids))


class Tied(nn.Module):
    """GPT-2's weight tying: the output layer's weight is the embedding's, registered twice."""

    def __init__(self) -> None:
        super().__init__()
        self.transformer = Body()
        # Deeper than the embedding it ties to, and registered after it.
        head = nn.Linear(8, 20, bias=False)
        self.lm_head = nn.Sequential(nn.Sequential(head))
        head.weight = self.transformer.wte.weight
        self.out = nn.Embedding(20, 8)

    def forward(self, ids: Any) -> Any:
        h = self.transformer(ids)
        # The second tie never calls its embedding: F.linear reads its weight directly.
        return self.lm_head(h) + F.linear(h, self.out.weight)


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.c = nn.Linear(8, 8)
        self.scale = nn.Parameter(torch.ones(8))
        self.b.register_forward_hook(self.rescale)

    def rescale(self, _module: nn.Module, _inputs: Any, out: Any) -> Any:
        return out * self.scale + self.c.weight[0]

    def forward(self, x: Any) -> Any:
        return self.b(self.a(x))


class Hooked(nn.Module):
    """A forward hook on ``inner.b`` reads ``inner.scale`` and ``inner.c.weight``; ``c`` is
    never called."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()

    def forward(self, x: Any) -> Any:
        return self.inner(x)


def stacked() -> tuple[nn.Module, Any]:
    return Stacked(), torch.randn(4, 8)


def tied() -> tuple[nn.Module, Any]:
    return Tied(), torch.randint(0, 20, (2, 5))


def hooked() -> tuple[nn.Module, Any]:
    return Hooked(), torch.randn(4, 8)


CASES: dict[str, tuple[Callable[[], tuple[nn.Module, Any]], dict[str, str]]] = {
    # name -> the module it is drawn in
    "stacked": (
        stacked,
        {
            "block.heads.0.weight": "block.heads.0",
            "block.heads.2.weight": "block.heads.2",
            "extra.1.weight": "extra.1",
            "block.inp.weight": "block.inp",
        },
    ),
    "tied": (
        tied,
        {
            "transformer.wte.weight": "transformer.wte",
            "out.weight": "out",
            "transformer.h.0.weight": "transformer.h.0",
        },
    ),
    "hooked": (
        hooked,
        {"inner.c.weight": "inner.c", "inner.scale": "inner", "inner.b.weight": "inner.b"},
    ),
}


def recorded(make: Callable[[], tuple[nn.Module, Any]]) -> tuple[Trace, list[str]]:
    """A trace of one step of a fresh model, and the names of its parameters the step used."""
    torch.manual_seed(0)
    model, x = make()
    with autograd_viz.record() as trace:
        model(x).sum().backward()
    return trace, [name for name, p in model.named_parameters() if p.grad is not None]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_parameter_is_named_by_the_model_and_drawn_in_its_module(case: str) -> None:
    make, places = CASES[case]
    trace, names = recorded(make)
    (task,) = trace.graph_tasks.values()
    leaves = {n.leaf.name: n for n in task.nodes.values() if n.leaf is not None and n.leaf.name}
    # Every parameter by its qualified name (a tied one by its first); none by its shape.
    assert sorted(leaves) == sorted(names)
    view = from_state(trace.state_at(len(trace)))
    tree = ModuleTree.build(((k, n.info) for k, n in view.nodes.items()), view.modules)
    names_read = select.names_of_view(view)
    classes = {path: type(m).__name__ for path, m in make()[0].named_modules()}
    for name, module in places.items():
        info = leaves[name]
        assert owner_scope(info)[-1][0] == module, (name, info.scope)
        key = next(k for k, n in view.nodes.items() if n.info.id == info.id)
        scope = tree.scopes[tree.scope_of[key]]
        assert scope.path == module  # the tree, clusters, `/`
        # Each module it is drawn in has its class, called or not (block.heads: ModuleList).
        for index in tree.ancestors(scope.index)[:-1]:
            above = tree.scopes[index]
            assert above.kind == classes[above.path], (name, above.path)
        assert names_read.resolve(name).nodes == (key,)
        around = autograd_viz.to_dot(trace, around=name, depth=1).source
        assert f"within 1 edge of {name}" in around
    # The timeline has a slice for each module a parameter is drawn in.
    events = to_chrome_trace(trace)["traceEvents"]
    slices = {e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "module"}
    assert set(places.values()) <= slices


def test_a_tied_weight_reads_as_named_parameters_names_it() -> None:
    model = Tied()
    first = [
        n for n, p in model.named_parameters() if p is model.get_submodule("lm_head.0.0").weight
    ]
    assert first == ["transformer.wte.weight"]  # PyTorch's own choice: the first name
    trace, _names = recorded(tied)
    (task,) = trace.graph_tasks.values()
    named = [n.leaf.name for n in task.nodes.values() if n.leaf is not None]
    assert "lm_head.0.0.weight" not in named and named.count("transformer.wte.weight") == 1


def test_a_tied_weight_is_found_by_its_other_name_too(tmp_path: Path) -> None:
    trace, _names = recorded(tied)
    path = tmp_path / "tied.jsonl"
    trace.save(path)
    loaded = Trace.load(path)  # the other names are kept in the file
    (task,) = loaded.graph_tasks.values()
    (shared,) = [n for n in task.nodes.values() if n.leaf is not None and n.leaf.aliases]
    assert shared.leaf is not None and shared.leaf.name == "transformer.wte.weight"
    assert shared.leaf.aliases == ("lm_head.0.0.weight",)
    view = from_state(loaded.state_at(len(loaded)))
    names = select.names_of_view(view)
    target = names.resolve("lm_head.0.0.weight")
    assert target.kind == "parameter" and target.nodes == names.resolve(shared.leaf.name).nodes
    assert "lm_head.0.0.weight" not in names.shown()  # not drawn; the inspector says it
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(inspect_node(shared, None, task, False))
    assert "also named lm_head.0.0.weight" in console.file.getvalue()  # type: ignore[attr-defined]
    out = tmp_path / "around.dot"
    assert cli.main(["dot", str(path), "--around", "lm_head.0.0.weight", "-o", str(out)]) == 0
    assert "transformer.wte.weight" in out.read_text()


def test_around_on_the_command_line_takes_each_name(tmp_path: Path) -> None:
    for case, (make, places) in CASES.items():
        trace, _names = recorded(make)
        path = tmp_path / f"{case}.jsonl"
        trace.save(path)
        for name in places:
            out = tmp_path / "around.dot"
            assert cli.main(["dot", str(path), "--around", name, "-o", str(out)]) == 0, name
            assert name in out.read_text()


@pytest.mark.parametrize(
    ("case", "name", "leaf"),
    [
        ("stacked", "block.heads.2.weight", "block.heads.2.weight"),
        ("tied", "transformer.wte.weight", "transformer.wte.weight"),
        ("tied", "lm_head.0.0.weight", "transformer.wte.weight"),
        ("hooked", "inner.c.weight", "inner.c.weight"),
    ],
)
def test_find_takes_each_name_in_the_tui(case: str, name: str, leaf: str) -> None:
    trace, _names = recorded(CASES[case][0])
    (task,) = trace.graph_tasks.values()
    app = replay_app(trace)

    async def actions(pilot: Any) -> None:
        selected = await find_in_tree(pilot, name)
        assert selected is not None
        info = task.nodes[selected]
        assert info.leaf is not None and info.leaf.name == leaf
        assert f"parameter {name}" in status(app)

    run_app(app, actions, size=(120, 40))


@pytest.mark.parametrize("case", sorted(CASES))
def test_recording_changes_no_gradient(case: str) -> None:
    make = CASES[case][0]

    def grads(watch: bool) -> dict[str, Any]:
        torch.manual_seed(0)
        model, x = make()
        if watch:
            with autograd_viz.record():
                model(x).sum().backward()
        else:
            model(x).sum().backward()
        return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    plain, watched = grads(False), grads(True)
    assert plain.keys() == watched.keys() and plain
    for name, grad in plain.items():
        assert torch.equal(grad, watched[name]), name


def test_names_keep_no_model_or_parameter_alive() -> None:
    refs: list[weakref.ref[Any]] = []

    def step() -> Trace:
        model, x = stacked()
        refs.append(weakref.ref(model))
        refs.extend(weakref.ref(p) for p in model.parameters())
        with autograd_viz.record() as trace:
            model(x).sum().backward()
        return trace

    trace = step()
    gc.collect()
    assert all(ref() is None for ref in refs), "the names keep no parameter alive"
    (task,) = trace.graph_tasks.values()
    assert any(
        n.leaf is not None and n.leaf.name == "block.heads.1.weight" for n in task.nodes.values()
    )
