"""Live sessions: run user code with a gate on engine events, step it, break, stop.

:mod:`~autograd_viz.live.session` holds :class:`LiveSession`, a small façade
over one object per job: :mod:`~autograd_viz.live.running` the target that
runs and the hooks into the engine undone at stop;
:mod:`~autograd_viz.live.gate` the gate on the target's events (step,
continue, cancel); :mod:`~autograd_viz.live.window` what a session keeps
(its record, moving back, the window of calls of ``run --last``);
:mod:`~autograd_viz.live.breakpoints` where a free run stops.
"""

from __future__ import annotations

from autograd_viz.live.breakpoints import (
    Breakpoint,
    born_where,
    is_problem,
    non_finite,
    problems,
)
from autograd_viz.live.gate import SessionCancelled
from autograd_viz.live.session import DEFAULT_MAX_EVENTS, LiveSession
from autograd_viz.live.window import CallWindow, SessionRecord
from autograd_viz.trace.text import LIVE_THREAD, MAIN, thread_name

__all__ = [
    "DEFAULT_MAX_EVENTS",
    "LIVE_THREAD",
    "MAIN",
    "Breakpoint",
    "CallWindow",
    "LiveSession",
    "SessionCancelled",
    "SessionRecord",
    "born_where",
    "is_problem",
    "non_finite",
    "problems",
    "thread_name",
]
