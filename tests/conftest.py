"""Shared fixtures: the PyTorch oracle and a clean engine between tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import engine
from autograd_viz.sources.summaries import resolve_summaries
from engine import anomaly, events

GPU_SKIP = "needs CuPy and an NVIDIA GPU"
"""The reason every test marked ``gpu`` gives when it is skipped (tests/gpu/conftest.py)."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Fold every GPU skip into one line of the summary, not one per test and line.

    ``-ra`` lists skips by file, line and reason; a machine without a GPU
    skips hundreds of parametrized GPU tests, which drowned the summary.
    """
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and longrepr[2].endswith(GPU_SKIP):
        where = str(Path(__file__).parent / "gpu")
        report.longrepr = (where, None, f"Skipped: {GPU_SKIP} (run them with pytest -m gpu)")


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
        resolve_summaries(event)  # into each lazy summary's .summary: the arrays go
        with lock:
            seen.append(event)

    with events.listen(listener):
        yield seen
