"""Anomaly mode: forward tracebacks, NaN checks, PyTorch's warnings and messages."""

from __future__ import annotations

import warnings
from typing import Any

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
    assert anomalies[0].data["grad"].summary.nan_count == 1
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


def _induced_warnings(m: Any, grad: Any, anomaly: Any) -> tuple[str, list[str]]:
    """A NaN in a node made during a backward: the error and the anomaly warnings, in order."""
    x = m.tensor([1000.0, 1.0], requires_grad=True)
    v = m.tensor([1.0, 1.0], requires_grad=True)
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
        warnings.simplefilter("always")
        with anomaly():
            y = x.exp()  # inf at 1000
            (g,) = grad([y], [x], [v], create_graph=True)  # MulBackward0 made by ExpBackward0
            with pytest.raises(RuntimeError) as info:
                (g * 0.0).sum().backward()  # d/dv of v * exp(x) = 0 * inf: NaN in MulBackward0
    messages = [
        str(w.message).split(" (Triggered internally")[0]
        for w in caught
        if "Anomaly Detection has been enabled" not in str(w.message)
        and "encountered" not in str(w.message)
    ]
    return str(info.value), messages


def test_a_node_made_in_backward_names_the_node_that_induced_it() -> None:
    error, messages = _induced_warnings(engine, engine.grad, engine.detect_anomaly)
    assert error == "Function 'MulBackward0' returned nan values in its 0th output."
    assert messages[0].startswith("Error detected in MulBackward0. Traceback of forward call")
    assert messages[1].startswith(
        "\n\nPrevious calculation was induced by ExpBackward0. Traceback of forward call that "
        "induced the previous calculation:\n"
    )
    assert "y = x.exp()" in messages[1]
    assert len(messages) == 2


@pytest.mark.oracle
def test_induced_by_reads_as_pytorchs(torch: Any) -> None:
    ours = _induced_warnings(engine, engine.grad, engine.detect_anomaly)
    theirs = _induced_warnings(torch, torch.autograd.grad, torch.autograd.detect_anomaly)
    assert ours[0] == theirs[0]
    # The same warnings up to each forward stack (PyTorch's stacks also show torch's frames).
    assert [m.split("Traceback")[0] for m in ours[1]] == [
        m.split("Traceback")[0] for m in theirs[1]
    ]
    assert len(theirs[1]) == 2
