"""cumsum, cumprod, sort, topk, index_select and repeat: finite differences and PyTorch.

Each op is checked three ways: gradcheck and gradgradcheck (finite differences, float64),
and against PyTorch 2.13 for values, indices, node names, next functions and gradients
under a random upstream gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine
from engine import Tensor
from tests.engine.test_torch_order import _both

RNG = np.random.default_rng(11)
DISTINCT = RNG.permutation(24).reshape(2, 3, 4) * 0.37 + 0.05
"""No ties and no zeros: sort and topk are differentiable everywhere nearby."""

ZEROS = {
    "one zero": np.array([[2.0, 0.0, 3.0, -1.5], [0.5, 1.5, -2.0, 0.7]]),
    "two zeros": np.array([[2.0, 0.0, 3.0, 0.0, 1.2], [0.0, 1.5, 0.0, 0.7, 2.0]]),
    "zero first and last": np.array([[0.0, 1.1, 3.0, 0.0], [1.3, -1.5, 2.0, 0.0]]),
    "all zeros": np.zeros((2, 3)),
    "no zeros": np.array([[1.2, -0.7, 3.0], [0.3, 2.0, -1.1]]),
}


def _index(lib: Any, values: list[int], dtype: str = "int64") -> Any:
    return lib.tensor(values, dtype=getattr(lib, dtype))


Op = Callable[[Any, Any], Any]
"""``op(lib, x)``: the op under test, written once for both libraries."""

OPS: dict[str, Op] = {
    "cumsum dim 0": lambda lib, x: x.cumsum(0),
    "cumsum dim -1": lambda lib, x: lib.cumsum(x, dim=-1),
    "cumsum dtype": lambda lib, x: x.cumsum(1, dtype=lib.float64),
    "cumprod dim 1": lambda lib, x: x.cumprod(1),
    "cumprod dim -1": lambda lib, x: lib.cumprod(x, -1),
    "sort": lambda lib, x: x.sort().values,
    "sort dim 1 descending": lambda lib, x: lib.sort(x, dim=1, descending=True).values,
    "sort stable": lambda lib, x: x.sort(dim=0, stable=True).values,
    "topk 2": lambda lib, x: x.topk(2).values,
    "topk smallest dim 0": lambda lib, x: lib.topk(x, 1, dim=0, largest=False).values,
    "topk all of dim 1": lambda lib, x: x.topk(3, 1).values,
    "index_select dim 1 with repeats": lambda lib, x: x.index_select(1, _index(lib, [2, 0, 2])),
    "index_select dim -1 int32": lambda lib, x: lib.index_select(
        x, -1, _index(lib, [3, 1], "int32")
    ),
    "index_select 0-dim index": lambda lib, x: x.index_select(0, lib.tensor(1)),
    "repeat": lambda lib, x: x.repeat(1, 2, 1),
    "repeat new dims": lambda lib, x: x.repeat((2, 1, 1, 2)),
    "repeat zero times": lambda lib, x: x.repeat(1, 0, 2),
}


def _leaf(lib: Any, data: np.ndarray[Any, Any], dtype: str = "float64") -> Any:
    return lib.tensor(data, dtype=getattr(lib, dtype), requires_grad=True)


def _signature(node: Any) -> Any:
    if node is None:
        return None
    name = node.name().removeprefix("torch::autograd::")
    return (name, tuple(_signature(fn) for fn, _ in node.next_functions))


def _run(lib: Any, op: Op, data: np.ndarray[Any, Any], dtype: str) -> dict[str, Any]:
    x = _leaf(lib, data, dtype)
    out = op(lib, x * 1.0)
    seed = np.random.default_rng(5).standard_normal(tuple(out.shape))
    out.backward(lib.tensor(seed, dtype=out.dtype))
    return {
        "graph": _signature(out.grad_fn),
        "shape": list(out.shape),
        "dtype": str(out.dtype).rsplit(".", 1)[-1],
        "values": out.detach().numpy().copy(),
        "grad": x.grad.numpy().copy(),
    }


def _compare(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert ours["graph"] == theirs["graph"]
    assert ours["shape"] == theirs["shape"] and ours["dtype"] == theirs["dtype"]
    np.testing.assert_allclose(ours["values"], theirs["values"], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(ours["grad"], theirs["grad"], rtol=1e-6, atol=1e-12)


@pytest.mark.oracle
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", list(OPS))
def test_values_graph_and_gradients_are_pytorchs(torch: Any, name: str, dtype: str) -> None:
    op = OPS[name]
    _compare(_run(engine, op, DISTINCT, dtype), _run(torch, op, DISTINCT, dtype))


@pytest.mark.parametrize("name", list(OPS))
def test_gradcheck_and_gradgradcheck(name: str) -> None:
    op = OPS[name]
    x = _leaf(engine, DISTINCT)
    assert engine.gradcheck(lambda t: op(engine, t), (x,))
    assert engine.gradgradcheck(lambda t: op(engine, t), (x,))


@pytest.mark.oracle
@pytest.mark.parametrize("case", list(ZEROS))
@pytest.mark.parametrize("dim", [0, 1])
def test_cumprod_through_zeros_is_pytorchs(torch: Any, case: str, dim: int) -> None:
    op: Op = lambda lib, x: x.cumprod(dim)  # noqa: E731
    _compare(_run(engine, op, ZEROS[case], "float64"), _run(torch, op, ZEROS[case], "float64"))


@pytest.mark.parametrize("case", list(ZEROS))
def test_cumprod_through_zeros_gradcheck(case: str) -> None:
    """The one-pass formula (backward) and the differentiable one (double backward)."""
    x = _leaf(engine, ZEROS[case])
    assert engine.gradcheck(lambda t: t.cumprod(1), (x,))
    assert engine.gradgradcheck(lambda t: t.cumprod(1), (x,))


def test_cumprod_through_zeros_without_pytorch() -> None:
    """d/dx of cumprod([2, 0, 3]) summed: [1 + 0 + 0, 2 + 6, 0], by hand."""
    x = engine.tensor([2.0, 0.0, 3.0], dtype=engine.float64, requires_grad=True)
    x.cumprod(0).sum().backward()
    assert x.grad.tolist() == [1.0, 8.0, 0.0]


TIES = np.array([1.0, 2.0, 1.0, 2.0, 1.0, np.nan, 0.5, 2.0], dtype=np.float32)


@pytest.mark.oracle
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_of_ties_and_nan_is_pytorchs(torch: Any, descending: bool) -> None:
    results = []
    for lib in (engine, torch):
        x = lib.tensor(TIES, requires_grad=True)
        values, indices = lib.sort(x, descending=descending, stable=True)
        (values * lib.arange(8.0)).sum().backward()
        results.append((values.tolist(), indices.tolist(), x.grad.tolist(), indices.dtype))
    ours, theirs = results
    np.testing.assert_array_equal(ours[0], theirs[0])
    assert ours[1:3] == theirs[1:3]
    assert ours[3] == engine.int64 and not engine.sort(engine.tensor(TIES)).indices.requires_grad


@pytest.mark.oracle
def test_sort_and_topk_results_and_zero_dim_inputs_are_pytorchs(torch: Any) -> None:
    for lib in (engine, torch):
        x = lib.tensor([3.0, 1.0, 2.0], requires_grad=True)
        result = x.topk(2)
        values, indices = result
        assert result.values is values and result.indices is indices
        assert indices.tolist() == [0, 2] and not indices.requires_grad
        scalar = lib.tensor(2.5, requires_grad=True)
        for made in (scalar.sort(), scalar.topk(1)):
            assert made.values.shape == () and made.indices.shape == ()
            made.values.backward()
        assert scalar.grad.item() == 2.0
        assert lib.cumsum(lib.tensor([True, True, False]), 0).dtype == lib.int64
        assert lib.tensor([2, 3]).cumprod(0).tolist() == [2, 6]


def _error(lib: Any, program: Callable[[Any], Any]) -> tuple[str, str]:
    with pytest.raises(Exception) as info:
        program(lib)
    return type(info.value).__name__, str(info.value)


ERRORS: dict[str, Callable[[Any], Any]] = {
    "cumsum dim out of range": lambda lib: lib.ones(2, 3).cumsum(2),
    "cumprod dim out of range": lambda lib: lib.ones(2, 3).cumprod(-3),
    "topk k too large": lambda lib: lib.ones(2, 3).topk(4),
    "topk k negative": lambda lib: lib.ones(2, 3).topk(-1),
    "sort dim out of range": lambda lib: lib.ones(3).sort(1),
    "index_select float index": lambda lib: lib.ones(2, 3).index_select(1, lib.tensor([0.0])),
    "index_select 2-D index": lambda lib: lib.ones(2, 3).index_select(1, lib.tensor([[0]])),
    "index_select past the end": lambda lib: lib.ones(2, 3).index_select(1, lib.tensor([1, 3])),
    "index_select negative": lambda lib: lib.ones(2, 3).index_select(1, lib.tensor([-1])),
    "index_select a list": lambda lib: lib.ones(2, 3).index_select(1, [0]),
    "repeat fewer dims": lambda lib: lib.ones(2, 3).repeat(2),
    "repeat negative": lambda lib: lib.ones(2, 3).repeat(-1, 2),
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(ERRORS))
def test_errors_are_pytorchs(torch: Any, name: str) -> None:
    assert _error(engine, ERRORS[name]) == _error(torch, ERRORS[name])


def test_backward_of_index_select_adds_repeated_positions() -> None:
    x = engine.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    x.index_select(1, engine.tensor([2, 0, 2])).sum().backward()
    assert x.grad.tolist() == [[1.0, 0.0, 2.0]]
    y = engine.tensor([1.0, 2.0], requires_grad=True)
    y.repeat(3).sum().backward()
    assert y.grad.tolist() == [3.0, 3.0]


def test_saved_indices_changed_in_place_fail_backward() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    index = engine.tensor([0, 2])
    y = x.index_select(0, index)
    index.add_(0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_ops_are_public_names() -> None:
    for name in ("cumsum", "cumprod", "sort", "topk", "index_select"):
        assert name in engine.__all__ and callable(getattr(Tensor, name))
    assert "repeat" not in engine.__all__ and callable(Tensor.repeat)  # a method, as in PyTorch


def _branches(lib: Any, xs: list[Any]) -> Any:
    """Every new op on one branch of a graph whose branches meet at the end."""
    a, b = xs
    top = a.topk(2, dim=1).values.cumsum(1)
    ordered = lib.sort(b * 2.0, dim=0, descending=True).values.cumprod(0)
    picked = a.index_select(1, lib.tensor([2, 0])).repeat(1, 2)
    return lib.cat([top.reshape(-1), ordered.reshape(-1), picked.reshape(-1)]).sum()


@pytest.mark.oracle
def test_nodes_run_in_pytorchs_order(torch: Any) -> None:
    arrays = [DISTINCT[0].astype(np.float32), DISTINCT[1].astype(np.float32) - 1.0]
    _both(_branches, arrays, torch)
