"""In-place changes through views and assignments record PyTorch's graph, node for node.

The base of a view changed in place takes a ``CopySlices`` whose next functions are the
base's old history and the in-place op's other inputs; the op's own node runs inside it.
Every program here is compared with PyTorch 2.13: node names and next functions, values,
gradients and the order the nodes run in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import engine
from engine import events
from engine.saved import ERR_BACKWARD_TWICE
from tests.engine.test_torch_order import _both

Program = Callable[[Any, list[Any]], Any]
"""``program(lib, [x, w])``: the tensor whose graph is compared (``x``: 3 values, ``w``: 0-dim)."""


def signature(node: Any) -> Any:
    if node is None:
        return None
    name = node.name().removeprefix("torch::autograd::")
    return (name, tuple(signature(fn) for fn, _ in node.next_functions))


def _scalar_mul_of_select(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 1.0
    y[0].mul_(2.0)
    return y


def _tensor_mul_of_select(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 1.0
    y[0].mul_(xs[1])
    return y


def _add_to_a_slice_then_use_it(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 1.0
    v = y[1:]
    v.add_(xs[1])
    return v * 2.0


def _unary_on_a_slice(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 1.0
    y[1:].exp_()
    return y


def _mul_through_a_transpose(lib: Any, xs: list[Any]) -> Any:
    y = (xs[0] * 1.0).reshape(1, 3)
    y.t().mul_(xs[1])
    return y


def _select_of_a_slice(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 1.0
    y[0:2][1].mul_(xs[1])
    return y


def _two_changes_through_views(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 1.0
    y[1] += xs[1]
    y[2:].sub_(xs[0][:1] * 3.0)
    return y


def _into_a_base_without_grad(lib: Any, xs: list[Any]) -> Any:
    y = lib.zeros(3)
    y[1:].add_(xs[0][1:])
    return y


def _view_of_a_view_changed(lib: Any, xs: list[Any]) -> Any:
    y = (xs[0] * 1.0).reshape(3, 1)
    y[1:, 0].div_(xs[1] + 3.0)
    return y


def _assign_number(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 1.0
    y[1] = 5.0
    return y


def _assign_0dim(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 1.0
    y[1:] = xs[1]
    return y


def _assign_advanced(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 1.0
    y[lib.tensor([0, 2])] = xs[1]
    return y


def _assign_into_zeros(lib: Any, xs: list[Any]) -> Any:
    y = lib.zeros(3)
    y[1] = xs[1]
    return y


def _assign_same_shape(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 1.0
    y[1:] = xs[1] * lib.ones(2)
    return y


def _assign_everything_0dim(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 1.0
    y[...] = xs[1]
    return y


def _assign_everything_a_tensor(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 1.0
    y[:] = xs[0] * 2.0
    return y


def _assign_everything_broadcast(lib: Any, xs: list[Any]) -> Any:
    y = (xs[0] * 1.0).reshape(1, 3).expand(2, 3).contiguous()
    y[:] = xs[0]
    return y


def _assign_row_broadcast(lib: Any, xs: list[Any]) -> Any:
    y = (xs[0] * 1.0).reshape(3, 1).expand(3, 2).contiguous()
    y[1] = xs[1].reshape(1, 1)
    return y


def _assign_into_a_view(lib: Any, xs: list[Any]) -> Any:
    y = (xs[0] * 1.0).reshape(3, 1)
    y[1:, 0] = xs[1]
    return y


def _assign_then_change_a_view(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 2.0
    v = y[:2]
    y[2] = xs[1]
    v.mul_(xs[1])
    return v + y[1:]


def _stale_views_used_later(lib: Any, xs: list[Any]) -> Any:
    y = xs[0] * 1.0
    v, u = y[1:], y[:2]
    y[0].mul_(xs[1])  # v and u are stale now: PyTorch makes their nodes when they are used
    a = (v * 2.0).sum()
    b = (y * 3.0).sum()
    return lib.stack([a, b, (u * xs[1]).sum()])


PROGRAMS: dict[str, Program] = {
    "y[0].mul_(2.0)": _scalar_mul_of_select,
    "y[0].mul_(w)": _tensor_mul_of_select,
    "y[1:].add_(w), then the view": _add_to_a_slice_then_use_it,
    "y[1:].exp_()": _unary_on_a_slice,
    "y.t().mul_(w)": _mul_through_a_transpose,
    "y[0:2][1].mul_(w)": _select_of_a_slice,
    "y[1] += w; y[2:].sub_(...)": _two_changes_through_views,
    "zeros(3)[1:].add_(x[1:])": _into_a_base_without_grad,
    "a view of a view": _view_of_a_view_changed,
    "y[1] = 5.0": _assign_number,
    "y[1:] = w": _assign_0dim,
    "y[tensor([0, 2])] = w": _assign_advanced,
    "zeros(3)[1] = w": _assign_into_zeros,
    "y[1:] = w * ones(2)": _assign_same_shape,
    "y[...] = w": _assign_everything_0dim,
    "y[:] = x * 2": _assign_everything_a_tensor,
    "y[:] = x, broadcast": _assign_everything_broadcast,
    "y[1] = w.reshape(1, 1)": _assign_row_broadcast,
    "y[1:, 0] = w on a view": _assign_into_a_view,
    "assign, then change a view": _assign_then_change_a_view,
    "stale views used later": _stale_views_used_later,
}

X = np.array([1.0, 2.0, 3.0], dtype=np.float32)
W = np.array(3.0, dtype=np.float32)


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_graph_values_and_gradients_are_pytorchs(torch: Any, name: str) -> None:
    program = PROGRAMS[name]
    seen = []
    for lib in (engine, torch):
        xs = [lib.tensor(X, requires_grad=True), lib.tensor(W, requires_grad=True)]
        out = program(lib, xs)
        graph = signature(out.grad_fn)
        values = out.tolist()
        (out * out).sum().backward()
        seen.append((graph, values, [None if x.grad is None else x.grad.tolist() for x in xs]))
    (graph, values, grads), (their_graph, their_values, their_grads) = seen
    assert graph == their_graph
    np.testing.assert_allclose(values, their_values, rtol=1e-6)
    for a, b in zip(grads, their_grads, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-6)


def _names_in_run_order(lib: Any, program: Program) -> list[str]:
    """The nodes' names in the order they run, seen by a prehook on every node."""
    xs = [lib.tensor(X, requires_grad=True), lib.tensor(W, requires_grad=True)]
    loss = (program(lib, xs) ** 2).sum()
    order: list[str] = []
    stack, seen = [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        name = node.name().removeprefix("torch::autograd::")
        node.register_prehook(lambda grads, name=name: order.append(name))
        stack.extend(fn for fn, _ in node.next_functions)
    loss.backward()
    return order


def _names_in_event_order(program: Program) -> list[str]:
    """The same, seen through the engine's node_start events (no hooks: the plain path)."""
    xs = [engine.tensor(X, requires_grad=True), engine.tensor(W, requires_grad=True)]
    loss = (program(engine, xs) ** 2).sum()
    order: list[str] = []

    def listener(event: events.Event) -> None:
        if event.kind == "node_start":
            order.append(event.node_name)

    with events.listen(listener):
        loss.backward()
    return order


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_nodes_run_in_pytorchs_order(torch: Any, name: str) -> None:
    """The op inside a CopySlices never runs as a node of its own, in either engine."""
    program = PROGRAMS[name]
    expected = _names_in_run_order(torch, program)
    assert _names_in_run_order(engine, program) == expected
    assert _names_in_event_order(program) == expected


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_nodes_number_and_break_ties_as_in_pytorch(torch: Any, name: str) -> None:
    """Every node ranks by sequence number as PyTorch's (Note [Views numbered when read])."""
    program = PROGRAMS[name]

    def loss(lib: Any, xs: list[Any]) -> Any:
        # The zero terms give every leaf a gradient, which _both compares.
        return (program(lib, xs) ** 2).sum() + xs[1] * 0.0 + (xs[0] * 0.0).sum()

    _both(loss, [X, W], torch)


def test_a_stale_view_is_numbered_when_used() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1.0
    v = y[1:]
    y[0].mul_(2.0)
    stale = v.grad_fn
    assert stale.name() == "AsStridedBackward0" and stale._unnumbered
    used = v * 2.0
    assert not stale._unnumbered and stale.sequence_nr == used.grad_fn.sequence_nr + 1
    y[1].add_(1.0)  # the written view's node is numbered at once; v's new one is not
    assert v.grad_fn is not stale and v.grad_fn._unnumbered


def test_the_op_inside_copyslices_is_not_in_the_graph() -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1.0
    old = y.grad_fn
    v = y[0]
    v.mul_(2.0)
    node = y.grad_fn
    assert node.name() == "CopySlices" and node.next_functions[0][0] is old
    assert node.fn.name() == "MulBackward0" and node.sequence_nr > node.fn.sequence_nr
    assert v.grad_fn.name() == "AsStridedBackward0" and v.grad_fn.next_functions[0][0] is node
    assert y.tolist() == [2.0, 2.0, 3.0] and y._version == v._version == 1


@pytest.mark.parametrize("name", [n for n in PROGRAMS if n != "y[tensor([0, 2])] = w"])
def test_gradcheck_and_gradgradcheck(name: str) -> None:
    program = PROGRAMS[name]

    def fn(x: engine.Tensor, w: engine.Tensor) -> engine.Tensor:
        return program(engine, [x, w]) ** 2

    x = engine.tensor(X, dtype=engine.float64, requires_grad=True)
    w = engine.tensor(W, dtype=engine.float64, requires_grad=True)
    engine.set_default_dtype(engine.float64)  # the programs' zeros and ones
    try:
        assert engine.gradcheck(fn, (x, w))
        assert engine.gradgradcheck(fn, (x, w))
    finally:
        engine.set_default_dtype(engine.float32)


@pytest.mark.oracle
def test_a_second_backward_through_copyslices_raises_like_pytorch(torch: Any) -> None:
    for lib in (engine, torch):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * 1.0
        y[0].mul_(2.0)  # nothing saved: only the op inside is released
        loss = y.sum()
        loss.backward(retain_graph=True)
        loss.backward()
        assert x.grad.tolist() == [4.0, 2.0, 2.0]
        with pytest.raises(RuntimeError) as info:
            loss.backward()
        assert str(info.value) == ERR_BACKWARD_TWICE


@pytest.mark.oracle
def test_only_the_inputs_asked_for_are_computed(torch: Any) -> None:
    grads = []
    for lib in (engine, torch):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        w = lib.tensor(3.0, requires_grad=True)
        y = x * x
        y[1:].mul_(w)
        loss = (y * y).sum()
        loss.backward(inputs=[w], retain_graph=True)
        assert x.grad is None
        (gx,) = lib.autograd.grad(loss, [x]) if lib is torch else lib.grad(loss, [x])
        grads.append((w.grad.item(), gx.tolist()))
    np.testing.assert_allclose(grads[0][0], grads[1][0], rtol=1e-6)
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-6)
