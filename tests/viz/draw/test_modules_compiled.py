"""A ``torch.compile``d model's module tree: each parameter in its module's call.

Inside compiled code no module hook runs, so every node of the backward is made
in the model's one call; the parameters' names still say their modules, and the
tree (``dot``, the TUI's tree view, ``--around``) shows them there (Note
[Parameters of a compiled model] in ``autograd_viz/draw/model/tree.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

import autograd_viz
from autograd_viz.draw.model.graph_view import from_state
from autograd_viz.draw.model.targets import Names
from autograd_viz.draw.model.tree import ModuleTree
from autograd_viz.trace import Trace
from autograd_viz.trace.recording import record
from tests.viz.dotting import needs_dot, svg_tree

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = pytest.importorskip("torch")
    nn = torch.nn
pytest.importorskip("torch._dynamo")

pytestmark = pytest.mark.oracle


class Net(nn.Module):
    """Modules nested two deep, and a parameter of the model itself."""

    def __init__(self) -> None:
        super().__init__()
        self.lin1 = nn.Linear(8, 16)
        self.blocks = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x: Any) -> Any:
        return self.blocks(torch.relu(self.lin1(x))) * self.scale


def _trace(backend: str | None) -> Trace:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Net()
    run = model if backend is None else torch.compile(model, backend=backend)
    with record() as trace:
        run(torch.randn(5, 8)).sum().backward()
    return trace


def _tree(trace: Trace) -> tuple[ModuleTree, dict[str, list[str]]]:
    view = from_state(trace.state_at(len(trace)))
    tree = ModuleTree.of_view(view)
    params = {
        s.name: sorted(
            str(leaf.name) for k in s.nodes if (leaf := view.nodes[k].info.leaf) is not None
        )
        for s in tree.scopes
    }
    return tree, params


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_compiled_models_parameters_are_in_their_modules(backend: str) -> None:
    trace = _trace(backend)
    tree, params = _tree(trace)
    assert params == {
        "model": ["scale"],
        "lin1": ["lin1.bias", "lin1.weight"],
        "blocks": [],
        "blocks.0": ["blocks.0.bias", "blocks.0.weight"],
        "blocks.2": ["blocks.2.bias", "blocks.2.weight"],
    }
    (root,) = tree.roots
    assert tree.scopes[root].name == "model" and tree.scopes[root].kind == "Net"
    (blocks,) = [s for s in tree.scopes if s.name == "blocks"]
    assert sorted(tree.scopes[c].name for c in blocks.children) == ["blocks.0", "blocks.2"]
    # The compiled region's own nodes stay in the model's call.
    view = from_state(trace.state_at(len(trace)))
    assert all(
        view.nodes[k].info.leaf is not None
        for s in tree.scopes
        if s.name != "model"
        for k in s.nodes
    )
    # Every module the tree shows is a name the views take back.
    names = Names(((k, n.info) for k, n in view.nodes.items()), tree)
    assert names.resolve("blocks.0").kind == "module"
    graph = autograd_viz.to_dot(trace, around="blocks.2", depth=1).source
    assert "within 1 edge of blocks.2" in graph


class Deep(nn.Module):
    """Twenty parameters, every one's gradient given by the one compiled backward node."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(16, 32)
        self.blocks = nn.Sequential(
            *[nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32)) for _ in range(4)]
        )
        self.out = nn.Linear(32, 1)

    def forward(self, x: Any) -> Any:
        return self.out(self.blocks(self.inp(x)))


@needs_dot
def test_a_compiled_models_many_parameters_fit_a_screens_width() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.compile(Deep(), backend="aot_eager")
    with record() as trace:
        model(torch.randn(8, 16)).sum().backward()
    graph = autograd_viz.to_dot(trace, leaves=True)  # every Linear open, its parameters drawn
    names = [f"blocks.{i}.{j}.{p}" for i in range(4) for j in (0, 2) for p in ("weight", "bias")]
    assert all(f"<B>{name}</B>" in graph.source for name in names)
    # Twenty AccumulateGrads side by side made it 3,800 points wide; they wrap, module by module.
    width = float(svg_tree(graph).get("width", "0").removesuffix("pt"))
    assert 0 < width <= 1440


def test_a_models_own_modules_keep_the_calls_its_hooks_saw() -> None:
    tree, params = _tree(_trace(None))
    assert params == {
        "model": ["scale"],
        "lin1": ["lin1.bias", "lin1.weight"],
        "blocks": [],
        "blocks.0": ["blocks.0.bias", "blocks.0.weight"],
        "blocks.1": [],
        "blocks.2": ["blocks.2.bias", "blocks.2.weight"],
    }
    assert {s.kind for s in tree.scopes if s.name.startswith("blocks.")} == {"Linear", "Tanh"}


def test_the_tuis_tree_view_shows_a_compiled_models_modules() -> None:
    from textual.pilot import Pilot

    from tests.viz.tui.tuiting import node_list, replay_app, run_app

    app = replay_app(_trace("aot_eager"))

    async def actions(pilot: Pilot[Any]) -> None:
        await pilot.press("v")
        nodes = node_list(app)
        assert nodes.view == "tree"
        headings = [row.heading.split(" · ")[0] for row in nodes.rows if row.node_id is None]
        assert headings == ["model", "lin1", "blocks", "blocks.0", "blocks.2"], headings

    run_app(app, actions, size=(120, 40))


def test_a_compiled_models_parameters_are_in_their_modules_slices_on_the_timeline() -> None:
    """The timeline nests each parameter's ``AccumulateGrad`` in its module's slices, as the
    module tree draws it, not in the model's slice alone."""
    from autograd_viz.timeline import to_chrome_trace

    trace = _trace("aot_eager")
    doc = to_chrome_trace(trace)
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    modules = [e for e in slices if e["cat"] == "module"]

    def span(e: dict[str, Any]) -> tuple[int, int]:
        # In whole nanoseconds, as the trace was timed: two slices that end at the same
        # nanosecond can differ in the last bit of ts + dur in microseconds.
        return round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)

    def around(node: dict[str, Any]) -> list[str]:
        start, end = span(node)
        inside = [m for m in modules if span(m)[0] <= start and end <= span(m)[1]]
        return [m["name"] for m in sorted(inside, key=lambda m: (m["ts"], -m["dur"]))]

    (info,) = trace.graph_tasks.values()
    leaves = {n.id: n.leaf.name for n in info.nodes.values() if n.leaf is not None and n.leaf.name}
    shown = {
        leaves[e["args"]["node_id"]]: around(e)
        for e in slices
        if e["cat"] == "node" and e["args"]["node_id"] in leaves
    }
    assert shown == {
        "scale": ["model"],
        "lin1.weight": ["model", "lin1"],
        "lin1.bias": ["model", "lin1"],
        "blocks.0.weight": ["model", "blocks", "blocks.0"],
        "blocks.0.bias": ["model", "blocks", "blocks.0"],
        "blocks.2.weight": ["model", "blocks", "blocks.2"],
        "blocks.2.bias": ["model", "blocks", "blocks.2"],
    }
    # A slice per stretch of lin1's nodes (Note [Module slices]), each of its call 0.
    lin1 = [m for m in modules if m["name"] == "lin1"]
    assert sum(m["args"]["nodes"] for m in lin1) == 2
    assert {m["args"]["call"] for m in lin1} == {0}
