"""Folds and captions on ``torch.nn`` models recorded by the bridge (Note [Alike calls]).

A MobileNetV3-like inverted residual holds a 1×1 expanding conv and a 5×5
depthwise conv, each a ``Conv2d, BatchNorm2d, Hardswish`` of one class at one
width: their gradients have one shape, their weights do not, so they never
fold; blocks of one configuration still do. Every caption of every picture of
every model these tests build is checked against the picture
(tests/viz/captions.py); real torchvision and timm models too, where installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import autograd_viz
from autograd_viz.draw.model import showing
from autograd_viz.draw.model.graph_view import GraphView, from_state
from autograd_viz.draw.model.showing import MAX_HEIGHT
from autograd_viz.draw.model.tree import ModuleTree
from autograd_viz.draw.render import dot
from autograd_viz.trace import Trace
from tests.viz.captions import check_pictures, names_to_try
from tests.viz.dotting import needs_dot

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = pytest.importorskip("torch")
    nn = torch.nn

from tests.viz.draw.test_modules_torch import MODELS as NN_MODELS

pytestmark = pytest.mark.oracle


class ConvNormActivation(nn.Sequential):
    """torchvision's ``Conv2dNormActivation``: conv, batch norm, hardswish."""

    def __init__(self, inp: int, out: int, kernel: int, groups: int = 1) -> None:
        super().__init__(
            nn.Conv2d(inp, out, kernel, padding=kernel // 2, groups=groups, bias=False),
            nn.BatchNorm2d(out),
            nn.Hardswish(),
        )


class InvertedResidual(nn.Module):
    """An expanding 1×1 conv, then a depthwise ``kernel``×``kernel`` one, then a projection."""

    def __init__(self, width: int, expanded: int, kernel: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            ConvNormActivation(width, expanded, 1),
            ConvNormActivation(expanded, expanded, kernel, groups=expanded),
            nn.Sequential(nn.Conv2d(expanded, width, 1, bias=False), nn.BatchNorm2d(width)),
        )

    def forward(self, x: Any) -> Any:
        return x + self.block(x)


def mobilenet_like() -> Trace:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        InvertedResidual(8, 24, 5),
        InvertedResidual(8, 24, 5),
        InvertedResidual(8, 24, 3),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 2),
    )
    with autograd_viz.record() as trace:
        model(torch.randn(2, 3, 6, 6)).sum().backward()
    return trace


def _view(trace: Trace, step: int | None = None) -> GraphView:
    return from_state(trace.state_at(len(trace) if step is None else step))


def test_a_1x1_and_a_5x5_conv_of_one_width_do_not_fold_their_blocks_do() -> None:
    view = _view(mobilenet_like())
    tree = ModuleTree.of_view(view)
    folds = {g.name: g.count for g in tree.groups}
    # Blocks 1 and 2 are one configuration (5×5); block 3's depthwise conv is 3×3.
    assert folds == {"{1..2}": 2}
    names = {s.name for s in tree.scopes}
    assert {"1.block.0", "1.block.1", "3.block.0", "3.block.1"} <= names


def _real(name: str) -> Callable[[], Trace]:
    """A real model from torchvision or timm, if installed (its compiled ops are not needed)."""

    def build() -> Trace:
        package = "torchvision" if name == "mobilenet_v3_small" else "timm"
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"{package} is not installed")
        try:
            lib = torch.library.Library("torchvision", "DEF")
            lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        except RuntimeError:
            pass  # defined already, or torchvision's own ops loaded
        torch.manual_seed(0)
        module = importlib.import_module(package)
        if name == "mobilenet_v3_small":
            model = module.models.mobilenet_v3_small(weights=None)
        else:
            model = module.create_model(name, pretrained=False)
        with autograd_viz.record() as trace:
            model(torch.randn(2, 3, 64, 64)).sum().backward()
        return trace

    return build


MODELS: dict[str, Callable[[], Trace]] = {
    **NN_MODELS,
    "mobilenet-like": mobilenet_like,
    "mobilenet_v3_small": _real("mobilenet_v3_small"),
    "convnext_atto": _real("convnext_atto"),
}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_caption_says_what_its_picture_shows(model: str) -> None:
    trace = MODELS[model]()
    for step in (len(trace) // 2, len(trace)):
        view = _view(trace, step)
        check_pictures(view)
        check_pictures(view, represent=True)  # dot's default: each fold's representative open
        for name in names_to_try(view):
            check_pictures(view, around=name, depth=2)
            check_pictures(view, expand=[name])
            check_pictures(view, expand=[name], represent=True)


def test_mobilenet_v3_small_never_folds_unlike_convs() -> None:
    view = _view(_real("mobilenet_v3_small")())
    tree = ModuleTree.of_view(view)
    for group in tree.groups:
        assert ".block." not in group.name, group.name  # an expand and a depthwise conv


@needs_dot
@pytest.mark.parametrize("name", ["mobilenet_v3_small", "convnext_atto"])
def test_a_real_chain_models_default_picture_is_a_page_tall(name: str, tmp_path: Path) -> None:
    out = tmp_path / "model.svg"
    dot.save(autograd_viz.to_dot(_real(name)()), out)
    head = out.read_text()[:2000]
    found = re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', head)
    assert found is not None
    width, height = float(found.group(1)), float(found.group(2))
    assert height <= MAX_HEIGHT and height <= 5 * width


def test_a_real_vits_default_picture_stacks_its_blocks_and_opens_one_with_attention_and_mlp() -> (
    None
):
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed")
    import timm

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32)
    with autograd_viz.record() as trace:
        model(torch.randn(1, 3, 32, 32)).sum().backward()
    view = _view(trace, len(trace))
    picture = showing.show(view, represent=True)
    opened = {c.name for c in picture.clusters.values()}
    assert {"blocks.0", "blocks.0.attn", "blocks.0.mlp"} <= opened
    # The twelve blocks are one stack, the first drawn inside; no box for the others.
    stacks = {
        c.stack.name: (c.stack.count, c.stack.drawn) for c in picture.clusters.values() if c.stack
    }
    assert stacks == {"blocks.{0..11}": (12, "blocks.0")}
    assert not any(n.box and n.box.count > 1 for n in picture.nodes.values())
    check_pictures(view, represent=True)
