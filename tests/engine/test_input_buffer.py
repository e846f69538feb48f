"""Summing a node's gradients in its input buffer (Note [Adding into a buffer in place]).

A buffered gradient that nothing else holds is added into in place once it
is larger than ``IN_PLACE_MIN`` elements; anything that another owner could
see (a hook's kept tensor, the gradient passed to ``backward()``, a tensor
routed to two places, a view) gets a new array instead. Either way the sums
must be the ones NumPy computes, on the plain path and with a listener.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import pytest

import engine
from engine import engine as engine_module
from engine import events, graph_task
from engine.graph_task import IN_PLACE_MIN, add_into
from engine.tensor import make_tensor

BIG = IN_PLACE_MIN + 1


def _grad(values: Any) -> engine.Tensor:
    return make_tensor(np.array(values, dtype=np.float64), engine.device("cpu"))


def test_an_unshared_large_gradient_is_added_into() -> None:
    buffer: list[Any] = [_grad(np.arange(BIG))]
    tensor, array = weakref.ref(buffer[0]), weakref.ref(buffer[0].data)  # held weakly
    add_into(buffer, 0, _grad(np.ones(BIG)))
    assert buffer[0] is tensor() and buffer[0].data is array()
    np.testing.assert_array_equal(buffer[0].data, np.arange(BIG) + 1.0)


def test_a_small_gradient_gets_a_new_array() -> None:
    buffer: list[Any] = [_grad(np.arange(IN_PLACE_MIN))]
    array = buffer[0].data
    add_into(buffer, 0, _grad(np.ones(IN_PLACE_MIN)))
    assert buffer[0].data is not array
    np.testing.assert_array_equal(array, np.arange(IN_PLACE_MIN))
    np.testing.assert_array_equal(buffer[0].data, np.arange(IN_PLACE_MIN) + 1.0)


@pytest.mark.parametrize("holder", ["tensor", "array", "view's base", "read-only"])
def test_a_gradient_someone_else_holds_is_left_alone(holder: str) -> None:
    values = np.arange(BIG, dtype=np.float64)
    kept: Any
    if holder == "tensor":
        kept = _grad(values)
        buffer: list[Any] = [kept]
    elif holder == "array":
        kept = values
        buffer = [make_tensor(kept, engine.device("cpu"))]
    elif holder == "view's base":
        kept = np.concatenate([values, values])
        buffer = [make_tensor(kept[:BIG], engine.device("cpu"))]
    else:
        kept = values.copy()
        kept.flags.writeable = False
        buffer = [make_tensor(kept, engine.device("cpu"))]
    before = np.array(kept.data if isinstance(kept, engine.Tensor) else kept, copy=True)
    add_into(buffer, 0, _grad(np.ones(BIG)))
    after = kept.data if isinstance(kept, engine.Tensor) else kept
    np.testing.assert_array_equal(after, before)
    np.testing.assert_array_equal(buffer[0].data, values + 1.0)


def _fan_in(n: int) -> tuple[engine.Tensor, engine.Tensor, np.ndarray]:
    """``x`` used by five ops whose gradients all meet in ``exp``'s buffer."""
    x_values = np.linspace(-1.0, 1.0, n)
    x = engine.tensor(x_values, dtype=engine.float64, requires_grad=True)
    a = x.exp()
    loss = (a * 2.0 + a * 3.0 + a.sin() + a * a).sum()
    e = np.exp(x_values)
    expected = (2.0 + 3.0 + np.cos(e) + 2 * e) * e
    return x, loss, expected


@pytest.mark.parametrize("n", [3, BIG, 4096])
@pytest.mark.parametrize("listening", [False, True])
def test_fan_in_sums_match_numpy(n: int, listening: bool) -> None:
    x, loss, expected = _fan_in(n)
    if listening:
        with events.listen(lambda event: None):
            loss.backward()
    else:
        loss.backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("listening", [False, True])
def test_fan_in_adds_into_the_buffer(monkeypatch: pytest.MonkeyPatch, listening: bool) -> None:
    # Five gradients meet in exp's buffer: four sums, of which at most the first
    # needs a new array (the first gradient may be shared; the sums are not).
    made = 0

    def spy(data: Any, device: Any) -> engine.Tensor:
        nonlocal made
        made += 1  # keeping ``data`` would keep the sum from being added into
        return make_tensor(data, device)

    monkeypatch.setattr(graph_task, "make_tensor", spy)
    added = 0
    original = graph_task.add_into

    def counting(buffer: list[Any], slot: int, grad: engine.Tensor) -> None:
        nonlocal added
        added += 1
        original(buffer, slot, grad)

    monkeypatch.setattr(graph_task, "add_into", counting)
    monkeypatch.setattr(engine_module, "add_into", counting)
    x, loss, expected = _fan_in(4096)
    if listening:
        with events.listen(lambda event: None):
            loss.backward()
    else:
        loss.backward()
    assert added == 4 and made <= 1
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)


def test_fan_in_sums_match_pytorch(torch: Any) -> None:
    x, loss, _ = _fan_in(4096)
    loss.backward()
    tx = torch.tensor(np.linspace(-1.0, 1.0, 4096), dtype=torch.float64, requires_grad=True)
    ta = tx.exp()
    (ta * 2.0 + ta * 3.0 + ta.sin() + ta * ta).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_a_hook_kept_gradient_is_not_added_into() -> None:
    # u's gradient, which the hook keeps, is what AddBackward0 hands on to exp's
    # buffer, first (u's nodes have the higher sequence numbers); c's comes after.
    x = engine.tensor(np.zeros(BIG), dtype=engine.float64, requires_grad=True)
    a = x.exp()
    c = a * 3.0
    u = a + 0.0
    kept: list[engine.Tensor] = []
    u.register_hook(kept.append)
    (c + u * 2.0).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(kept[0].numpy(), np.full(BIG, 2.0))
    np.testing.assert_array_equal(x.grad.numpy(), np.full(BIG, 5.0))


def test_the_gradient_passed_to_backward_is_not_added_into() -> None:
    # AddBackward0 hands the caller's gradient itself to exp's buffer, first.
    x = engine.tensor(np.zeros(BIG), dtype=engine.float64, requires_grad=True)
    a = x.exp()
    c = a * 3.0
    y = c + a
    gradient = engine.tensor(np.ones(BIG), dtype=engine.float64)
    y.backward(gradient)
    assert x.grad is not None
    np.testing.assert_array_equal(gradient.numpy(), np.ones(BIG))
    np.testing.assert_array_equal(x.grad.numpy(), np.full(BIG, 4.0))


def test_create_graph_sums_stay_differentiable() -> None:
    x = engine.tensor(np.linspace(0.1, 1.0, BIG), dtype=engine.float64, requires_grad=True)
    a = x * x
    loss = (a * 2.0 + a * 3.0).sum()
    (g,) = engine.autograd.grad(loss, x, create_graph=True)
    assert g.grad_fn is not None
    (gg,) = engine.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), np.full(BIG, 10.0))
