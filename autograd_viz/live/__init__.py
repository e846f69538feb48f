"""Live sessions: run user code with a gate on engine events, step it, break, stop.

:mod:`~autograd_viz.live.session` holds :class:`LiveSession`, the gate and
what drives it; :mod:`~autograd_viz.live.record` what a session keeps (its
record, moving back, the window of calls of ``run --last``);
:mod:`~autograd_viz.live.breakpoints` where a free run stops.
"""

from __future__ import annotations

from autograd_viz.live.breakpoints import Breakpoint, non_finite
from autograd_viz.live.record import CallWindow, SessionRecord
from autograd_viz.live.session import (
    DEFAULT_MAX_EVENTS,
    LIVE_THREAD,
    MAIN,
    LiveSession,
    SessionCancelled,
    thread_name,
)

__all__ = [
    "DEFAULT_MAX_EVENTS",
    "LIVE_THREAD",
    "MAIN",
    "Breakpoint",
    "CallWindow",
    "LiveSession",
    "SessionCancelled",
    "SessionRecord",
    "non_finite",
    "thread_name",
]
