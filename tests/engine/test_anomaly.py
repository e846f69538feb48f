"""Anomaly mode: forward tracebacks, NaN checks, PyTorch's warnings and messages."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import engine
from engine import events


def test_nan_in_backward_names_the_node() -> None:
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        mode = engine.detect_anomaly()
    with mode:
        x = engine.tensor([0.0, 1.0], requires_grad=True)
        y = x.sqrt()
        with (
            pytest.raises(
                RuntimeError,
                match="^Function 'SqrtBackward0' returned nan values in its 0th output.$",
            ),
            pytest.warns(
                UserWarning,
                match="Error detected in SqrtBackward0. Traceback of forward call that caused the error:",
            ),
        ):
            (y * 0.0).sum().backward()
    assert not engine.is_anomaly_enabled()


def test_forward_traceback_is_stored_and_points_at_user_code() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with engine.detect_anomaly():
            x = engine.tensor([1.0], requires_grad=True)
            y = x * 2.0  # the line the traceback must show
    stack = "".join(y.grad_fn.metadata["traceback_"])
    assert "test_anomaly.py" in stack and "y = x * 2.0" in stack
    assert "engine/ops" not in stack
    z = x * 3.0
    assert "traceback_" not in z.grad_fn.metadata


def test_anomaly_event_carries_the_traceback(recorded: list[events.Event]) -> None:
    engine.set_detect_anomaly(True)
    try:
        x = engine.tensor([0.0], requires_grad=True)
        loss = (x.sqrt() * 0.0).sum()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(RuntimeError, match="returned nan values"):
                loss.backward()
    finally:
        engine.set_detect_anomaly(False)
    anomalies = [e for e in recorded if e.kind == "anomaly"]
    assert len(anomalies) == 1 and anomalies[0].node_name == "SqrtBackward0"
    assert anomalies[0].data["grad"].resolve().nan_count == 1
    assert "x.sqrt()" in "".join(anomalies[0].data["traceback"])


def test_check_nan_false_lets_nan_through() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with engine.detect_anomaly(check_nan=False):
            x = engine.tensor([0.0], requires_grad=True)
            (x.sqrt() * 0.0).sum().backward()
    assert np.isnan(x.grad.numpy()).all()


@pytest.mark.oracle
def test_nan_message_matches_pytorch(torch: object) -> None:
    msgs = []
    for lib, make in ((engine, engine.tensor), (torch, torch.tensor)):  # type: ignore[attr-defined]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            detect = engine.detect_anomaly if lib is engine else torch.autograd.detect_anomaly  # type: ignore[attr-defined]
            with detect():
                x = make([0.0, 4.0], requires_grad=True)
                with pytest.raises(RuntimeError) as info:
                    (x.sqrt() * 0.0).sum().backward()
        msgs.append(str(info.value))
    assert msgs[0] == msgs[1]
