"""A listener's raise on purpose is no error of the node (Note [No anomaly warning for a
listener's raise] in engine/completion.py): anomaly mode gives no "Error detected in"."""

from __future__ import annotations

import warnings

import pytest

import engine
from engine import events
from engine.anomaly import detect_anomaly


class Cancelled(RuntimeError):
    """What a debugger raises in a listener to cancel a backward pass."""

    _engine_propagate = True


class Broken(engine.Function):
    """A node whose own backward fails."""

    @staticmethod
    def forward(ctx: object, x: engine.Tensor) -> engine.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: object, grad: engine.Tensor) -> engine.Tensor:
        raise ValueError("no gradient")


def _messages(step: object) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with detect_anomaly():
            step()  # type: ignore[operator]
    return [str(w.message) for w in caught if "Error detected in" in str(w.message)]


def test_a_listener_cancelling_mid_backward_gives_no_anomaly_warning() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)

    def cancel_at_sum(event: events.Event) -> None:
        if event.kind == "node_start" and event.node_name == "SumBackward0":
            raise Cancelled("the session was stopped")

    def step() -> None:
        y = (x * 2).sum()
        with events.listen(cancel_at_sum), pytest.raises(Cancelled):
            y.backward()

    assert _messages(step) == []
    assert x.grad is None


def test_a_node_that_fails_still_warns_with_its_forward_line() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)

    def step() -> None:
        y = Broken.apply(x).sum()
        with pytest.raises(ValueError, match="no gradient"):
            y.backward()

    (message,) = _messages(step)
    assert message.startswith("Error detected in BrokenBackward")
