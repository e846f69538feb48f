"""Devices and their array backends.

Three device types exist:

* ``cpu``: NumPy arrays, executed by the thread that called ``backward()``.
* ``cuda:N``: CuPy arrays, one engine worker thread per device. CuPy is
  imported lazily, the first time a ``cuda`` device is used; without CuPy or a
  GPU, using one is a clear ``RuntimeError`` and everything else works.
* ``sim:N``: a simulated accelerator backed by NumPy. Each ``sim`` device gets
  its own engine worker thread and ready queue, exactly as a GPU would, so the
  engine's cross-device routing, owner wake-up and per-device threads run (and
  are tested) on a machine without a GPU.
"""

from __future__ import annotations

import os
import threading
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "CPU",
    "Device",
    "cuda_is_available",
    "device_context",
    "device_of_array",
    "move_array",
    "set_sim_device_count",
    "sim_device_count",
    "synchronize",
]

only_cpu = True
"""Whether no device but the CPU has been made: until one is, every tensor is on the CPU
(Note [A process with only a CPU]). Never goes back to True."""


# Note [A process with only a CPU]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A ready node goes to the queue of its input buffer's device: its first
# gradient off the CPU, as in PyTorch. A tensor's device is one of the
# interned Device objects, and devices.only_cpu stays True until the first
# other one is made (a ``cuda`` or ``sim`` device, named by a program or
# by a test), so until then every gradient is on the CPU and the plain
# path sends every node to the CPU queue without looking at its
# gradients. (A gradient that reaches a buffer fits its input's metadata,
# device included, and that device was made when the forward ran; the
# flag, a module attribute, is still read for each node rather than once
# a call.) tests/engine/test_plain_path.py watches a fresh process make
# its first other device and route to it.

#: Number of simulated accelerators (``sim:0`` ... ``sim:{N-1}``).
_SIM_DEVICE_COUNT = 2


class Device:
    """A device a tensor lives on, such as ``cpu``, ``cuda:0`` or ``sim:1``.

    Devices are interned: ``Device("sim:0") is Device("sim", 0)``.
    """

    __slots__ = ("__weakref__", "_str", "index", "type")

    type: str
    """The device type: ``"cpu"``, ``"cuda"`` or ``"sim"``."""
    index: int | None
    """The device index; ``None`` for ``cpu``."""
    _str: str

    _cache: ClassVar[dict[tuple[str, int | None], Device]] = {}
    _cache_lock: ClassVar[threading.Lock] = threading.Lock()

    def __new__(cls, type: str | Device, index: int | None = None) -> Device:
        global only_cpu  # see its note
        if isinstance(type, Device):
            return type
        key = _parse(type, index)
        found = cls._cache.get(key)
        if found is not None:
            return found
        with cls._cache_lock:
            found = cls._cache.get(key)
            if found is None:
                if key[0] != "cpu":
                    only_cpu = False  # before any tensor can be on the new device
                found = object.__new__(cls)
                found.type, found.index = key
                found._str = key[0] if key[1] is None else f"{key[0]}:{key[1]}"
                cls._cache[key] = found
            return found

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self) -> str:
        return self._str

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                return Device(other) is self
            except (ValueError, RuntimeError):
                return False
        return other is self

    def __hash__(self) -> int:
        return hash(self._str)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Device, (self._str,))

    @property
    def xp(self) -> ModuleType:
        """The array module (``numpy`` or ``cupy``) that holds this device's data."""
        if self.type == "cuda":
            return _cupy()
        return np


def _parse(spec: str, index: int | None) -> tuple[str, int | None]:
    if not isinstance(spec, str):
        raise TypeError(f"device() expected a string or a Device, but got {type(spec).__name__}")
    kind, sep, rest = spec.partition(":")
    if sep:
        if index is not None:
            raise ValueError(
                f"type (string) must not include an index because index was passed "
                f"explicitly: {spec}"
            )
        if not rest.isdigit():
            raise RuntimeError(f"Invalid device string: '{spec}'")
        index = int(rest)
    if kind == "cpu":
        if index not in (None, 0):
            raise RuntimeError(f"Invalid device string: '{spec}': the cpu device has no index")
        return ("cpu", None)
    if kind == "sim":
        index = 0 if index is None else index
        if index >= _SIM_DEVICE_COUNT:
            raise RuntimeError(
                f"sim device index {index} is out of range: {_SIM_DEVICE_COUNT} simulated "
                f"devices exist (sim:0 to sim:{_SIM_DEVICE_COUNT - 1}); raise the number with "
                f"engine.devices.set_sim_device_count(n)"
            )
        return ("sim", index)
    if kind == "cuda":
        return ("cuda", 0 if index is None else index)
    raise RuntimeError(
        f"Expected one of cpu, cuda, sim device type at start of device string: {spec}"
    )


