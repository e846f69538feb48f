"""Nodes built field by field: ``make_node`` (Note [Bare nodes] in engine.graph) and
``scalar_op`` (Note [Scalar ops in one call] in engine.ops._core)."""

from __future__ import annotations

import pytest

import engine
from engine.graph import Node
from engine.ops._core import make_node, scalar_op, wrap
from engine.ops.arithmetic import AddBackward0, MulBackward0
from engine.tensor import Tensor

_NUMBERED = {"__weakref__", "_id", "sequence_nr", "topological_nr"}
_EDGES = {"_num_edges", "_edge0", "_edge1", "_edges"}
"""Compared through ``_next_edges``: slots past ``_num_edges`` are left unset (Note [Edges in
the node's own slots])."""


def _fields(node: Node) -> dict[str, object]:
    fields = {
        name: getattr(node, name) for name in Node.__slots__ if name not in _NUMBERED | _EDGES
    }
    return {**fields, "_next_edges": node._next_edges}


def test_a_bare_node_has_every_field_node_init_sets() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    bare = make_node(MulBackward0, x, None)
    called = MulBackward0()
    assert bare is not None and MulBackward0.bare_init
    assert {**_fields(bare), "_next_edges": ()} == _fields(called)
    assert bare._next_edges == (x._get_grad_accumulator(), None)
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


def _tensor_fields(t: Tensor) -> dict[str, object]:
    skipped = {"__weakref__", "data", "grad_fn"}
    return {name: getattr(t, name, None) for name in Tensor.__slots__ if name not in skipped}


@pytest.mark.parametrize("requires_grad", [True, False])
def test_scalar_op_makes_what_make_node_and_wrap_make(requires_grad: bool) -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=requires_grad)
    y = x * 3.0  # a non-leaf input, whose edge points at its grad_fn
    out, node = scalar_op(AddBackward0, y, y.data + 1.0)
    built = make_node(AddBackward0, y, None)
    wrapped = wrap(y.data + 1.0, y.device, built)
    assert (node is None) == (built is None) == (not requires_grad)
    assert _tensor_fields(out) == _tensor_fields(wrapped)
    assert out.requires_grad is requires_grad and out.grad_fn is node
    if node is not None and built is not None:
        assert _fields(node) == _fields(built)
        assert node.next_functions == built.next_functions == ((y.grad_fn, 0), (None, 0))
        assert node.topological_nr == built.topological_nr == y.grad_fn.topological_nr + 1
        assert node.sequence_nr + 1 == built.sequence_nr


def test_scalar_op_makes_no_node_without_grad_mode() -> None:
    x = engine.tensor([1.0], requires_grad=True)
    with engine.no_grad():
        out, node = scalar_op(MulBackward0, x, x.data * 2.0)
    assert node is None and out.grad_fn is None and not out.requires_grad
    with engine.inference_mode():
        out, node = scalar_op(MulBackward0, x, x.data * 2.0)
    assert node is None and out.is_inference()


def test_scalar_ops_keep_their_scalar_and_differentiate() -> None:
    x = engine.tensor([1.5, -2.0], dtype=engine.float64, requires_grad=True)
    y = ((x * 3.0 + 2.0) - 0.5) / 4.0
    assert type(y.grad_fn).__name__ == "DivBackward0"
    y.sum().backward()
    assert x.grad is not None and x.grad.tolist() == [0.75, 0.75]


def test_a_scalar_op_node_keeps_the_forward_stack_in_anomaly_mode() -> None:
    x = engine.tensor([1.0], requires_grad=True)
    with pytest.warns(UserWarning, match="Anomaly Detection"), engine.autograd.detect_anomaly():
        _, node = scalar_op(MulBackward0, x, x.data * 2.0)
    assert node is not None
    assert "test_bare_nodes.py" in "".join(node.metadata["traceback_"])


@pytest.mark.parametrize("inference", [False, True])
def test_mul_by_a_numbers_gradient_has_make_tensors_fields(inference: bool) -> None:
    """MulBackward0 writes make_tensor out for the product by its number: the same tensor."""
    from engine.tensor import make_tensor

    x = engine.tensor([1.0, 2.0], dtype=engine.float64, requires_grad=True)
    node = (x * 3.0).grad_fn
    g = engine.tensor([0.5, 0.25], dtype=engine.float64)
    with engine.inference_mode(inference):
        (got, none) = node.apply([g])
        made = make_tensor(g.data * 3.0, g.device)
    assert none is None and type(got) is Tensor
    assert _tensor_fields(got) == _tensor_fields(made)
    assert got.is_inference() is made.is_inference() is inference
    assert got.grad_fn is None and got.data.tolist() == made.data.tolist() == [1.5, 0.75]
