"""Events about a whole call, recorded after it: found once per trace, for every view.

A ``grads`` event (Note [Gradient findings in a trace] in
``autograd_viz/grads/recorded.py``) is about its graph task as a whole and
comes after the call's end, so a view of any step of the call looks it up by
graph task. :func:`grads_notes` finds each once: a picture drawn at every step
of an animation, or a live trace that grows, reads only the events added since
it last looked.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autograd_viz.trace import Trace

MISSING_REASONS = frozenset(
    {
        "never used",
        "used without grad",
        "cut",
        "never reaches the loss",
        "no gradient from its node",
        "not on the graph",
    }
)
"""The reasons a ``grads`` finding gives for a trainable parameter that got no gradient
(``autograd_viz.grads.report.MISSING``, as the trace holds them)."""

_seen: dict[int, tuple[weakref.ref[Trace], int, dict[int, Mapping[str, Any]]]] = {}
"""By ``id(trace)`` (a trace compares by value, so it is no dictionary key): the trace, how
many of its events were read, and what they held. An entry goes when its trace does."""
_lock = threading.Lock()


def _forget(key: int) -> None:
    with _lock:
        _seen.pop(key, None)


def grads_notes(trace: Trace) -> Mapping[int, Mapping[str, Any]]:
    """The data of the last ``grads`` event of each graph task of ``trace``, by graph task."""
    key = id(trace)
    with _lock:
        entry = _seen.get(key)
        if entry is not None and entry[0]() is trace:
            _, read, notes = entry
        else:
            read, notes = 0, {}
        events = trace.events
        if len(events) < read:  # the trace was cut or replaced: read it again
            read, notes = 0, {}
        for event in events[read:]:
            if event.kind == "grads":
                notes[event.graph_task] = event.data
        ref = entry[0] if entry is not None and entry[0]() is trace else None
        if ref is None:
            ref = weakref.ref(trace, lambda _, key=key: _forget(key))  # type: ignore[misc]
        _seen[key] = (ref, len(events), notes)
        return notes
