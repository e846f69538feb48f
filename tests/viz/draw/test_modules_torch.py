"""The module view on real architectures built from ``torch.nn`` alone, recorded by the bridge."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import autograd_viz
from autograd_viz.cli import main
from autograd_viz.draw.model import showing, totals
from autograd_viz.draw.model.graph_view import GraphView, from_state
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.model.targets import Names, node_name
from autograd_viz.draw.model.tree import MAX_BOXES, ModuleTree
from autograd_viz.trace import Trace
from tests.viz.dotting import needs_dot, svg_groups, svg_tree

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = pytest.importorskip("torch")
    nn = torch.nn

pytestmark = pytest.mark.oracle


def _record(model: object, *inputs: object) -> Trace:
    with autograd_viz.record() as trace:
        model(*inputs).sum().backward()  # type: ignore[operator]
    return trace


def transformer_encoder() -> Trace:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=12, enable_nested_tensor=False)
    return _record(model, torch.randn(2, 5, 16, requires_grad=True))


class Block(nn.Module):
    """A ResNet basic block: two 3x3 convolutions, a shortcut that downsamples when asked."""

    def __init__(self, inp: int, out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inp, out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.downsample = (
            nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))
            if stride != 1 or inp != out
            else None
        )

    def forward(self, x: Any) -> Any:
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (x if self.downsample is None else self.downsample(x)))


def resnet_stack() -> Trace:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.Sequential(Block(4, 4), Block(4, 4), Block(4, 4)),
        nn.Sequential(Block(4, 8, 2), Block(8, 8), Block(8, 8), Block(8, 8)),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 2),
    )
    return _record(model, torch.randn(2, 3, 8, 8))


class Unrolled(nn.Module):
    def __init__(self, steps: int) -> None:
        super().__init__()
        self.cell = nn.GRUCell(3, 5)
        self.steps = steps

    def forward(self, x: Any) -> Any:
        h = torch.zeros(x.shape[1], 5)
        for t in range(self.steps):
            h = self.cell(x[t], h)
        return h


def unrolled_gru() -> Trace:
    torch.manual_seed(0)
    return _record(Unrolled(10), torch.randn(10, 2, 3, requires_grad=True))


class Shared(nn.Module):
    """One module used at two places, with another between them."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Linear(4, 4)
        self.middle = nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        return self.shared(torch.tanh(self.middle(self.shared(x))))


def shared_module() -> Trace:
    torch.manual_seed(0)
    return _record(Shared(), torch.randn(2, 4))


MODELS: dict[str, Callable[[], Trace]] = {
    "transformer": transformer_encoder,
    "resnet": resnet_stack,
    "gru": unrolled_gru,
    "shared": shared_module,
}


def _view(trace: Trace, step: int | None = None) -> GraphView:
    return from_state(trace.state_at(len(trace) if step is None else step))


def _groups(view: GraphView) -> dict[str, int]:
    return {g.name: g.count for g in ModuleTree.of_view(view).groups}


def test_twelve_encoder_layers_fold_and_the_picture_fits() -> None:
    view = _view(transformer_encoder())
    tree = ModuleTree.of_view(view)
    assert _groups(view) == {"layers.{0..11}": 12}
    assert {tree.scopes[i].kind for i in tree.groups[0].scopes} == {"TransformerEncoderLayer"}
    picture = showing.module_view(view)
    assert len(picture.nodes) + len(picture.boxes) <= MAX_BOXES
    (box,) = [n.box for n in picture.nodes.values() if n.box is not None]
    assert box.count == 12 and box.summary.nodes == sum(
        tree.scopes[i].size for i in tree.groups[0].scopes
    )
    assert box.kind == "TransformerEncoderLayer"
    # Opened on request: every node of layers.3 drawn, the other layers unfolded beside it.
    opened = showing.module_view(view, expand=["layers.3"])
    (layer3,) = [s.index for s in tree.scopes if s.name == "layers.3"]
    assert set(tree.members(layer3)) <= set(opened.nodes)
    shown = {n.box.name for n in opened.nodes.values() if n.box is not None}
    shown |= {c.name for c in opened.clusters.values()}
    assert {f"layers.{i}" for i in range(12)} <= shown


def test_a_resnet_stages_blocks_fold_after_the_one_that_downsamples() -> None:
    view = _view(resnet_stack())
    groups = _groups(view)
    # Stage 1's first block takes the stem's output, stage 2's first block downsamples.
    assert groups["2.{1..3}"] == 3
    assert any(name.startswith("1.") for name in groups)
    names = Names(((k, n.info) for k, n in view.nodes.items()), ModuleTree.of_view(view))
    assert names.resolve("2.0.downsample").kind == "module"
    assert names.resolve("2.0.conv1.weight").kind == "parameter"


