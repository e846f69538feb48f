"""Shared input metadata (Note [Shared input metadata] in engine.graph)."""

from __future__ import annotations

import numpy as np

import engine
from engine import graph
from engine.graph import InputMetadata


def test_nodes_that_expect_the_same_gradient_share_one_metadata_tuple() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    a, b = x * 2.0, x + 1.0
    c = engine.tensor([[1.0]], dtype=engine.float64, requires_grad=True) * 3.0
    assert a.grad_fn._input_metadata is b.grad_fn._input_metadata
    (meta,) = a.grad_fn._input_metadata
    assert meta == InputMetadata((2,), np.dtype(np.float32), engine.device("cpu"))
    assert c.grad_fn._input_metadata == (
        InputMetadata((1, 1), np.dtype(np.float64), engine.device("cpu")),
    )


def test_a_custom_function_adds_its_slots_one_by_one() -> None:
    class Pair(engine.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            return x * 2.0, (x * 3.0).sum()

        @staticmethod
        def backward(ctx, g_pair, g_sum):  # type: ignore[no-untyped-def]
            return g_pair * 2.0 + g_sum * 3.0

    x = engine.tensor([1.0, 2.0], requires_grad=True)
    pair, total = Pair.apply(x)
    node = pair.grad_fn
    assert [m.shape for m in node._input_metadata] == [(2,), ()]
    assert (pair.output_nr, total.output_nr) == (0, 1)
    (pair.sum() + total).backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 5.0])


def test_the_shared_table_stays_bounded() -> None:
    for n in range(1, 5000):
        graph.shared_metadata((n,), np.dtype(np.float32), engine.device("cpu"))
    assert 0 < len(graph._SHARED_METADATA) <= 4096
    assert graph.shared_metadata((3,), np.dtype(np.float32), engine.device("cpu"))[0].shape == (3,)


def test_wrap_gives_each_output_of_a_node_its_own_slot() -> None:
    from engine.ops._core import make_node, wrap
    from engine.ops.arithmetic import MulBackward0

    x = engine.tensor([1.0, 2.0], requires_grad=True)
    node = make_node(MulBackward0, x, None)
    assert node is not None and node._input_metadata == ()
    cpu = engine.device("cpu")
    first = wrap(np.zeros(2, dtype=np.float32), cpu, node)
    second = wrap(np.zeros((3, 1)), cpu, node)
    assert (first.output_nr, second.output_nr) == (0, 1)
    assert node._input_metadata == (
        InputMetadata((2,), np.dtype(np.float32), cpu),
        InputMetadata((3, 1), np.dtype(np.float64), cpu),
    )
    # The first output's shared one-slot tuple is left as it was.
    assert graph.shared_metadata((2,), np.dtype(np.float32), cpu) == node._input_metadata[:1]
