"""The names a PyTorch user reaches for: factories, dtypes, Size, axis=, norm, messages, __all__."""

from __future__ import annotations

import importlib
import math
import pickle
import pkgutil
from typing import Any

import numpy as np
import pytest

import engine
import engine.functional as F

_rng = np.random.default_rng(3)


# -- dtype ---------------------------------------------------------------------------
def test_dtype_reprs_like_torch_and_compares_with_numpy() -> None:
    x = engine.ones(2, 3)
    assert repr(x.dtype) == "engine.float32"
    assert x.dtype is engine.float32
    assert x.dtype == np.float32
    assert np.float32 == x.dtype
    assert np.dtype("float32") == x.dtype
    assert x.dtype == "float32"
    assert x.dtype != np.float64
    assert x.dtype != None  # noqa: E711 - np.dtype(None) would be float64
    assert {np.dtype(np.float32): "found"}[x.dtype] == "found"
    assert np.zeros(2, dtype=engine.float64).dtype == np.float64
    assert engine.tensor([1, 2]).dtype is engine.int64
    assert engine.get_default_dtype() is engine.float32
    assert engine.float32.is_floating_point and not engine.int64.is_floating_point
    assert engine.bool is engine.bool_ and engine.int is engine.int32
    assert pickle.loads(pickle.dumps(engine.float64)) is engine.float64


@pytest.mark.oracle
def test_dtype_names_are_pytorchs(torch: Any) -> None:
    for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8"):
        assert repr(getattr(engine, name)) == repr(getattr(torch, name)).replace("torch", "engine")
    assert repr(engine.bool) == "engine.bool" == repr(torch.bool).replace("torch", "engine")


# -- Size --------------------------------------------------------------------------------
def test_size_is_a_tuple_that_prints_like_torch_size() -> None:
    x = engine.zeros(2, 3)
    size = x.size()
    assert isinstance(size, tuple) and isinstance(size, engine.Size)
    assert size == (2, 3) and x.shape == (2, 3)
    assert repr(size) == "engine.Size([2, 3])"
    assert repr(engine.zeros(()).size()) == "engine.Size([])"
    assert x.size(1) == 3 and x.size(-1) == 3
    assert size.numel() == 6


# -- factories ---------------------------------------------------------------------------
def test_new_factories() -> None:
    engine.manual_seed(0)
    r = engine.randint(3, 7, (50,))
    assert r.dtype is engine.int64 and r.shape == (50,)
    assert r.numpy().min() >= 3 and r.numpy().max() < 7
    assert engine.randint(4, (2, 2)).numpy().max() < 4
    assert engine.randint(0, 2, (3,), dtype=engine.float32).dtype is engine.float32
    with pytest.raises(RuntimeError, match=r"from=3 >= to=3"):
        engine.randint(3, 3, (2,))
    np.testing.assert_array_equal(engine.eye(2, 3).numpy(), np.eye(2, 3))
    assert engine.eye(3).dtype is engine.float32
    assert engine.eye(2, requires_grad=True).requires_grad
    np.testing.assert_allclose(engine.linspace(0, 1, 5).numpy(), [0, 0.25, 0.5, 0.75, 1])
    assert engine.linspace(-1, 1, 3, dtype=engine.float64).dtype is engine.float64
    with pytest.raises(RuntimeError, match="number of steps must be non-negative"):
        engine.linspace(0, 1, -1)
    e = engine.empty(2, 3, dtype=engine.float64)
    assert e.shape == (2, 3) and e.dtype is engine.float64
    assert engine.empty((4,)).shape == (4,)


@pytest.mark.oracle
def test_factories_match_pytorch(torch: Any) -> None:
    np.testing.assert_array_equal(engine.eye(3, 2).numpy(), torch.eye(3, 2).numpy())
    np.testing.assert_allclose(
        engine.linspace(-2, 3, 7).numpy(), torch.linspace(-2, 3, 7).numpy(), rtol=1e-6
    )
    assert repr(engine.randint(5, (2,)).dtype) == repr(torch.randint(5, (2,)).dtype).replace(
        "torch", "engine"
    )


# -- axis= and keepdims= ---------------------------------------------------------------
AXIS_CALLS = {
    "sum": lambda m, x: x.sum(axis=1),
    "sum keepdims": lambda m, x: m.sum(x, axis=(0, 1), keepdims=True),
    "mean": lambda m, x: x.mean(axis=0),
    "amax": lambda m, x: x.amax(axis=1, keepdims=True),
    "amin": lambda m, x: m.amin(x, axis=0),
    "max": lambda m, x: x.max(axis=1).values,
    "min": lambda m, x: x.min(axis=0, keepdims=True).values,
    "argmax": lambda m, x: x.argmax(axis=1).double(),
    "argmin": lambda m, x: x.argmin(axis=0, keepdims=True).double(),
    "softmax": lambda m, x: x.softmax(axis=1),
    "log_softmax": lambda m, x: m.log_softmax(x, axis=0),
    "squeeze": lambda m, x: x[:1].squeeze(axis=0),
    "unsqueeze": lambda m, x: x.unsqueeze(axis=1),
    "cat": lambda m, x: m.cat([x, x], axis=1),
    "stack": lambda m, x: m.stack([x, x], axis=1),
}


