"""Saying a thing once per process: the warnings of a watcher that goes on watching."""

from __future__ import annotations

import warnings

said: set[str] = set()
"""The messages said so far (bounded: see :data:`MAX_SAID`)."""

MAX_SAID = 1000
"""How many distinct messages are remembered; past that, a message may be said again."""


def warn_once(message: str) -> None:
    """Warn ``message`` as a ``RuntimeWarning``, unless this process said it already.

    The warning points at the caller's caller: the code that called into the
    watcher, not the watcher's own line.
    """
    if message in said:
        return
    if len(said) >= MAX_SAID:  # however many distinct errors a long run meets
        said.clear()
    said.add(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)
