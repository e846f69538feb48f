"""Shared fixtures: the PyTorch oracle and a clean engine between tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import engine
from engine import anomaly, events


@pytest.fixture
def torch() -> Any:
    """PyTorch 2.13 as the oracle; tests using it are skipped when it is not installed."""
    return pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _engine_state() -> Iterator[None]:
    """Every test starts with grad mode on, anomaly mode off and no listeners."""
    yield
    assert engine.is_grad_enabled(), "a test left grad mode off"
    anomaly.STATE.enabled = False
    anomaly.STATE.check_nan = True
    for listener in events.HUB.listeners:
        events.unsubscribe(listener)


@pytest.fixture
def recorded() -> Iterator[list[events.Event]]:
    """Every event emitted during the test, in order of emission."""
    seen: list[events.Event] = []
    lock = threading.Lock()

    def listener(event: events.Event) -> None:
        events.resolve_summaries(event)  # the arrays are gone once backward returns
        with lock:
            seen.append(event)

    with events.listen(listener):
        yield seen
