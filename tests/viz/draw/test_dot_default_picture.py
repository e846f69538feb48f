"""The default picture of a chain-shaped model is about a page tall (Note [A picture a page
tall] in autograd_viz/draw/model/showing.py).

Sixteen unlike blocks one after the other, each three modules deep, fit the box
budget opened five levels deep: a column of boxes many pages tall. By default
the picture goes only as deep as keeps it about ``MAX_HEIGHT`` points tall; a
level asked for still opens as deep as asked.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import autograd_viz
import engine
from autograd_viz.draw.model import showing
from autograd_viz.draw.model.graph_view import GraphView, from_state
from autograd_viz.draw.model.options import ViewOptions
from autograd_viz.draw.model.showing import MAX_HEIGHT, fitting_level
from autograd_viz.draw.model.tree import MAX_BOXES, ModuleTree
from autograd_viz.draw.render import dot
from autograd_viz.trace import Trace
from tests.viz.captions import check_notices
from tests.viz.dotting import needs_dot

BLOCKS = 16


def chain_trace(blocks: int = BLOCKS) -> Trace:
    """``net.features.{i}`` blocks, each ``conv`` (its own width), ``norm`` and ``act``."""
    rng = np.random.default_rng(2)
    widths = [2 + i % 5 for i in range(blocks + 1)]
    x = engine.tensor(rng.standard_normal((1, widths[0])), requires_grad=True, name="x")
    with engine.scope("net", kind="Net"), engine.scope("features", kind="Sequential"):
        for i in range(blocks):
            name = f"net.features.{i}"
            w = engine.tensor(
                rng.standard_normal((widths[i], widths[i + 1])),
                requires_grad=True,
                name=f"{name}.conv.weight",
            )
            scale = engine.tensor(
                np.ones(widths[i + 1]), requires_grad=True, name=f"{name}.norm.weight"
            )
            with engine.scope(str(i), kind=f"Block{i % 4}"):
                with engine.scope("conv", kind="Conv"):
                    x = x @ w
                with engine.scope("norm", kind="Norm"):
                    x = x * scale
                with engine.scope("act", kind="Act"):
                    x = x.tanh()
    with autograd_viz.record() as trace:
        x.sum().backward()
    return trace


def _view(trace: Trace) -> GraphView:
    return from_state(trace.state_at(len(trace)))


def test_the_default_level_is_the_deepest_a_page_tall_within_the_budget() -> None:
    view = _view(chain_trace())
    tree = ModuleTree.of_view(view)
    by_boxes = tree.default_level(MAX_BOXES)
    level = fitting_level(view, tree)
    assert 1 <= level < by_boxes  # the budget alone would open the blocks' insides
    picture = showing.show(view)
    assert f"drawn by module (level {level})" in " ".join(picture.notices)
    check_notices(view, picture)
    # A level asked for opens as deep as asked.
    deep = showing.show(view, ViewOptions(level=by_boxes))
    assert len(deep.clusters) > len(picture.clusters) and len(deep.nodes) > len(picture.nodes)


def test_a_short_model_still_opens_as_deep_as_the_budget_allows() -> None:
    view = _view(chain_trace(blocks=2))
    tree = ModuleTree.of_view(view)
    assert fitting_level(view, tree) == tree.default_level(MAX_BOXES)


def _size(svg: Path) -> tuple[float, float]:
    head = svg.read_text()[:2000]
    found = re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', head)
    assert found is not None
    return float(found.group(1)), float(found.group(2))


@needs_dot
def test_the_default_drawing_is_a_page_tall_and_at_most_five_times_as_tall_as_wide(
    tmp_path: Path,
) -> None:
    trace = chain_trace()
    out = tmp_path / "chain.svg"
    dot.save(autograd_viz.to_dot(trace), out)
    width, height = _size(out)
    assert height <= MAX_HEIGHT and height <= 5 * width
    view = _view(trace)
    level = ModuleTree.of_view(view).default_level(MAX_BOXES)
    deep = tmp_path / "deep.svg"
    dot.save(autograd_viz.to_dot(trace, level=level, leaves=True), deep)
    assert _size(deep)[1] > MAX_HEIGHT  # what the budget alone drew, every call a row
    # Each block's norm and activation drawn in its conv's box (Note [A small call joins its
    # neighbour]), the blocks opened that deep are a page tall.
    joined = tmp_path / "joined.svg"
    dot.save(autograd_viz.to_dot(trace, level=level), joined)
    assert _size(joined)[1] <= MAX_HEIGHT


def test_a_norm_and_an_activation_join_the_conv_before_them_and_still_read_back() -> None:
    trace = chain_trace()
    view = _view(trace)
    level = ModuleTree.of_view(view).default_level(MAX_BOXES)
    picture = showing.show(view, ViewOptions(level=level), represent=True)
    check_notices(view, picture)
    boxes = {n.box.name: n.box for n in picture.nodes.values() if n.box is not None}
    conv = boxes["net.features.3.conv"]
    assert conv.joined == (("norm", "Norm"), ("act", "Act"))
    assert "net.features.3.norm" not in boxes and "net.features.3.act" not in boxes
    assert len(conv.scopes) == 3 and conv.summary.nodes == len(conv.members)
    source = autograd_viz.to_dot(trace, level=level).source
    assert "+ norm <I>Norm</I>, act <I>Act</I>" in source
    # Typed back, the joined call's name is found and drawn as itself.
    near = showing.show(view, ViewOptions(around="net.features.3.act", depth=1))
    assert any(
        n.info.scope and n.info.scope[-1][0] == "net.features.3.act" for n in near.nodes.values()
    )
    check_notices(view, near)
    # Without joins (``--leaves``, the TUI), each is drawn as itself.
    apart = showing.show(view, ViewOptions(level=level))
    assert not any(n.box is not None and n.box.joined for n in apart.nodes.values())
    assert "net.features.3.act" in {c.name for c in apart.clusters.values()}
