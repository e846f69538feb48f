"""A million-node chain: built, differentiated and freed without recursion."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import engine


@pytest.mark.slow
def test_million_node_chain_builds_runs_and_frees_without_recursion() -> None:
    n = 1_000_000
    gc.disable()  # prove teardown needs only reference counting
    try:
        x = engine.tensor([1.0], dtype=engine.float64, requires_grad=True)
        y = x
        for _ in range(n):
            y = y * 1.0000001
        first = weakref.ref(x.gradient_edge().function)
        last = weakref.ref(y.grad_fn)
        assert y.grad_fn.topological_nr == n
        y.backward()
        np.testing.assert_allclose(x.grad.numpy(), [1.0000001**n], rtol=1e-9)
        del y
        assert last() is None and first() is None
    finally:
        gc.enable()
