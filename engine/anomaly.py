"""Anomaly mode: forward tracebacks in node metadata and NaN checks in backward.

As in ``torch.autograd``, the mode is process-wide: nodes created on any thread
while it is on record the stack of the forward call that created them, and
every backward output is checked for NaN.
"""

from __future__ import annotations

import os
import traceback
import warnings
from typing import Any

from engine.grad_mode import _DecoratorContextManager


class _AnomalyState:
    __slots__ = ("check_nan", "enabled")

    def __init__(self) -> None:
        self.enabled = False
        self.check_nan = True


STATE = _AnomalyState()

_ENABLE_WARNING = (
    "Anomaly Detection has been enabled. This mode will increase the runtime and should only be "
    "enabled for debugging."
)


def is_anomaly_enabled() -> bool:
    """Whether anomaly mode is on."""
    return STATE.enabled


def is_anomaly_check_nan_enabled() -> bool:
    """Whether anomaly mode checks backward outputs for NaN."""
    return STATE.check_nan


class detect_anomaly(_DecoratorContextManager):  # noqa: N801 - torch's name
    """Turn anomaly mode on inside a ``with`` block or a decorated function.

    With it on, each node stores the traceback of the forward call that
    created it in ``node.metadata["traceback_"]``; an error in backward prints
    that traceback; a backward function that returns NaN raises
    ``RuntimeError: Function 'XBackward0' returned nan values in its 0th output.``

    Args:
        check_nan: check backward outputs for NaN (default ``True``).
    """

    def __init__(self, check_nan: bool = True) -> None:
        self.check_nan = check_nan
        self.prev = (False, True)
        warnings.warn(_ENABLE_WARNING, UserWarning, stacklevel=2)

    def clone(self) -> detect_anomaly:
        clone = self.__class__.__new__(self.__class__)
        clone.check_nan = self.check_nan
        clone.prev = (False, True)
        return clone

    def __enter__(self) -> None:
        self.prev = (STATE.enabled, STATE.check_nan)
        STATE.enabled = True
        STATE.check_nan = self.check_nan

    def __exit__(self, *exc: object) -> None:
        STATE.enabled, STATE.check_nan = self.prev


class set_detect_anomaly(_DecoratorContextManager):  # noqa: N801 - torch's name
    """Set anomaly mode on or off; immediately as a call, restored on exit as a context manager.

    Args:
        mode: turn anomaly mode on (``True``) or off (``False``).
        check_nan: check backward outputs for NaN.
    """

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self.prev = (STATE.enabled, STATE.check_nan)
        self.mode = mode
        self.check_nan = check_nan
        STATE.enabled = mode
        STATE.check_nan = check_nan

    def clone(self) -> set_detect_anomaly:
        return self.__class__(self.mode, self.check_nan)

    def __enter__(self) -> None:
        STATE.enabled = self.mode
        STATE.check_nan = self.check_nan

    def __exit__(self, *exc: object) -> None:
        STATE.enabled, STATE.check_nan = self.prev


_ENGINE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def forward_stack() -> list[str]:
    """The current Python stack, formatted, without the engine's own frames."""
    frames = traceback.extract_stack()
    user = [f for f in frames if not os.path.abspath(f.filename).startswith(_ENGINE_DIR)]
    return traceback.format_list(user or frames)


def warn_forward_traceback(node: Any) -> None:
    """Print PyTorch's anomaly warning with the forward traceback of ``node``."""
    stack = node.metadata.get("traceback_") if node._metadata else None
    if stack is None:
        warnings.warn(
            f"Error detected in {node.name()}. No forward pass information available. Enable "
            f"detect anomaly during forward pass for more information.",
            UserWarning,
            stacklevel=2,
        )
        return
    warnings.warn(
        f"Error detected in {node.name()}. Traceback of forward call that caused the error:\n"
        + "".join(stack),
        UserWarning,
        stacklevel=2,
    )
