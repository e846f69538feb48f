"""Grad modes: thread-local switches for recording the graph, as in ``torch``."""

from __future__ import annotations

import abc
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "enable_grad",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
    "no_grad",
    "set_grad_enabled",
]

F = TypeVar("F", bound=Callable[..., Any])


class _GradState(threading.local):
    def __init__(self) -> None:
        self.enabled = True
        self.inference = False


_state = _GradState()

# Note [Inference mode counted]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Every op asks whether its thread is in inference mode, to mark the tensor
# it makes; reading a threading.local's attribute finds the thread's dict
# first, a quarter of a microsecond, a tenth of a backward node's cost on a
# chain. ``inference_threads`` counts the threads inside inference mode now:
# where it is 0, no thread is, so no thread needs to read its own flag
# (``inference_threads and _state.inference``). A thread's own entry is
# counted before it makes a tensor, so it never misses itself; the count is
# changed under a lock, so two threads never lose an update. A thread that
# ends inside inference mode leaves the count high: the others then read
# their flag, and are right.
inference_threads = 0
"""How many threads are inside :class:`inference_mode` now (Note [Inference mode counted])."""
_inference_lock = threading.Lock()


def _set_inference(flag: bool) -> None:
    """Set this thread's inference flag, keeping ``inference_threads`` counted."""
    global inference_threads  # the count is shared by every thread, by design
    with _inference_lock:
        if flag and not _state.inference:
            inference_threads += 1
        elif not flag and _state.inference:
            inference_threads -= 1
        _state.inference = flag


def is_grad_enabled() -> bool:
    """Whether operations on this thread record the graph."""
    return _state.enabled


def is_inference_mode_enabled() -> bool:
    """Whether this thread is inside :class:`inference_mode`."""
    return _state.inference


def thread_modes() -> dict[str, Any]:
    """The running thread's grad-mode fields (``enabled``, ``inference``) as its own dict.

    Note [Grad mode as the thread's dict]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    A ``threading.local``'s attributes live in one dict per thread, which
    ``__dict__`` gives for the thread that asks. Each attribute read or write
    of the local finds that dict first (several lookups, a tenth of a
    microsecond here); a store into the dict itself is one. The engine
    restores grad mode before every node it runs (a node may change it and
    not change it back, and PyTorch restores it per task), so its loop takes
    the dict once and stores into it. The dict belongs to the thread that
    called this: never hand it to another.
    """
    return _state.__dict__


def _set_enabled(mode: bool) -> None:
    _state.enabled = mode


class _DecoratorContextManager(abc.ABC):
    """A context manager that also decorates functions (a fresh instance per call)."""

    def __call__(self, func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self.clone():
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def clone(self) -> _DecoratorContextManager:
        return self.__class__()

    @abc.abstractmethod
    def __enter__(self) -> None: ...

    @abc.abstractmethod
    def __exit__(self, *exc: object) -> None: ...


class no_grad(_DecoratorContextManager):  # noqa: N801 - torch's name
    """Disable graph recording on this thread, as a context manager or decorator."""

    def __init__(self) -> None:
        self.prev = False

    def __enter__(self) -> None:
        self.prev = _state.enabled
        _state.enabled = False

    def __exit__(self, *exc: object) -> None:
        _state.enabled = self.prev


class enable_grad(_DecoratorContextManager):  # noqa: N801 - torch's name
    """Enable graph recording on this thread, as a context manager or decorator."""

    def __init__(self) -> None:
        self.prev = False

    def __enter__(self) -> None:
        self.prev = _state.enabled
        _state.enabled = True

    def __exit__(self, *exc: object) -> None:
        _state.enabled = self.prev


class set_grad_enabled(_DecoratorContextManager):  # noqa: N801 - torch's name
    """Set graph recording on or off.

    Like ``torch.set_grad_enabled`` it takes effect immediately when called as
    a function, and is restored on exit when used as a context manager.

    Args:
        mode: ``True`` to record the graph, ``False`` not to.

    Raises:
        TypeError: if ``mode`` is not a bool.
    """

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(
                f"set_grad_enabled(): argument 'mode' must be bool, not {type(mode).__name__}"
            )
        self.prev = _state.enabled
        self.mode = mode
        _state.enabled = mode

    def clone(self) -> set_grad_enabled:
        return self.__class__(self.mode)

    def __call__(self, func: F) -> F:
        _state.enabled = self.prev  # as a decorator, nothing changes until the call
        return super().__call__(func)

    def __enter__(self) -> None:
        _state.enabled = self.mode

    def __exit__(self, *exc: object) -> None:
        _state.enabled = self.prev


class inference_mode(_DecoratorContextManager):  # noqa: N801 - torch's name
    """Like :class:`no_grad`, and tensors created inside are inference tensors.

    Inference tensors can never be saved for backward later; using one where
    autograd needs it raises a clear error.

    Args:
        mode: ``False`` makes this a no-op, as in ``torch``.
    """

    def __init__(self, mode: bool = True) -> None:
        self.mode = mode
        self.prev = (True, False)

    def clone(self) -> inference_mode:
        return self.__class__(self.mode)

    def __enter__(self) -> None:
        self.prev = (_state.enabled, _state.inference)
        if self.mode:
            _state.enabled = False
            _set_inference(True)

    def __exit__(self, *exc: object) -> None:
        _state.enabled = self.prev[0]
        _set_inference(self.prev[1])
