"""Fixtures for the cuda tests: the same test bodies on a fake CuPy and on a real GPU.

``backend`` has two params. ``fake`` always runs: it installs
:mod:`tests.gpu.fakecupy` as the engine's CuPy, so the cuda path runs here on
NumPy with CuPy's strictness. ``real`` is marked ``gpu`` and runs only where
CuPy sees an NVIDIA GPU (``pytest -m gpu`` selects just those).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import engine
from engine import devices
from tests.gpu import fakecupy

NO_GPU = "needs CuPy and an NVIDIA GPU"


@dataclass(frozen=True)
class Backend:
    """The CuPy the engine runs on in this test."""

    name: str
    """``"fake"`` or ``"real"``."""
    xp: ModuleType
    """The array module of ``cuda`` tensors."""

    def host(self, array: Any) -> np.ndarray:
        """A NumPy copy of a device or host array."""
        return self.xp.asnumpy(array) if isinstance(array, self.xp.ndarray) else np.asarray(array)


def _real_cuda_available() -> bool:
    if devices._cupy_module is fakecupy:
        return False
    return devices.cuda_is_available()


def _install_fake(monkeypatch: pytest.MonkeyPatch, device_count: int = 1) -> ModuleType:
    fakecupy.reset(device_count)
    monkeypatch.setattr(devices, "_cupy_module", fakecupy)
    return fakecupy


@pytest.fixture(
    params=[
        pytest.param("fake", id="fake"),
        pytest.param("real", id="real", marks=pytest.mark.gpu),
    ]
)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    """CuPy for ``cuda`` tensors: the fake, or the real one on a GPU (skipped elsewhere)."""
    if request.param == "real":
        if not _real_cuda_available():
            pytest.skip(NO_GPU)
        xp = devices._cupy()
    else:
        xp = _install_fake(monkeypatch)
    try:
        yield Backend(request.param, xp)
    finally:
        # The cuda worker thread must not outlive the CuPy it was started with.
        engine.get_default_engine().shutdown()


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The fake CuPy alone (one GPU), for what only it can show (its counters, its devices)."""
    try:
        yield _install_fake(monkeypatch)
    finally:
        engine.get_default_engine().shutdown()


@pytest.fixture
def two_fake_gpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The fake CuPy with two GPUs, ``cuda:0`` and ``cuda:1``."""
    try:
        yield _install_fake(monkeypatch, device_count=2)
    finally:
        engine.get_default_engine().shutdown()


@pytest.fixture
def cupy_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CuPy at all: ``import cupy`` fails (it really does where CuPy is not installed)."""
    monkeypatch.setattr(devices, "_cupy_module", None)
    monkeypatch.setitem(sys.modules, "cupy", None)
