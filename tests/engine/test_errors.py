"""Errors: carried to the caller from any thread, PyTorch's messages, engine stays usable."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import engine
from engine import events


class Boom(ValueError):
    """A distinctive exception type, to check the caller gets the original."""


class _Explode(engine.Function):
    @staticmethod
    def forward(ctx: object, x: engine.Tensor) -> engine.Tensor:
        return x * 1.0

    @staticmethod
    def backward(ctx: object, grad: engine.Tensor) -> engine.Tensor:
        raise Boom(f"exploded on {threading.current_thread().name}")


@pytest.mark.parametrize("device", ["cpu", "sim:0", "sim:1"])
def test_error_in_backward_reaches_caller_with_original_type(
    device: str, recorded: list[events.Event]
) -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    other = engine.tensor([1.0, 2.0], requires_grad=True)
    branch = _Explode.apply(x.to(device)).to("cpu")
    loss = (branch + other * 2.0).sum()
    with pytest.raises(Boom, match="exploded on") as info:
        loss.backward()
    expected_thread = "MainThread" if device == "cpu" else f"autograd-{device}"
    assert str(info.value) == f"exploded on {expected_thread}"
    errors = [e for e in recorded if e.kind == "error"]
    assert errors[0].node_name == "_ExplodeBackward" and errors[0].data["exc_type"] == "Boom"
    end = [e for e in recorded if e.kind == "graph_task_end"]
    assert end[-1].data["status"] == "error"
    # The engine is still usable, on every thread.
    y = engine.tensor([3.0], requires_grad=True)
    (y.to(device) * 2.0).to("cpu").sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [2.0])


def test_first_error_wins_and_the_rest_is_dropped(recorded: list[events.Event]) -> None:
    x = engine.tensor([1.0], requires_grad=True)
    a = _Explode.apply(x)
    b = _Explode.apply(x)
    with pytest.raises(Boom):
        (a + b).sum().backward()
    firsts = [e for e in recorded if e.kind == "error" and e.data["first"]]
    assert len(firsts) == 1
    started = [e for e in recorded if e.kind == "node_start" and e.node_name == "_ExplodeBackward"]
    assert len(started) == 1, "after the first error no other node of the graph task runs"
    assert x.grad is None


def test_non_scalar_implicit_grad() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(
        RuntimeError, match="^grad can be implicitly created only for scalar outputs$"
    ):
        (x * 2.0).backward()


def test_outputs_that_do_not_require_grad() -> None:
    with pytest.raises(
        RuntimeError,
        match="^element 0 of tensors does not require grad and does not have a grad_fn$",
    ):
        engine.tensor([1.0]).sum().backward()


def test_empty_inputs() -> None:
    x = engine.tensor([1.0], requires_grad=True)
    with pytest.raises(
        RuntimeError, match="^`inputs` argument to `backward\\(\\)` cannot be empty.$"
    ):
        engine.backward([(x * 2.0).sum()], inputs=[])
    with pytest.raises(RuntimeError, match="^`inputs` argument to `grad\\(\\)` cannot be empty.$"):
        engine.grad((x * 2.0).sum(), [])


def test_grad_shape_mismatch() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="Mismatch in shape: grad_output\\[0\\] has a shape of"):
        (x * 2.0).backward(engine.ones(3))


def test_inplace_on_leaf_that_requires_grad() -> None:
    x = engine.tensor([1.0], requires_grad=True)
    with pytest.raises(
        RuntimeError,
        match="^a leaf Variable that requires grad is being used in an in-place operation.$",
    ):
        x.add_(1.0)
    with engine.no_grad():
        x.add_(1.0)
    assert x._version == 1


def test_modified_saved_tensor_raises_version_error() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    y = h * h
    h.mul_(2.0)
    with pytest.raises(RuntimeError) as info:
        y.sum().backward()
    msg = str(info.value)
    assert msg.startswith(
        "one of the variables needed for gradient computation has been modified by an inplace operation: [engine.FloatTensor [2]], which is output 0 of Mul, is at version 1; expected version 0 instead. Hint:"
    )
    # The engine stays usable.
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_wrong_number_of_gradients_from_a_function() -> None:
    class Two(engine.Function):
        @staticmethod
        def forward(ctx: object, a: engine.Tensor, b: engine.Tensor) -> engine.Tensor:
            return a * b

        @staticmethod
        def backward(ctx: object, grad: engine.Tensor) -> engine.Tensor:
            return grad

    x = engine.tensor([1.0], requires_grad=True)
    with pytest.raises(
        RuntimeError,
        match="^function TwoBackward returned an incorrect number of gradients \\(expected 2, got 1\\)$",
    ):
        Two.apply(x, x).sum().backward()


def test_invalid_gradient_shape_from_a_node_names_it() -> None:
    class BadShape(engine.Function):
        @staticmethod
        def forward(ctx: object, a: engine.Tensor) -> engine.Tensor:
            return a * 1.0

        @staticmethod
        def backward(ctx: object, grad: engine.Tensor) -> engine.Tensor:
            return engine.ones(5)

    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(
        RuntimeError,
        match="^Function BadShapeBackward returned an invalid gradient at index 0 - got \\[5\\] but expected shape compatible with \\[2\\]$",
    ):
        BadShape.apply(x).sum().backward()


def test_listener_that_raises_is_unsubscribed_and_backward_completes() -> None:
    def bad(event: events.Event) -> None:
        raise KeyError("listener bug")

    x = engine.tensor([1.0], requires_grad=True)
    with pytest.warns(RuntimeWarning, match="raised KeyError"), events.listen(bad):
        (x * 2.0).sum().backward()
        assert bad not in events.HUB.listeners
    np.testing.assert_allclose(x.grad.numpy(), [2.0])


@pytest.mark.oracle
def test_messages_match_pytorch(torch: object) -> None:
    cases = {
        "implicit": lambda lib, t: (t([1.0, 2.0], requires_grad=True) * 2).backward(),
        "no_grad_fn": lambda lib, t: t([1.0]).sum().backward(),
        "empty_inputs": lambda lib, t: (
            lib.autograd.backward([(t([1.0], requires_grad=True) * 2).sum()], inputs=[])
            if lib is torch
            else lib.backward([(t([1.0], requires_grad=True) * 2).sum()], inputs=[])
        ),
        "leaf_inplace": lambda lib, t: t([1.0], requires_grad=True).add_(1.0),
        "twice": _twice,
        "unused": lambda lib, t: (lib.autograd.grad if lib is torch else lib.grad)(
            (t([1.0], requires_grad=True) * 2).sum(), [t([1.0], requires_grad=True)]
        ),
    }
    for name, case in cases.items():
        msgs = []
        for lib, make in ((engine, engine.tensor), (torch, torch.tensor)):  # type: ignore[attr-defined]
            with pytest.raises(RuntimeError) as info:
                case(lib, make)
            msgs.append(str(info.value))
        assert msgs[0] == msgs[1], name


def _twice(lib: object, t: object) -> None:
    x = t([1.0, 2.0], requires_grad=True)  # type: ignore[operator]
    y = (x * x).sum()
    y.backward()
    y.backward()
