"""Stopping a live session mid-backward under PyTorch's anomaly mode prints no "Error
detected in" about the node it cancelled (Note [A cancel is no error of the node] in
``autograd_viz/live/gate.py``), and changes nothing else."""

from __future__ import annotations

import warnings

import pytest

from autograd_viz.live import LiveSession, SessionCancelled
from tests.viz.live.test_live import no_new_threads  # noqa: F401 - the fixture, with its checks

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("no_new_threads")

TIMEOUT = 10.0


def _step_under_anomaly_mode() -> None:
    x = torch.ones(3, requires_grad=True)
    with torch.autograd.detect_anomaly():
        (x * 2).sum().backward()


def test_stopping_mid_backward_gives_no_anomaly_warning_and_leaves_the_filters() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filters = list(warnings.filters)
        session = LiveSession(_step_under_anomaly_mode).start()
        for _ in range(3):
            assert session.step(timeout=TIMEOUT) is not None
        session.stop()
        assert isinstance(session.error, SessionCancelled)
        assert warnings.filters == filters  # ours is gone once the target ended
        # A node's own failure under anomaly mode still warns as PyTorch does.
        x = torch.ones(3, requires_grad=True)
        y = (x * 2).sum()
        y.grad_fn.register_prehook(lambda grads: 1 / 0)
        with torch.autograd.detect_anomaly(), pytest.raises(ZeroDivisionError):
            y.backward()
    detected = [str(w.message) for w in caught if "Error detected in" in str(w.message)]
    assert len(detected) == 1 and detected[0].startswith("Error detected in SumBackward0")
    assert not torch.is_anomaly_enabled()


def test_stopping_mid_backward_on_our_engine_gives_no_anomaly_warning() -> None:
    import engine
    from engine.anomaly import detect_anomaly

    def step() -> None:
        x = engine.tensor([1.0, 2.0], requires_grad=True)
        with detect_anomaly():
            (x * 2).sum().backward()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = LiveSession(step).start()
        for _ in range(3):
            assert session.step(timeout=TIMEOUT) is not None
        session.stop()
    assert isinstance(session.error, SessionCancelled)
    assert not [w for w in caught if "Error detected in" in str(w.message)]
