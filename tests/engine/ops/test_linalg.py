"""Matrix products: dot, mv, mm, bmm and matmul / ``@`` over every rank combination."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine
from engine import Tensor

RNG = np.random.default_rng(5)


def leaf(*shape: int) -> Tensor:
    return engine.tensor(RNG.standard_normal(shape), dtype=engine.float64, requires_grad=True)


def weights(*shape: int) -> Tensor:
    return engine.tensor(RNG.standard_normal(shape), dtype=engine.float64)


def chain(node: Any) -> str:
    """The graph below ``node`` as ``Name(child, ...)``, with ``A`` for AccumulateGrad."""
    if node is None:
        return "None"
    name = node.name().replace("torch::autograd::", "")
    if name == "AccumulateGrad":
        return "A"
    return f"{name}({', '.join(chain(child) for child, _ in node.next_functions)})"


SHAPES = [
    ((3,), (3,)),
    ((2, 3), (3, 4)),
    ((2, 3), (3,)),
    ((3,), (3, 4)),
    ((5, 2, 3), (3, 4)),
    ((5, 2, 3), (3,)),
    ((4, 5, 2, 3), (3, 4)),
    ((3,), (5, 3, 4)),
    ((2, 3), (5, 3, 4)),
    ((1, 3), (5, 3, 4)),
    ((2, 3), (1, 3, 4)),
    ((5, 2, 3), (5, 3, 4)),
    ((6, 1, 2, 3), (5, 3, 4)),
    ((2, 5, 2, 3), (5, 3, 4)),
    ((5, 2, 3), (1, 3, 4)),
    ((1, 2, 3), (5, 3, 4)),
]
IDS = [f"{a}@{b}".replace(" ", "") for a, b in SHAPES]


@pytest.mark.parametrize(("shape_a", "shape_b"), SHAPES, ids=IDS)
def test_matmul_values_match_numpy(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> None:
    a, b = leaf(*shape_a), leaf(*shape_b)
    out = a @ b
    expected = np.matmul(a.data, b.data)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.data, expected, rtol=1e-12)
    np.testing.assert_allclose(engine.matmul(a, b).data, expected, rtol=1e-12)


@pytest.mark.parametrize(("shape_a", "shape_b"), SHAPES, ids=IDS)
def test_matmul_gradcheck(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> None:
    assert engine.gradcheck(engine.matmul, (leaf(*shape_a), leaf(*shape_b)))


@pytest.mark.parametrize(
    ("shape_a", "shape_b"),
    [
        ((3,), (3,)),
        ((2, 3), (3, 4)),
        ((2, 3), (3,)),
        ((3,), (3, 4)),
        ((2, 2, 3), (3, 2)),
        ((2, 3), (2, 3, 2)),
        ((2, 1, 2, 3), (2, 3, 2)),
    ],
)
def test_matmul_second_order(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> None:
    # A product of the operands with themselves, so the second derivative is not zero.
    def fn(a: Tensor, b: Tensor) -> Tensor:
        return engine.matmul(a * a, b * b)

    assert engine.gradgradcheck(fn, (leaf(*shape_a), leaf(*shape_b)))


@pytest.mark.parametrize(
    ("fn", "shapes"),
    [
        (engine.dot, ((4,), (4,))),
        (engine.mv, ((2, 4), (4,))),
        (engine.mm, ((2, 4), (4, 3))),
        (engine.bmm, ((2, 3, 4), (2, 4, 5))),
    ],
    ids=["dot", "mv", "mm", "bmm"],
)
def test_primitives_gradcheck_and_second_order(
    fn: Callable[[Tensor, Tensor], Tensor], shapes: tuple[tuple[int, ...], ...]
) -> None:
    inputs = tuple(leaf(*s) for s in shapes)
    assert engine.gradcheck(fn, inputs)
    assert engine.gradgradcheck(lambda a, b: fn(a * a, b), inputs)


def test_one_operand_a_constant() -> None:
    a, b = leaf(2, 3), weights(3, 4)
    assert engine.gradcheck(lambda a: a @ b, (a,))
    assert engine.gradcheck(lambda a: b.t() @ a.t(), (a,))


def test_numpy_arrays_on_either_side() -> None:
    a = leaf(2, 3)
    m = RNG.standard_normal((3, 2))
    np.testing.assert_allclose((a @ m).data, a.data @ m)
    out = m @ a  # ndarray @ Tensor defers to Tensor.__rmatmul__
    assert isinstance(out, Tensor)
    np.testing.assert_allclose(out.data, m @ a.data)
    out.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.broadcast_to(m.sum(0)[:, None], (2, 3)))


def test_tensor_methods() -> None:
    a, b, v = leaf(2, 3), leaf(3, 4), leaf(3)
    np.testing.assert_allclose(a.mm(b).data, a.data @ b.data)
    np.testing.assert_allclose(a.matmul(b).data, a.data @ b.data)
    np.testing.assert_allclose(a.mv(v).data, a.data @ v.data)
    np.testing.assert_allclose(v.dot(v).item(), v.data @ v.data)
    np.testing.assert_allclose(a.unsqueeze(0).bmm(b.unsqueeze(0)).data[0], a.data @ b.data)


def test_integer_products() -> None:
    a = engine.tensor([[1, 2], [3, 4]])
    assert (a @ a).dtype == engine.int64
    np.testing.assert_array_equal((a @ a).numpy(), [[7, 10], [15, 22]])


# -- graph -----------------------------------------------------------------------
ROOTS = [
    ((3,), (3,), "DotBackward0"),
    ((2, 3), (3, 4), "MmBackward0"),
    ((2, 3), (3,), "MvBackward0"),
    ((3,), (3, 4), "SqueezeBackward4"),
    ((5, 2, 3), (3, 4), "UnsafeViewBackward0"),
    ((5, 2, 3), (5, 3, 4), "UnsafeViewBackward0"),
]


@pytest.mark.parametrize(("shape_a", "shape_b", "name"), ROOTS)
def test_node_names(shape_a: tuple[int, ...], shape_b: tuple[int, ...], name: str) -> None:
    assert (leaf(*shape_a) @ leaf(*shape_b)).grad_fn.name() == name


def test_batched_product_records_bmm_below_the_view() -> None:
    out = leaf(5, 2, 3) @ leaf(5, 3, 4)
    assert chain(out.grad_fn) == (
        "UnsafeViewBackward0(BmmBackward0(ViewBackward0(ExpandBackward0(A)), "
        "ViewBackward0(ExpandBackward0(A))))"
    )


@pytest.mark.parametrize(
    ("index", "primitive"),
    [(0, "mm"), (1, "mm"), (0, "bmm"), (1, "bmm")],
)
def test_only_the_requested_gradient_is_computed(
    monkeypatch: pytest.MonkeyPatch, index: int, primitive: str
) -> None:
    import engine.ops.linalg as linalg

    calls: list[tuple[int, ...]] = []
    real = getattr(linalg, primitive)

    def counting(a: Tensor, b: Tensor) -> Tensor:
        calls.append(a.shape)
        return real(a, b)

    a, b = (leaf(2, 3), leaf(3, 4)) if primitive == "mm" else (leaf(2, 2, 3), leaf(2, 3, 4))
    out = getattr(engine, primitive)(a, b)
    monkeypatch.setattr(linalg, primitive, counting)
    (grad,) = engine.grad(out, (a, b)[index], weights(*out.shape))
    assert len(calls) == 1
    assert grad.shape == (a, b)[index].shape


def test_saved_operand_only_when_the_other_needs_it() -> None:
    a, b = leaf(2, 3), weights(3, 4)
    out = a @ b
    b.add_(1.0)  # b is saved (a's gradient needs it): the change is caught
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    a2, c = leaf(2, 3), weights(3, 4)
    out2 = a2 @ c
    with engine.no_grad():
        a2.add_(1.0)
    out2.sum().backward()  # a2 was never saved (c needs no gradient), so its change is harmless
    np.testing.assert_allclose(a2.grad.numpy(), np.broadcast_to(c.data.sum(1), (2, 3)))


def test_products_on_another_device() -> None:
    a = engine.tensor(RNG.standard_normal((2, 3)), device="sim:0", requires_grad=True)
    b = engine.tensor(RNG.standard_normal((3,)), device="sim:0", requires_grad=True)
    out = a @ b
    assert out.device == engine.device("sim:0")
    out.sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), a.data.sum(0))


# -- errors ----------------------------------------------------------------------
ERRORS: list[tuple[Callable[[], Any], type[Exception], str]] = [
    (
        lambda: engine.ones(2, 3) @ engine.ones(4, 5),
        RuntimeError,
        "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)",
    ),
    (
        lambda: engine.mm(engine.ones(2, 3), engine.ones(3, 4, dtype=engine.float64)),
        RuntimeError,
        "expected m1 and m2 to have the same dtype, but got: float != double",
    ),
    (lambda: engine.mm(engine.ones(3), engine.ones(3, 4)), RuntimeError, "self must be a matrix"),
    (lambda: engine.mm(engine.ones(2, 3), engine.ones(3)), RuntimeError, "mat2 must be a matrix"),
    (
        lambda: engine.ones(3) @ engine.ones(4),
        RuntimeError,
        "inconsistent tensor size, expected tensor [3] and src [4] to have the same number of "
        "elements, but got 3 and 4 elements respectively",
    ),
    (
        lambda: engine.dot(engine.ones(3), engine.ones(3, dtype=engine.float64)),
        RuntimeError,
        "dot : expected both vectors to have same dtype, but found Float and Double",
    ),
    (
        lambda: engine.dot(engine.ones(2, 2), engine.ones(2, 2)),
        RuntimeError,
        "1D tensors expected, but got 2D and 2D tensors",
    ),
    (
        lambda: engine.ones(2, 3) @ engine.ones(4),
        RuntimeError,
        "size mismatch, got input (2), mat (2x3), vec (4)",
    ),
    (
        lambda: engine.ones(4) @ engine.ones(2, 3),
        RuntimeError,
        "mat1 and mat2 shapes cannot be multiplied (1x4 and 2x3)",
    ),
    (
        lambda: engine.bmm(engine.ones(5, 2, 3), engine.ones(5, 4, 3)),
        RuntimeError,
        "Expected size for first two dimensions of batch2 tensor to be: [5, 3] but got: [5, 4].",
    ),
    (lambda: engine.bmm(engine.ones(2, 3), engine.ones(3, 2)), RuntimeError, "batch1 must be a 3D"),
    (
        lambda: engine.ones(5, 2, 3) @ engine.ones(4, 3, 3),
        RuntimeError,
        "The size of tensor a (5) must match the size of tensor b (4) at non-singleton dimension 0",
    ),
    (
        lambda: engine.ones(5, 2, 3) @ engine.ones(5, 4, 2),
        RuntimeError,
        "Expected size for first two dimensions of batch2 tensor to be: [5, 3] but got: [5, 4].",
    ),
    (
        lambda: engine.ones(3) @ engine.ones(5, 4, 2),
        RuntimeError,
        "Expected size for first two dimensions of batch2 tensor to be: [5, 3] but got: [5, 4].",
    ),
    (
        lambda: engine.ones(5, 2, 3) @ engine.ones(4, 2),
        RuntimeError,
        "mat1 and mat2 shapes cannot be multiplied (10x3 and 4x2)",
    ),
    (
        lambda: engine.matmul(engine.tensor(1.0), engine.ones(2, 2)),
        RuntimeError,
        "both arguments to matmul need to be at least 1D, but they are 0D and 2D",
    ),
    (
        lambda: engine.ones(2, 2) @ 2,
        TypeError,
        "matmul(): argument 'other' must be Tensor, not int",
    ),
    (
        lambda: engine.ones(2, 2) @ engine.ones(2, 2, device="sim:0"),
        RuntimeError,
        "Expected all tensors to be on the same device",
    ),
]


@pytest.mark.parametrize(("call", "kind", "message"), ERRORS)
def test_errors(call: Callable[[], Any], kind: type[Exception], message: str) -> None:
    with pytest.raises(kind, match=re.escape(message)):
        call()


# -- oracle ----------------------------------------------------------------------
@pytest.mark.oracle
@pytest.mark.parametrize(("shape_a", "shape_b"), SHAPES, ids=IDS)
def test_matmul_matches_pytorch(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> None:
    torch = pytest.importorskip("torch")
    a0, b0 = RNG.standard_normal(shape_a), RNG.standard_normal(shape_b)
    a, b = engine.tensor(a0, requires_grad=True), engine.tensor(b0, requires_grad=True)
    ta, tb = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    out, tout = a @ b, ta @ tb
    assert out.shape == tuple(tout.shape)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-12)
    w0 = RNG.standard_normal(tout.shape)
    (out * engine.tensor(w0)).sum().backward()
    (tout * torch.tensor(w0)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-12)


# PyTorch's matmul graph also depends on which operand requires grad and on the operands'
# memory layout; with both operands requiring grad, these rank combinations record its graph.
SAME_GRAPH = [s for s in SHAPES if s not in (((5, 2, 3), (1, 3, 4)), ((1, 2, 3), (5, 3, 4)))]


@pytest.mark.oracle
@pytest.mark.parametrize(
    ("shape_a", "shape_b"), SAME_GRAPH, ids=[f"{a}@{b}".replace(" ", "") for a, b in SAME_GRAPH]
)
def test_matmul_root_node_matches_pytorch(
    shape_a: tuple[int, ...], shape_b: tuple[int, ...]
) -> None:
    torch = pytest.importorskip("torch")
    ours = (leaf(*shape_a) @ leaf(*shape_b)).grad_fn
    theirs = (
        torch.randn(shape_a, requires_grad=True) @ torch.randn(shape_b, requires_grad=True)
    ).grad_fn
    assert ours.name() == theirs.name()
    assert [c.name() if c else None for c, _ in ours.next_functions] == [
        c.name().replace("torch::autograd::", "") if c else None for c, _ in theirs.next_functions
    ]


@pytest.mark.oracle
def test_second_order_matches_pytorch() -> None:
    torch = pytest.importorskip("torch")
    a0, b0 = RNG.standard_normal((2, 2, 3)), RNG.standard_normal((3, 4))

    def f(a: Any, b: Any) -> Any:
        return ((a @ b) * (a @ b)).sum()

    a, b = engine.tensor(a0, requires_grad=True), engine.tensor(b0, requires_grad=True)
    ta, tb = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    ga, gb = engine.grad(f(a, b), (a, b), create_graph=True)
    tga, tgb = torch.autograd.grad(f(ta, tb), (ta, tb), create_graph=True)
    gga, ggb = engine.grad((ga * gb.sum()).sum(), (a, b))
    tgga, tggb = torch.autograd.grad((tga * tgb.sum()).sum(), (ta, tb))
    np.testing.assert_allclose(gga.numpy(), tgga.numpy(), rtol=1e-10)
    np.testing.assert_allclose(ggb.numpy(), tggb.numpy(), rtol=1e-10)


@pytest.mark.oracle
def test_float32_products_match_pytorch() -> None:
    torch = pytest.importorskip("torch")
    a0 = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    b0 = RNG.standard_normal((5, 2)).astype(np.float32)
    out = engine.tensor(a0) @ engine.tensor(b0)
    assert out.dtype == engine.float32
    np.testing.assert_allclose(
        out.numpy(), (torch.tensor(a0) @ torch.tensor(b0)).numpy(), rtol=1e-5
    )
