"""Where a live session's :meth:`~autograd_viz.live.LiveSession.continue_` stops."""

from __future__ import annotations

from collections.abc import Callable
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
