"""The default picture of two CNN shapes a page tall: a ConvNeXt's blocks drawn, a MobileNet's
norms and activations in their convs' boxes (Notes [A fold is drawn as a stack] in
autograd_viz/draw/model/stacks.py and [A small call joins its neighbour] in joins.py).

The models are small stand-ins built here from ``torch.nn`` alone, wired as timm's
``convnext_atto`` and torchvision's ``mobilenet_v3_small`` are (the real ones, where timm or
torchvision is installed, are drawn by ``benchmarks/pictures_vs_torchview.py``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import autograd_viz
from autograd_viz.draw.model import showing
from autograd_viz.draw.model.graph_view import GraphView, from_state
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.model.showing import MAX_HEIGHT
from autograd_viz.draw.render import dot
from autograd_viz.trace import Trace
from tests.viz.captions import check_notices, check_stacks
from tests.viz.dotting import needs_dot

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = pytest.importorskip("torch")
    nn = torch.nn

pytestmark = pytest.mark.oracle


class LayerNorm2d(nn.LayerNorm):
    """timm's channels-first LayerNorm: a permute, the norm, a permute back."""

    def forward(self, x: Any) -> Any:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvMlp(nn.Module):
    """Two 1x1 convs and a GELU between them."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(width, 4 * width, 1)
        self.act = nn.GELU()
        self.fc2 = nn.Conv2d(4 * width, width, 1)

    def forward(self, x: Any) -> Any:
        return self.fc2(self.act(self.fc1(x)))


class ConvNeXtBlock(nn.Module):
    """7x7 depthwise conv, norm, MLP, layer scale, residual (timm's ``conv_mlp`` form, as
    ``convnext_atto`` builds it)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv_dw = nn.Conv2d(width, width, 7, padding=3, groups=width)
        self.norm = LayerNorm2d(width)
        self.mlp = ConvMlp(width)
        self.gamma = nn.Parameter(torch.full((width,), 1e-6))

    def forward(self, x: Any) -> Any:
        y = self.mlp(self.norm(self.conv_dw(x)))
        return x + y.mul(self.gamma.reshape(1, -1, 1, 1))


class Stage(nn.Module):
    def __init__(self, inp: int, out: int, depth: int) -> None:
        super().__init__()
        self.downsample = (
            nn.Sequential(LayerNorm2d(inp), nn.Conv2d(inp, out, 2, stride=2))
            if inp != out
            else nn.Identity()
        )
        self.blocks = nn.Sequential(*[ConvNeXtBlock(out) for _ in range(depth)])

    def forward(self, x: Any) -> Any:
        return self.blocks(self.downsample(x))


class ConvNeXt(nn.Module):
    """convnext_atto's shape (depths 2, 2, 6, 2) at a quarter of its widths."""

    def __init__(self, widths: tuple[int, ...] = (8, 16, 32, 64)) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 4, stride=4), LayerNorm2d(widths[0]))
        depths = (2, 2, 6, 2)
        self.stages = nn.Sequential(
            *[Stage(widths[max(i - 1, 0)], widths[i], depths[i]) for i in range(4)]
        )
        self.norm = LayerNorm2d(widths[-1])
        self.fc = nn.Linear(widths[-1], 10)

    def forward(self, x: Any) -> Any:
        return self.fc(self.norm(self.stages(self.stem(x))).mean((2, 3)))


