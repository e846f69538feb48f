"""A view's nodes and edges are values: no field changes once built, a changed one is new."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import autograd_viz
import engine
from autograd_viz.draw.model import showing
from autograd_viz.draw.model.graph_view import GraphView, ViewEdge, ViewNode, from_state


def _view() -> GraphView:
    w = engine.tensor(np.eye(3) * 0.5, requires_grad=True, name="w")
    h = engine.tensor(np.ones((1, 3)), requires_grad=True, name="h0")
    for _ in range(3):
        with engine.scope("cell", kind="Cell"):
            h = (h @ w).tanh()
    with autograd_viz.record() as trace:
        h.sum().backward()
    return from_state(trace.state_at(len(trace) // 2))


def test_nodes_and_edges_of_a_view_refuse_changes() -> None:
    view = _view()
    node = next(iter(view.nodes.values()))
    edge = view.edges[0]
    assert type(node) is ViewNode and type(edge) is ViewEdge
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.status = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        edge.count = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del node.key
    with pytest.raises(AttributeError):
        node.extra = 1  # type: ignore[attr-defined]


def test_a_changed_node_or_edge_is_a_new_value() -> None:
    view = _view()
    edge = view.edges[0]
    wider = dataclasses.replace(edge, count=edge.count + 1)
    assert type(wider) is ViewEdge and wider.count == edge.count + 1 and wider != edge
    assert dataclasses.replace(wider, count=edge.count) == edge
    with pytest.raises(dataclasses.FrozenInstanceError):
        wider.count = 1
    built = ViewNode("k", next(iter(view.nodes.values())).info, 1, None, 0)
    assert built.slots == () and built.box is None and not built.non_finite
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.remaining = 1
    # The boxes of the module view are values too.
    picture = showing.module_view(view, level=0)
    box = next(n for n in picture.nodes.values() if n.box is not None)
    assert type(box) is ViewNode
    with pytest.raises(dataclasses.FrozenInstanceError):
        box.box = None