def set_sim_device_count(count: int) -> None:
    """Set how many simulated accelerators exist (``sim:0`` ... ``sim:{count-1}``).

    Raises:
        ValueError: if ``count`` is not a positive integer.
    """
    global _SIM_DEVICE_COUNT
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"sim device count must be a positive integer, got {count!r}")
    _SIM_DEVICE_COUNT = count


def sim_device_count() -> int:
    """How many simulated accelerators exist."""
    return _SIM_DEVICE_COUNT


CPU = Device("cpu")

# Note [CUDA streams]
# ~~~~~~~~~~~~~~~~~~~
# A tensor's forward kernels are queued by the thread that ran the op; its
# backward kernels by the engine's worker thread of its device. Nothing but
# the stream orders the two: the engine relies on CuPy's default, the legacy
# default stream, which is one per device and shared by every host thread (and
# waits for the blocking streams a user may create). CuPy's per-thread default
# streams would give the worker a stream of its own, racing the forward, so
# they are refused. Work leaves a GPU only through cupy.asnumpy, which waits
# for the copy; leaves on a GPU are synchronized before backward() returns
# (GraphTask.leaf_devices), so their .grad is complete when the caller reads it.

_PER_THREAD_STREAMS = "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM"

_cupy_module: ModuleType | None = None


def _cupy() -> ModuleType:
    global _cupy_module
    if _cupy_module is None:
        if os.environ.get(_PER_THREAD_STREAMS, "0") != "0":
            raise RuntimeError(
                f"cuda devices need CuPy's legacy default stream, shared by the engine's "
                f"threads, but {_PER_THREAD_STREAMS}={os.environ[_PER_THREAD_STREAMS]} gives "
                f"each thread its own: unset it (see Note [CUDA streams] in engine/devices.py)"
            )
        try:
            import cupy
        except ImportError as exc:
            raise RuntimeError(
                "cuda devices need CuPy, which is not installed: install it with "
                "`pip install 'autograd-viz[cuda]'` on a machine with an NVIDIA GPU"
            ) from exc
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # CuPy raises its own CUDARuntimeError
            raise RuntimeError(f"cuda devices are not usable here: {exc}") from exc
        if count == 0:
            raise RuntimeError("cuda devices are not usable here: no NVIDIA GPU was found")
        _cupy_module = cupy
    return _cupy_module


def cuda_is_available() -> bool:
    """Whether CuPy is installed and sees at least one GPU."""
    try:
        _cupy()
    except RuntimeError:
        return False
    return True


def device_of_array(array: Any) -> Device:
    """The device an array lives on, for arrays handed to ``engine.tensor``."""
    if isinstance(array, np.ndarray | np.generic):
        return CPU
    if type(array).__module__.startswith("cupy") or (
        _cupy_module is not None and isinstance(array, _cupy_module.ndarray)
    ):
        return Device("cuda", int(array.device.id))
    return CPU


_NO_CONTEXT = nullcontext()


def device_context(device: Device) -> AbstractContextManager[Any]:
    """Make ``device`` CuPy's current device inside a ``with`` block (a no-op off ``cuda``).

    CuPy allocates new arrays, and runs kernels, on the calling thread's current device;
    code that creates ``cuda:N`` data does it inside this context.

    Raises:
        RuntimeError: without CuPy or a GPU, or when ``device`` is past the last GPU.
    """
    if device.type != "cuda":
        return _NO_CONTEXT
    cp = _cupy()
    count = int(cp.cuda.runtime.getDeviceCount())
    if device.index is None or device.index >= count:
        gpus = "cuda:0" if count == 1 else f"cuda:0 to cuda:{count - 1}"
        raise RuntimeError(
            f"CUDA error: invalid device ordinal: {device} does not exist: CuPy sees {count} "
            f"GPU{'s' if count != 1 else ''} ({gpus})"
        )
    return cp.cuda.Device(device.index)


def move_array(array: Any, src: Device, dst: Device) -> Any:
    """Copy ``array`` from ``src`` to ``dst`` (a new array; never aliases the source).

    A copy to the host (``cupy.asnumpy``) waits for the GPU, so a gradient moved off a
    GPU is complete when it arrives. Between two GPUs the copy goes through the host,
    which needs no peer access between them.
    """
    if src.type != "cuda" and dst.type != "cuda":
        return np.array(array, copy=True)
    cp = _cupy()
    if src.type == "cuda" and dst.type == "cuda" and src is not dst:
        array = cp.asnumpy(array)
    if dst.type == "cuda":
        with device_context(dst):
            return cp.array(array, copy=True)
    return cp.asnumpy(array)


def synchronize(device: Device) -> None:
    """Wait for all work queued on ``device`` (a no-op except on ``cuda``)."""
    if device.type == "cuda":
        cp = _cupy()
        with cp.cuda.Device(device.index):
            cp.cuda.get_current_stream().synchronize()