class ConvNormAct(nn.Sequential):
    """torchvision's Conv2dNormActivation: a conv, a BatchNorm, an activation (or none)."""

    def __init__(self, inp: int, out: int, k: int, stride: int, groups: int, act: Any) -> None:
        layers = [
            nn.Conv2d(inp, out, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(out),
        ]
        super().__init__(*layers, *([act()] if act is not None else []))


class SqueezeExcitation(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(width, max(width // 4, 2), 1)
        self.relu = nn.ReLU()
        self.fc2 = nn.Conv2d(max(width // 4, 2), width, 1)
        self.scale = nn.Hardsigmoid()

    def forward(self, x: Any) -> Any:
        return x * self.scale(self.fc2(self.relu(self.fc1(x.mean((2, 3), keepdim=True)))))


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, k: int, expand: int, out: int, se: bool, act: Any, s: int):
        super().__init__()
        layers: list[nn.Module] = []
        if expand != inp:
            layers.append(ConvNormAct(inp, expand, 1, 1, 1, act))
        layers.append(ConvNormAct(expand, expand, k, s, expand, act))
        if se:
            layers.append(SqueezeExcitation(expand))
        layers.append(ConvNormAct(expand, out, 1, 1, 1, None))
        self.block = nn.Sequential(*layers)
        self.residual = s == 1 and inp == out

    def forward(self, x: Any) -> Any:
        y = self.block(x)
        return x + y if self.residual else y


# mobilenet_v3_small's eleven blocks (kernel, expanded, out, SE, activation, stride), widths
# divided by four.
SMALL = [
    (3, 4, 4, True, "RE", 2),
    (3, 18, 6, False, "RE", 2),
    (3, 22, 6, False, "RE", 1),
    (5, 24, 10, True, "HS", 2),
    (5, 60, 10, True, "HS", 1),
    (5, 60, 10, True, "HS", 1),
    (5, 30, 12, True, "HS", 1),
    (5, 36, 12, True, "HS", 1),
    (5, 72, 24, True, "HS", 2),
    (5, 144, 24, True, "HS", 1),
    (5, 144, 24, True, "HS", 1),
]


class MobileNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        acts = {"RE": nn.ReLU, "HS": nn.Hardswish}
        layers: list[nn.Module] = [ConvNormAct(3, 4, 3, 2, 1, nn.Hardswish)]
        width = 4
        for k, expand, out, se, act, stride in SMALL:
            layers.append(InvertedResidual(width, k, expand, out, se, acts[act], stride))
            width = out
        layers.append(ConvNormAct(width, 144, 1, 1, 1, nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(144, 64), nn.Hardswish(), nn.Dropout(0.0), nn.Linear(64, 10)
        )

    def forward(self, x: Any) -> Any:
        return self.classifier(self.features(x).mean((2, 3)))


def _trace(model: nn.Module, size: int) -> Trace:
    torch.manual_seed(0)
    model.train()
    with autograd_viz.record() as trace:
        model(torch.randn(2, 3, size, size)).sum().backward()
    return trace


def _convnext() -> Trace:
    torch.manual_seed(0)
    return _trace(ConvNeXt(), 64)


def _mobilenet() -> Trace:
    torch.manual_seed(0)
    return _trace(MobileNet(), 64)


def _view(trace: Trace) -> GraphView:
    return from_state(trace.state_at(len(trace)))


def _size(svg: Path) -> tuple[float, float]:
    found = re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', svg.read_text()[:2000])
    assert found is not None
    return float(found.group(1)), float(found.group(2))


def test_convnexts_default_picture_draws_each_stages_block_once_as_a_stack() -> None:
    view = _view(_convnext())
    picture = showing.show(view, represent=True)
    check_notices(view, picture)
    assert check_stacks(view, picture) == 4
    stacks = {c.stack.name: c.stack.count for c in picture.clusters.values() if c.stack}
    assert stacks == {f"stages.{i}.blocks.{{0..{n - 1}}}": n for i, n in enumerate((2, 2, 6, 2))}
    boxes = {n.box.name: n.box for n in picture.nodes.values() if n.box is not None}
    # The block's inside: its 7x7 depthwise conv with the norm joined, its MLP.
    for stage in range(4):
        conv = boxes[f"stages.{stage}.blocks.0.conv_dw"]
        assert conv.joined == (("norm", "LayerNorm2d"),)
        assert f"stages.{stage}.blocks.0.mlp" in boxes
    # A downsample's norm is drawn in its conv's box; the frame around them is left out.
    assert boxes["stages.1.downsample.1"].joined == (("0", "LayerNorm2d"),)
    assert "stages.1.downsample" not in {c.name for c in picture.clusters.values()}
    # The layer scale is counted in the block's label, not drawn.
    drawn = [c for c in picture.clusters.values() if c.stack is not None]
    assert all(c.parameters == ("gamma",) for c in drawn)


def test_mobilenets_norms_and_activations_join_their_convs() -> None:
    view = _view(_mobilenet())
    picture = showing.show(view, represent=True)
    check_notices(view, picture)
    check_stacks(view, picture)
    joined = [n.box for n in picture.nodes.values() if n.box is not None and n.box.joined]
    assert joined
    # A conv with its BatchNorm and Hardswish: one box, named by the conv.
    stem = next(b for b in joined if b.name == "features.0.0")
    assert stem.joined == (("1", "BatchNorm2d"), ("2", "Hardswish"))
    # Opened a level deeper, a block's expanding conv takes in its BatchNorm and ReLU.
    deeper = showing.show(view, ViewOptions(level=5), represent=True)
    check_notices(view, deeper)
    boxes = {n.box.name: n.box for n in deeper.nodes.values() if n.box is not None}
    assert boxes["features.2.block.0.0"].joined == (("1", "BatchNorm2d"), ("2", "ReLU"))
    # Typed back, a joined activation is found.
    near = showing.show(view, ViewOptions(around="features.0.2", depth=1))
    assert any(n.info.scope and n.info.scope[-1][0] == "features.0.2" for n in near.nodes.values())


@needs_dot
@pytest.mark.parametrize("make", [_convnext, _mobilenet], ids=["convnext", "mobilenet"])
def test_the_default_picture_is_a_page_tall_and_at_most_five_times_as_tall_as_wide(
    make: Any, tmp_path: Path
) -> None:
    out = tmp_path / "model.svg"
    dot.save(autograd_viz.to_dot(make()), out)
    width, height = _size(out)
    assert height <= MAX_HEIGHT and height <= 5 * width, (width, height)


@needs_dot
def test_real_convnext_atto_default_picture_is_a_page_tall(tmp_path: Path) -> None:
    timm = pytest.importorskip("timm")
    model = timm.create_model("convnext_atto", pretrained=False, num_classes=10)
    trace = _trace(model, 64)
    out = tmp_path / "convnext.svg"
    dot.save(autograd_viz.to_dot(trace), out)
    width, height = _size(out)
    assert height <= MAX_HEIGHT and height <= 5 * width, (width, height)
    source = autograd_viz.to_dot(trace).source
    assert "stages.2.blocks.{0..5}</B> × 6" in source and "conv_dw" in source