@pytest.mark.oracle
@pytest.mark.parametrize("name", AXIS_CALLS)
def test_axis_is_an_alias_of_dim_as_in_pytorch(torch: Any, name: str) -> None:
    array = _rng.standard_normal((3, 4))
    ours = engine.tensor(array, requires_grad=True)
    theirs = torch.tensor(array, requires_grad=True)
    got, expected = AXIS_CALLS[name](engine, ours), AXIS_CALLS[name](torch, theirs)
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy())
    if expected.requires_grad:
        weights = _rng.standard_normal(tuple(expected.shape))
        (got * engine.tensor(weights)).sum().backward()
        (expected * torch.tensor(weights)).sum().backward()
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), atol=1e-12)


# -- norm ------------------------------------------------------------------------------
NORMS = [
    ("fro", None, False),
    (2, 1, False),
    (1, None, False),
    (3, (0, 1), True),
    (0.5, 0, True),
    (math.inf, 1, False),
    (-math.inf, None, False),
]


@pytest.mark.parametrize(("p", "dim", "keepdim"), NORMS)
def test_norm_gradcheck(p: Any, dim: Any, keepdim: bool) -> None:
    x = engine.tensor(_rng.standard_normal((3, 4)), requires_grad=True)
    assert engine.gradcheck(lambda t: t.norm(p, dim, keepdim), (x,))
    if p not in (math.inf, -math.inf):
        assert engine.gradgradcheck(lambda t: t.norm(p, dim, keepdim), (x,))


def test_norm_of_zeros_has_a_zero_gradient_and_p_zero_none() -> None:
    x = engine.zeros(3, dtype=engine.float64, requires_grad=True)
    x.norm().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])
    y = engine.tensor([1.0, 0.0, 2.0], requires_grad=True)
    count = y.norm(0)
    assert count.item() == 2.0
    count.backward()
    assert y.grad is None


@pytest.mark.oracle
@pytest.mark.parametrize(("p", "dim", "keepdim"), [*NORMS, (0, None, False)])
def test_norm_matches_pytorch(torch: Any, p: Any, dim: Any, keepdim: bool) -> None:
    array = _rng.standard_normal((3, 4))
    array[0, 1] = array[0, 2] = 3.0  # ties for the infinity norms
    ours = engine.tensor(array, requires_grad=True)
    theirs = torch.tensor(array, requires_grad=True)
    got, expected = ours.norm(p, dim, keepdim), theirs.norm(p, dim, keepdim)
    assert got.grad_fn.name() == expected.grad_fn.name() == "LinalgVectorNormBackward0"
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy())
    got.sum().backward()
    expected.sum().backward()
    if theirs.grad is None:
        assert ours.grad is None
    else:
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy())


def test_norm_errors() -> None:
    with pytest.raises(RuntimeError, match="Order nuc not supported"):
        engine.ones(2, 2).norm("nuc")
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor"):
        engine.tensor([1, 2]).norm()


# -- messages --------------------------------------------------------------------------
BROADCASTS = [((3, 4), (3, 5)), ((2, 3, 4), (5, 4)), ((4,), (2, 5)), ((3, 4), (2, 1, 5))]


@pytest.mark.oracle
@pytest.mark.parametrize(("a", "b"), BROADCASTS)
def test_broadcast_mismatch_raises_pytorchs_message(torch: Any, a: Any, b: Any) -> None:
    with pytest.raises(RuntimeError) as theirs:
        torch.ones(a) * torch.ones(b)
    with pytest.raises(RuntimeError) as ours:
        engine.ones(a) * engine.ones(b)
    assert str(ours.value) == str(theirs.value)


def test_broadcast_mismatch_message() -> None:
    with pytest.raises(RuntimeError) as info:
        engine.ones(3, 4) + engine.ones(3, 5)
    assert str(info.value) == (
        "The size of tensor a (4) must match the size of tensor b (5) at non-singleton dimension 1"
    )


# -- __all__ -----------------------------------------------------------------------------
def _public_modules() -> list[str]:
    names = ["engine"]
    for package in ("engine", "engine.ops"):
        path = importlib.import_module(package).__path__
        names += [
            f"{package}.{info.name}"
            for info in pkgutil.iter_modules(path)
            if not info.name.startswith("_") and info.name != "ops"
        ]
    return [*names, "engine.ops"]


@pytest.mark.parametrize("name", _public_modules())
def test_every_public_module_declares_its_names(name: str) -> None:
    module = importlib.import_module(name)
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    for exported in module.__all__:
        assert hasattr(module, exported), f"{name}.__all__ names {exported}, which it lacks"


def test_a_star_import_brings_the_ops_as_torchs_does() -> None:
    namespace: dict[str, Any] = {}
    exec("from engine import *", namespace)
    for name in ("exp", "cat", "matmul", "softmax", "where", "tensor", "Tensor", "no_grad"):
        assert namespace[name] is getattr(engine, name)


def test_functional_exports_only_its_functions() -> None:
    for internal in ("np", "make_node", "wrap", "save", "Node", "Tensor", "warnings"):
        assert internal not in F.__all__
    for name in ("linear", "softmax", "log_softmax", "sigmoid", "tanh", "relu", "cross_entropy"):
        assert name in F.__all__


@pytest.mark.oracle
def test_in_place_result_that_does_not_fit_raises_pytorchs_message(torch: Any) -> None:
    messages = []
    for lib in (engine, torch):
        with pytest.raises(RuntimeError) as info:
            (lib.ones(3) * 1.0).add_(lib.ones(2, 3))
        messages.append(str(info.value))
    assert (
        messages[0]
        == messages[1]
        == ("output with shape [3] doesn't match the broadcast shape [2, 3]")
    )
