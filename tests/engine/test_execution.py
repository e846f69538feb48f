"""Backward semantics: retain_graph, create_graph, grad(), hooks, ordering, accumulation."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import events
from engine.saved import ERR_BACKWARD_TWICE


def test_second_backward_without_retain_graph_raises_pytorch_message() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError) as info:
        y.backward()
    assert str(info.value) == ERR_BACKWARD_TWICE
    assert str(info.value).startswith("Trying to backward through the graph a second time")


def test_retain_graph_allows_a_second_backward_that_accumulates() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])


def test_saved_tensors_are_released_after_backward(recorded: list[events.Event]) -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    node = y.grad_fn
    y.sum().backward()
    assert all(s.released for s in node._saved)
    released = [e for e in recorded if e.kind == "release_variables"]
    assert [e.node_name for e in released] == ["MulBackward0"]


def test_create_graph_gives_third_order_gradients() -> None:
    x = engine.tensor([0.3, -1.2, 2.0], dtype=engine.float64, requires_grad=True)
    y = (x**4).sum()
    (g1,) = engine.grad(y, x, create_graph=True)
    (g2,) = engine.grad(g1.sum(), x, create_graph=True)
    (g3,) = engine.grad(g2.sum(), x)
    np.testing.assert_allclose(g1.detach().numpy(), 4 * x.data**3)
    np.testing.assert_allclose(g2.detach().numpy(), 12 * x.data**2)
    np.testing.assert_allclose(g3.numpy(), 24 * x.data)


def test_create_graph_third_order_of_sin_matches_finite_differences() -> None:
    x = engine.tensor([0.4, 1.1], dtype=engine.float64, requires_grad=True)

    def third(t: engine.Tensor) -> engine.Tensor:
        (a,) = engine.grad(t.sin().sum(), t, create_graph=True)
        (b,) = engine.grad(a.sum(), t, create_graph=True)
        return b

    assert engine.gradcheck(third, (x,))
    (g,) = engine.grad(third(x).sum(), x)
    np.testing.assert_allclose(g.numpy(), -np.cos(x.data), rtol=1e-10)


def test_backward_with_create_graph_stores_differentiable_grad() -> None:
    x = engine.tensor([3.0], dtype=engine.float64, requires_grad=True)
    (x**3).sum().backward(create_graph=True)
    assert x.grad is not None and x.grad.requires_grad
    (gg,) = engine.grad(x.grad.sum(), x)
    np.testing.assert_allclose(gg.numpy(), [18.0])


def test_grad_returns_captures_without_touching_dot_grad(recorded: list[events.Event]) -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    w = engine.tensor([3.0, 4.0], requires_grad=True)
    h = x * w
    loss = (h * h).sum()
    gh, gx = engine.grad(loss, [h, x])
    np.testing.assert_allclose(gh.numpy(), 2 * h.data)
    np.testing.assert_allclose(gx.numpy(), 2 * h.data * w.data)
    assert x.grad is None and w.grad is None
    captures = [e for e in recorded if e.kind == "capture"]
    assert sorted(e.data["output_index"] for e in captures) == [0, 1]
    assert not any(e.kind == "accumulate" and e.data["target"] == "leaf" for e in recorded)


def test_grad_of_an_intermediate_prunes_below_it(recorded: list[events.Event]) -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    a = x.exp()
    b = a * 2.0
    (ga,) = engine.grad(b.sum(), a)
    np.testing.assert_allclose(ga.numpy(), [2.0, 2.0])
    ran = [e.node_name for e in recorded if e.kind == "node_start"]
    assert "ExpBackward0" not in ran and "AccumulateGrad" not in ran


def test_unused_input_needs_allow_unused_and_materialize_gives_zeros() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    z = engine.tensor([5.0], requires_grad=True)
    y = (x * 2.0).sum()
    with pytest.raises(RuntimeError, match="The differentiated Tensor at index 1 appears to not"):
        engine.grad(y, [x, z], retain_graph=True)
    _gx, gz = engine.grad(y, [x, z], allow_unused=True, retain_graph=True)
    assert gz is None
    _gx, gz = engine.grad(y, [x, z], materialize_grads=True)
    assert gz is not None and gz.shape == (1,) and float(gz.item()) == 0.0


def test_backward_inputs_with_a_non_leaf_fills_its_grad() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    (h * h).sum().backward(inputs=[h])
    np.testing.assert_allclose(h.grad.numpy(), 2 * h.data)
    assert x.grad is None


def test_retain_grad_keeps_non_leaf_gradient_and_leaf_access_warns() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    h.retain_grad()
    h2 = x * 4.0
    (h * h2).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), h2.data)
    with pytest.warns(UserWarning, match="is not a leaf Tensor"):
        assert h2.grad is None


def test_gradients_accumulate_across_calls_and_paths() -> None:
    x = engine.tensor([2.0], requires_grad=True)
    (x * x + x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [7.0])
    (x * 5.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [12.0])


def test_several_roots_go_through_a_graph_root(recorded: list[events.Event]) -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    a = (x * 2.0).sum()
    b = (x * x).sum()
    engine.backward([a, b])
    np.testing.assert_allclose(x.grad.numpy(), 2 + 2 * x.data)
    assert recorded[0].kind == "graph_task_start" and recorded[0].node_name == "GraphRoot"
    single = engine.tensor([1.0], requires_grad=True)
    before = len(recorded)
    (single * 2.0).sum().backward()
    assert recorded[before].node_name == "SumBackward0", "no GraphRoot for a single root"


def test_explicit_gradient_for_non_scalar_root() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2.0
    y.backward(engine.tensor([1.0, 0.5, 0.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 1.0, 0.0])


def test_broadcast_gradients_are_reduced_to_input_shapes() -> None:
    a = engine.randn(3, 1, dtype=engine.float64, requires_grad=True)
    b = engine.randn(4, dtype=engine.float64, requires_grad=True)
    assert engine.gradcheck(lambda p, q: p * q + q / (p * p + 1.0), (a, b))


def test_ready_queue_runs_higher_sequence_numbers_first(recorded: list[events.Event]) -> None:
    x = engine.tensor([1.0], requires_grad=True)
    first = x * 2.0
    second = x * 3.0
    third = x * 4.0
    engine.backward([first.sum(), second.sum(), third.sum()])
    muls = [
        e.sequence_nr for e in recorded if e.kind == "node_start" and e.node_name == "MulBackward0"
    ]
    assert muls == sorted(muls, reverse=True) and len(muls) == 3


def test_hooks_run_in_pytorch_order(torch: object) -> None:
    def run(lib: object, tensor_fn: object) -> list[str]:
        calls: list[str] = []
        x = tensor_fn([1.0, 2.0], requires_grad=True)  # type: ignore[operator]
        h = x * 2
        h.retain_grad()
        h.register_hook(lambda g: calls.append("tensor_hook") or g * 10)
        h.grad_fn.register_prehook(lambda go: calls.append("node_prehook"))
        h.grad_fn.register_hook(lambda gi, go: calls.append("node_hook"))
        x.register_hook(lambda g: calls.append("leaf_hook"))
        h.sum().backward()
        calls.append(f"grad={x.grad.tolist()} hgrad={h.grad.tolist()}")
        return calls

    ours = run(engine, engine.tensor)
    theirs = run(torch, torch.tensor)  # type: ignore[attr-defined]
    assert ours == theirs
    assert ours[:4] == ["tensor_hook", "node_prehook", "node_hook", "leaf_hook"]


def test_hook_can_replace_gradient_and_handle_removes_it() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    handle = x.register_hook(lambda g: g * 0.0)
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0])
    handle.remove()
    x.grad = None
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_node_post_hook_sees_inputs_and_outputs_and_can_replace() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3.0
    seen: list[tuple[tuple[float, ...], tuple[float, ...]]] = []

    def hook(grad_inputs: tuple, grad_outputs: tuple) -> tuple:
        seen.append((tuple(grad_inputs[0].tolist()), tuple(grad_outputs[0].tolist())))
        return (grad_inputs[0] * 2.0, grad_inputs[1])

    y.grad_fn.register_hook(hook)
    y.sum().backward()
    assert seen == [((3.0, 3.0), (1.0, 1.0))]
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0])


def test_grad_hooks_run_during_grad_for_captured_leaves() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: g + 1.0)
    (g,) = engine.grad((x * 2.0).sum(), x)
    np.testing.assert_allclose(g.numpy(), [3.0, 3.0])


def test_grad_modes_are_thread_local_and_decorate() -> None:
    import threading

    x = engine.tensor([1.0], requires_grad=True)
    seen: list[bool] = []
    with engine.no_grad():
        assert (x * 2.0).grad_fn is None
        t = threading.Thread(target=lambda: seen.append(engine.is_grad_enabled()))
        t.start()
        t.join()
        with engine.enable_grad():
            assert (x * 2.0).requires_grad
    assert seen == [True]

    @engine.no_grad()
    def f() -> engine.Tensor:
        return x * 2.0

    assert not f().requires_grad and engine.is_grad_enabled()
    engine.set_grad_enabled(False)
    assert not engine.is_grad_enabled()
    engine.set_grad_enabled(True)
    with engine.set_grad_enabled(False):
        assert not engine.is_grad_enabled()
    assert engine.is_grad_enabled()


def test_inference_mode_tensors_cannot_be_saved_for_backward() -> None:
    with engine.inference_mode():
        frozen = engine.tensor([1.0, 2.0])
        assert engine.is_inference_mode_enabled() and not engine.is_grad_enabled()
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    assert frozen.is_inference() and not x.is_inference()
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        x * frozen


def test_detach_shares_data_and_version_and_cuts_the_graph() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2.0
    d = y.detach()
    assert d.grad_fn is None and not d.requires_grad and d.data is y.data
    d.add_(1.0)
    assert y._version == 1


def test_grad_of_a_leaf_with_respect_to_itself_leaves_dot_grad_alone(torch: object) -> None:
    a = engine.tensor([1.0, 2.0], requires_grad=True)
    (g,) = engine.grad(a, a, engine.ones(2))
    t = torch.tensor([1.0, 2.0], requires_grad=True)  # type: ignore[attr-defined]
    (tg,) = torch.autograd.grad(t, t, torch.ones(2))  # type: ignore[attr-defined]
    assert g.tolist() == tg.tolist() == [1.0, 1.0]
    assert a.grad is None and t.grad is None


def test_backward_inputs_unreachable_from_root_runs_nothing(recorded: list[events.Event]) -> None:
    x = engine.tensor([1.0], requires_grad=True)
    other = engine.tensor([2.0], requires_grad=True)
    (other * 3.0).sum().backward(inputs=[x])
    assert x.grad is None and other.grad is None
    assert not [e for e in recorded if e.kind == "node_start"]