def test_an_unrolled_gru_cell_folds_its_calls() -> None:
    trace = unrolled_gru()
    groups = _groups(_view(trace))
    assert groups == {"cell:{0..9}": 10}
    assert "cell:{0..9}</B> × 10" in autograd_viz.to_dot(trace, leaves=True).source
    # A fold of calls that hold no calls is one box by default too: opened, a call shows
    # nodes, not structure (Note [A fold is drawn as a stack]).
    default = autograd_viz.to_dot(trace).source
    assert "cell:{0..9}</B> × 10" in default and "cell:{1..9}" not in default


def test_a_module_used_at_two_places_has_two_calls_that_do_not_fold() -> None:
    view = _view(shared_module())
    tree = ModuleTree.of_view(view)
    names = sorted(s.name for s in tree.scopes)
    assert "shared:0" in names and "shared:1" in names and "middle" in names
    assert not tree.groups
    both = Names(((k, n.info) for k, n in view.nodes.items()), tree).resolve("shared")
    assert len(both.scopes) == 2 and both.kind == "module"


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_shown_name_is_read_back_and_boxes_sum_their_nodes(model: str) -> None:
    trace = MODELS[model]()
    steps = [0, len(trace) // 3, len(trace) // 2, len(trace)]
    for step in steps:
        view = _view(trace, step)
        tree = ModuleTree.of_view(view)
        names = Names(((k, n.info) for k, n in view.nodes.items()), tree)
        picture = showing.module_view(view)
        assert len(picture.nodes) + len(picture.boxes) <= MAX_BOXES
        shown = [n.box.name if n.box else node_name(n.info) for n in picture.nodes.values()]
        shown += [c.name for c in picture.clusters.values()]
        shown += [b.title for b in picture.boxes if b.kind == "leaf"]
        for name in shown:
            assert names.resolve(name).nodes, name
        for node in picture.nodes.values():
            if node.box is None:
                continue
            members = [view.nodes[k] for k in node.box.members]
            summary = node.box.summary
            assert summary.nodes == len(members)
            assert summary.remaining == sum(m.remaining for m in members)
            assert summary.dependencies == sum(m.info.dependencies for m in members)
            keys = set(node.box.members)
            into = [e for e in view.edges if e.head in keys and e.tail not in keys]
            assert summary.inputs == len(into)
            assert summary.waiting_inputs == sum(not e.delivered and not e.pruned for e in into)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_expand_all_is_todays_full_drawing(model: str) -> None:
    trace = MODELS[model]()
    stripped = Trace(
        trace.header,
        {
            gid: replace(
                info, modules={}, nodes={k: replace(n, scope=()) for k, n in info.nodes.items()}
            )
            for gid, info in trace.graph_tasks.items()
        },
        list(trace.events),
    )
    middle = len(trace) // 2
    for step in (middle, len(trace)):
        full = autograd_viz.to_dot(trace, step=step, expand="all").source
        assert full == autograd_viz.to_dot(stripped, step=step).source


def test_around_a_parameter_name_the_picture_shows() -> None:
    trace = transformer_encoder()
    graph = autograd_viz.to_dot(trace, around="layers.3.self_attn.in_proj_weight", depth=2).source
    assert "layers.3.self_attn.in_proj_weight" in graph
    assert "within 2 edges of layers.3.self_attn.in_proj_weight" in graph


@needs_dot
def test_the_default_picture_of_twelve_layers_fits_a_screens_width() -> None:
    root = svg_tree(autograd_viz.to_dot(transformer_encoder()))
    width = float(root.get("width", "0").removesuffix("pt"))
    assert 0 < width <= 1440  # points: 1,920 pixels at 96 per inch


def _width(trace: Trace, **options: Any) -> float:
    root = svg_tree(autograd_viz.to_dot(trace, **options))
    return float(root.get("width", "0").removesuffix("pt"))


@needs_dot
def test_the_default_picture_of_a_resnet_stack_fits_a_screens_width() -> None:
    # A stage's blocks drawn side by side, a diagonal staircase, made it 2,442 points wide.
    trace = resnet_stack()
    source = autograd_viz.to_dot(trace, leaves=True).source
    assert "2.0.conv1.weight" in source and "2.0.downsample.0.weight" in source
    assert 0 < _width(trace) <= 1440 and 0 < _width(trace, leaves=True) <= 1440
    # Nothing is hidden to fit: the full drawing is still there on request, as wide as it is.
    assert "style=invis" not in autograd_viz.to_dot(trace, expand="all").source


@needs_dot
def test_a_big_opened_picture_is_stacked_and_fits_a_screens_width() -> None:
    # The twelve layers opened (over 600 nodes) were left unstacked, 1,997 points wide: stacked,
    # invisible edges doubling drawn ones made Graphviz 2.43's dot crash on such pictures.
    trace = transformer_encoder()
    graph = autograd_viz.to_dot(trace, expand=[f"layers.{i}" for i in range(12)])  # each call whole
    assert "style=invis" in graph.source
    root = svg_tree(graph)
    assert len(svg_groups(root, "node")) > 600
    assert 0 < float(root.get("width", "0").removesuffix("pt")) <= 1440


def test_the_readmes_encoder_mid_backward_opens_one_layer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = Path(__file__).resolve().parents[3] / "examples" / "torch_encoder.py"
    out = tmp_path / "encoder.dot"
    assert main(["dot", str(script), "--step", "1500", "-o", str(out)]) == 0
    assert "module boxes" in capsys.readouterr().out
    source = out.read_text()
    # One stack of the twelve layers, the one being worked on drawn inside; its label counts
    # the later layers done and the earlier ones not started.
    assert "<B>layers.{0..11}</B> × 12 <I>TransformerEncoderLayer</I>" in source
    (opened,) = re.findall(r"drawn: layers\.(\d+) · \d+ nodes · topo \S+ · running", source)
    layer = int(opened)
    assert f"{layer} not started · 1 running · {11 - layer} done" in source
    assert "calls folded" not in source  # no box of layers beside the stack


def _step_inside(trace: Trace, module: str) -> int:
    """The step after the first node made inside ``module`` starts running."""
    view = _view(trace)
    tree = ModuleTree.of_view(view)
    inside = {
        (n.graph_task, n.info.id)
        for k, n in view.nodes.items()
        if k in tree.scope_of and tree.scopes[tree.scope_of[k]].name.startswith(module + ".")
    }
    return next(
        e.index + 1
        for e in trace.events
        if e.kind == "node_start" and (e.graph_task, e.node_id) in inside
    )


def test_at_a_step_inside_layer_6_only_it_opens_and_the_other_layers_are_one_box() -> None:
    trace = transformer_encoder()
    step = _step_inside(trace, "layers.6")
    view = _view(trace, step)
    picture = showing.show(view)
    # The other layers: one box of the done ones, one of those not started (Note [A box is
    # one status]), each status true of every layer inside.
    folds = {
        n.box.name: (n.box.count, n.box.summary.status)
        for n in picture.nodes.values()
        if n.box and n.box.count > 1
    }
    assert folds == {
        "layers.{7..11}": (5, showing.BoxStatus.DONE),
        "layers.{0..5}": (6, showing.BoxStatus.NOT_STARTED),
    }
    opened = {c.name for c in picture.clusters.values()}
    assert "layers.6" in opened
    assert not any(re.match(r"layers\.(?!6\b)\d+", name) for name in opened), opened
    running = [k for k in showing.focus_of(view) if k in view.nodes]
    assert running and all(k in picture.nodes for k in running)
    # One layer's inside and a box: no bigger than the picture before the layers ran.
    assert len(picture.nodes) <= 20, len(picture.nodes)
    tree = ModuleTree.of_view(view)
    status = totals.status_of_calls(view, tree)
    for box in [n.box for n in picture.nodes.values() if n.box and n.box.count > 1]:
        assert {status(i) for i in box.scopes} == {box.summary.status}
        assert box.summary.nodes == len(box.members) == sum(tree.scopes[i].size for i in box.scopes)
        assert box.summary.remaining == sum(view.nodes[k].remaining for k in box.members)
    # dot at the step draws layer 6 inside the stack of twelve, whose label counts the same;
    # --expand all still draws every node.
    source = autograd_viz.to_dot(trace, step=step).source
    assert "<B>layers.{0..11}</B> × 12" in source and "drawn: layers.6 " in source
    assert "6 not started · 1 running · 5 done" in source
    everything = showing.show(view, ViewOptions(expand=["all"]))
    assert everything.nodes.keys() == view.nodes.keys() and not everything.clusters


class Wrapper(nn.Module):
    """A transformers ``...ForCausalLM``: its model is its attribute ``model``."""

    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))
        self.head = nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        return self.head(self.model(x))


def test_a_model_named_by_its_class_shows_the_class_once() -> None:
    """Bound to ``model``, one of its own paths, the model is named by its class
    (Note [Model paths]); its frame says ``Wrapper``, not ``Wrapper Wrapper``."""
    torch.manual_seed(0)
    model = Wrapper()
    with autograd_viz.record() as trace:
        model(torch.randn(3, 4)).sum().backward()
    source = autograd_viz.to_dot(trace, expand=["Wrapper"]).source
    assert "<B>Wrapper</B>" in source and "<I>Wrapper</I>" not in source
    assert "<B>model</B>" in source and "<I>Sequential</I>" in source  # other classes shown
