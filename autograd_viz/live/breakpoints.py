"""Where a live session's :meth:`~autograd_viz.live.LiveSession.continue_` stops.

Note [Breaking where a value reaches something]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
"Break on the first NaN or Inf" must not stop a healthy program at a value
that is thrown away (T5's relative position bucket takes ``log(0)`` and casts
it to an integer on every step: Note [Lineage] in
``nan/forward/lineage.py``). When a forward birth is numbered,
whether its values reach the loss, a gradient, a parameter or the model's
output is known only later, so :func:`is_problem` passes over it and stops
where they get there: the ``anomaly`` event that says so (``reached``), or
the backward finding on the node they reach (``lineage``). What was found
there names the birth (:func:`born_where`, from the birth's own event, still
in the record). A birth without a number (our engine's anomaly mode, inside
a ``torch.func`` transform) stops where it is born, as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autograd_viz.trace import TraceEvent
from autograd_viz.trace.summary import TensorSummary
from engine import events


@dataclass(frozen=True)
class Breakpoint:
    """Where :meth:`LiveSession.continue_` stops: every given condition must hold.

    ``node`` matches a node's name (``"MulBackward0"``) or id; ``kind`` an
    event kind; ``predicate`` any recorded event. A breakpoint with none of
    them matches every event.
    """

    node: str | int | None = None
    """A node name or node id."""
    kind: str | None = None
    """An event kind, such as ``"node_start"``."""
    predicate: Callable[[TraceEvent], bool] | None = None
    """A test on the recorded event."""

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in events.EVENT_KINDS:
            kinds = ", ".join(sorted(events.EVENT_KINDS))
            raise ValueError(f"unknown event kind {self.kind!r}; expected one of {kinds}")
        if self.predicate is not None and not callable(self.predicate):
            raise TypeError("a breakpoint predicate must be callable")

    def matches(self, event: TraceEvent) -> bool:
        """Whether ``event`` stops a :meth:`LiveSession.continue_`."""
        if self.kind is not None and event.kind != self.kind:
            return False
        if isinstance(self.node, int) and not isinstance(self.node, bool):
            if event.node_id != self.node:
                return False
        elif self.node is not None and event.node_name != self.node:
            return False
        return self.predicate is None or bool(self.predicate(event))


def non_finite(event: TraceEvent) -> bool:
    """A breakpoint predicate: the event carries a gradient with a NaN or an Inf."""
    for value in event.data.values():
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, TensorSummary) and not item.finite:
                return True
    return False


PROBLEM_KINDS = frozenset({"anomaly", "error"})
"""Event kinds that are problems in themselves (a numbered birth excepted)."""

_FRAME = re.compile(r'\s*File "(?P<file>.*)", line (?P<line>\d+), in (?P<name>.*)')

_REACHED = {"loss": "the loss", "parameter": "a parameter", "output": "the model's output"}


def followed_birth(event: TraceEvent) -> bool:
    """A forward birth whose values the lineage follows: it may be contained, so it is no
    stop (Note [Breaking where a value reaches something])."""
    data = event.data
    return (
        event.kind == "anomaly"
        and bool(data.get("born"))
        and data.get("birth") is not None
        and not data.get("raised")
    )


def is_problem(event: TraceEvent) -> bool:
    """An anomaly, an error, or an event carrying a non-finite gradient; not a birth that
    may be contained (Note [Breaking where a value reaches something])."""
    if event.kind in PROBLEM_KINDS:
        return not followed_birth(event)
    return non_finite(event)


def problems(events: Sequence[TraceEvent]) -> Callable[[TraceEvent], bool]:
    """:func:`is_problem`, where the record says which births were reached: a numbered birth
    whose values ``events`` say reached something is a problem too, so that a jump to the
    first one lands on the birth itself."""
    reached = {
        number
        for event in events
        if event.kind == "anomaly"
        for number in event.data.get("lineage") or ()
    }

    def problem(event: TraceEvent) -> bool:
        if followed_birth(event):
            return event.data.get("birth") in reached
        return is_problem(event)

    return problem


def born_where(events: Sequence[TraceEvent], event: TraceEvent) -> str | None:
    """Where the values ``event`` found were born, in words, when it names births whose
    events are in ``events`` (``None`` otherwise)."""
    lineage = event.data.get("lineage") if event.kind == "anomaly" else None
    if not lineage:
        return None
    numbers = set(lineage)
    for index in range(len(events) - 1, -1, -1):
        birth = events[index]
        if birth.kind == "anomaly" and birth.data.get("birth") in numbers:
            return _words(birth, event.data.get("reached"))
    return None


def _words(birth: TraceEvent, reached: str | None) -> str:
    data = birth.data
    value = "NaN" if data.get("value") == "nan" else "Inf"
    words = f"{value} born in {data.get('aten_op') or data.get('op') or birth.node_name}"
    stack = data.get("traceback") or ()
    frame = _FRAME.match(stack[-1]) if stack else None
    if frame is not None:
        words += f" at {frame['file']}:{frame['line']}"
    if data.get("module"):
        words += f" in module {data['module']}"
    if reached is not None:
        words += f" reached {_REACHED.get(reached, reached)}"
    return words
