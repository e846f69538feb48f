"""Nodes that ``make_node`` builds field by field (Note [Bare nodes] in engine.graph)."""

from __future__ import annotations

import pytest

import engine
from engine.graph import Node
from engine.ops._core import make_node
from engine.ops.arithmetic import MulBackward0

_NUMBERED = {"__weakref__", "_id", "sequence_nr", "_next_edges", "topological_nr"}


def _fields(node: Node) -> dict[str, object]:
    return {name: getattr(node, name) for name in Node.__slots__ if name not in _NUMBERED}


def test_a_bare_node_has_every_field_node_init_sets() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    bare = make_node(MulBackward0, x, None)
    called = MulBackward0()
    assert bare is not None and MulBackward0.bare_init
    assert _fields(bare) == _fields(called)
    assert bare.sequence_nr + 1 == called.sequence_nr and bare.node_id != called.node_id
    assert bare.topological_nr == 1 and bare.next_functions[1] == (None, 0)


def test_a_bare_node_keeps_the_forward_stack_in_anomaly_mode() -> None:
    x = engine.tensor([1.0], requires_grad=True)
    with pytest.warns(UserWarning, match="Anomaly Detection"), engine.autograd.detect_anomaly():
        node = make_node(MulBackward0, x, None)
    assert node is not None
    assert "test_bare_nodes.py" in "".join(node.metadata["traceback_"])


def test_classes_with_their_own_init_are_called() -> None:
    class Custom(Node):
        __slots__ = ("extra",)

        def __init__(self) -> None:
            super().__init__()
            self.extra = 7

    x = engine.tensor([1.0], requires_grad=True)
    node = make_node(Custom, x)
    assert not Custom.bare_init and node is not None and node.extra == 7
