"""Custom Functions: ctx API, saved tensors, dirty and non-differentiable outputs."""

from __future__ import annotations

import numpy as np
import pytest

import engine


class Cube(engine.Function):
    @staticmethod
    def forward(ctx: object, x: engine.Tensor, scale: float) -> engine.Tensor:
        ctx.save_for_backward(x)  # type: ignore[attr-defined]
        ctx.scale = scale  # type: ignore[attr-defined]
        return engine.tensor(x.data**3 * scale, dtype=x.dtype)

    @staticmethod
    def backward(ctx: object, grad: engine.Tensor) -> tuple[engine.Tensor, None]:
        (x,) = ctx.saved_tensors  # type: ignore[attr-defined]
        return grad * 3.0 * ctx.scale * x * x, None  # type: ignore[attr-defined]


def test_custom_function_gradient_matches_finite_differences() -> None:
    x = engine.tensor([0.5, -1.0, 2.0], dtype=engine.float64, requires_grad=True)
    assert engine.gradcheck(lambda t: Cube.apply(t, 2.0), (x,))
    y = Cube.apply(x, 2.0)
    assert y.grad_fn.name() == "CubeBackward"
    assert y.grad_fn.next_functions[0][0] is x.gradient_edge().function


def test_backward_built_from_ops_is_twice_differentiable() -> None:
    x = engine.tensor([0.5, 2.0], dtype=engine.float64, requires_grad=True)
    (g,) = engine.grad(Cube.apply(x, 1.0).sum(), x, create_graph=True)
    (gg,) = engine.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), 6 * x.data)


def test_needs_input_grad_and_non_tensor_args() -> None:
    seen: list[tuple[bool, ...]] = []

    class Probe(engine.Function):
        @staticmethod
        def forward(ctx: object, a: engine.Tensor, b: engine.Tensor, k: int) -> engine.Tensor:
            seen.append(ctx.needs_input_grad)  # type: ignore[attr-defined]
            return a * b * k

        @staticmethod
        def backward(ctx: object, grad: engine.Tensor) -> tuple[object, ...]:
            return grad, None, None

    a = engine.tensor([1.0], requires_grad=True)
    b = engine.tensor([2.0])
    Probe.apply(a, b, 3).sum().backward()
    assert seen == [(True, False, False)]
    np.testing.assert_allclose(a.grad.numpy(), [1.0])


def test_mark_non_differentiable_and_materialize_grads() -> None:
    received: list[object] = []

    class SortLike(engine.Function):
        @staticmethod
        def forward(ctx: object, x: engine.Tensor) -> tuple[engine.Tensor, engine.Tensor]:
            idx = engine.tensor(np.argsort(x.data))
            ctx.mark_non_differentiable(idx)  # type: ignore[attr-defined]
            return engine.tensor(np.sort(x.data)), idx

        @staticmethod
        def backward(ctx: object, g_values: engine.Tensor, g_idx: engine.Tensor) -> engine.Tensor:
            received.append(g_idx)
            return g_values

    x = engine.tensor([3.0, 1.0, 2.0], requires_grad=True)
    values, idx = SortLike.apply(x)
    assert values.requires_grad and not idx.requires_grad
    values.sum().backward()
    assert isinstance(received[0], engine.Tensor) and float(received[0].sum().item()) == 0.0


def test_set_materialize_grads_false_passes_none() -> None:
    received: list[object] = []

    class Two(engine.Function):
        @staticmethod
        def forward(ctx: object, x: engine.Tensor) -> tuple[engine.Tensor, engine.Tensor]:
            ctx.set_materialize_grads(False)  # type: ignore[attr-defined]
            return x * 1.0, x * 2.0

        @staticmethod
        def backward(
            ctx: object, g1: engine.Tensor | None, g2: engine.Tensor | None
        ) -> engine.Tensor:
            received.extend([g1, g2])
            return g1 if g1 is not None else g2 * 2.0  # type: ignore[operator]

    x = engine.tensor([1.0], requires_grad=True)
    a, _b = Two.apply(x)
    a.sum().backward()
    assert received[1] is None and received[0] is not None


def test_mark_dirty_inplace_function() -> None:
    class Double_(engine.Function):
        @staticmethod
        def forward(ctx: object, x: engine.Tensor) -> engine.Tensor:
            x.data *= 2
            ctx.mark_dirty(x)  # type: ignore[attr-defined]
            return x

        @staticmethod
        def backward(ctx: object, grad: engine.Tensor) -> engine.Tensor:
            return grad * 2.0

    leaf = engine.tensor([1.0, 2.0], requires_grad=True)
    h = leaf * 1.0
    out = Double_.apply(h)
    assert out is h and h.grad_fn.name() == "Double_Backward" and h._version == 1
    out.sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), [2.0, 2.0])
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        Double_.apply(engine.tensor([1.0], requires_grad=True))


def test_saved_output_has_no_reference_cycle() -> None:
    import gc
    import weakref

    class Exp(engine.Function):
        @staticmethod
        def forward(ctx: object, x: engine.Tensor) -> engine.Tensor:
            out = engine.tensor(np.exp(x.data))
            ctx.save_for_backward(out)  # type: ignore[attr-defined]
            return out

        @staticmethod
        def backward(ctx: object, grad: engine.Tensor) -> engine.Tensor:
            (out,) = ctx.saved_tensors  # type: ignore[attr-defined]
            return grad * out

    x = engine.tensor([0.0, 1.0], requires_grad=True)
    y = Exp.apply(x)
    node_ref = weakref.ref(y.grad_fn)
    y.sum().backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.0, 1.0]), rtol=1e-6)
    gc.disable()
    try:
        del y
        assert node_ref() is None, "freed by reference counting alone"
    finally:
        gc.enable()


def test_once_differentiable_refuses_double_backward() -> None:
    class Sq(engine.Function):
        @staticmethod
        def forward(ctx: object, x: engine.Tensor) -> engine.Tensor:
            ctx.save_for_backward(x)  # type: ignore[attr-defined]
            return x * x

        @staticmethod
        @engine.once_differentiable
        def backward(ctx: object, grad: engine.Tensor) -> engine.Tensor:
            (x,) = ctx.saved_tensors  # type: ignore[attr-defined]
            return grad * 2.0 * x

    x = engine.tensor([3.0], requires_grad=True)
    (g,) = engine.grad(Sq.apply(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), [6.0])
    assert not g.requires_grad, "with constant grad_outputs there is nothing to differentiate"
    go = engine.ones(1, requires_grad=True)
    (g,) = engine.grad(Sq.apply(x), x, grad_outputs=go, create_graph=True)
    assert g.requires_grad and g.grad_fn.name() == "DelayedError"
    with pytest.raises(
        RuntimeError,
        match="trying to differentiate twice a function that was marked with @once_differentiable",
    ):
        engine.grad(g.sum(), go)
