"""Events handed to recorders in batches, for a source that emits many per step.

Note [Batched events]
~~~~~~~~~~~~~~~~~~~~~
A listener that only stores events (a Recorder) does not need each one the
moment it happens; it needs them in order, with their tensors summarized
while the tensors exist. Such a listener has a ``take_events(rows, data=None)``
method and an int ``max_values`` attribute. While every listener subscribed to
:data:`engine.events.HUB` has both, with the same ``max_values`` (and the
same ``values``, the tier of summaries a recorder keeps, where they have one:
Note [Values tiers] in ``autograd_viz/trace/records.py``),
:func:`batch_max_values` gives it, and a source that emits many events per
step (the PyTorch bridge derives four for every node it observes) may build
each event as a plain row instead: its ``seq`` from ``HUB.seq`` and its time
when the step happens, its summaries resolved with that ``max_values`` at
once, sequences as tuples, each row's data kept apart, in a list beside the
rows. It hands the rows over with :func:`hand_over`
before anything else of its graph task is emitted, and at the latest when
the graph task ends. Order is the ``seq`` order, as for events emitted one by
one. Rows go only to the listeners they were built for (a listener never gets
events from before it subscribed); a source that sees the listeners change
hands its rows over and emits one by one from then on. The engine knows
nothing of this: it emits one event at a time.
"""

from __future__ import annotations

from typing import Any

from engine.events import GRAPH_TASK, HUB, Listener

__all__ = ["batch_max_values", "hand_over"]


def batch_max_values(listeners: tuple[Listener, ...]) -> int | None:
    """The ``max_values`` every one of ``listeners`` takes batches with, if they all do and agree.

    ``None`` when some listener wants every event as it comes (Note [Batched
    events]). Pass ``HUB.listeners``, read once: the rows built for them go to
    them. A source asks once per graph task.
    """
    found = None
    tier = None
    for listener in listeners:
        max_values = getattr(listener, "max_values", None)
        if getattr(listener, "take_events", None) is None or type(max_values) is not int:
            return None
        values = getattr(listener, "values", None)
        if found is not None and (max_values != found or values != tier):
            return None
        found, tier = max_values, values
    return found


def hand_over(
    rows: list[tuple[Any, ...]], listeners: tuple[Listener, ...], data: list[dict[str, Any]]
) -> None:
    """Hand events a source built as rows to the listeners that take batches.

    Args:
        rows: each event's fields in :class:`~engine.events.Event`'s order but
            the data, ``seq`` from ``HUB.seq`` when the step happened.
        listeners: the listeners the rows were built for; those of them still
            subscribed get them. One that raises is treated as the hub treats
            any listener that raises (Note [Listener errors] in ``engine/events.py``).
        data: each row's data, plain, kept apart from the rows (Note [Rows apart
            from their data] in ``sources/pytorch/emitter.py``).
    """
    current = HUB.listeners
    for listener in listeners:
        if any(item is listener for item in current):
            try:
                listener.take_events(rows, data)  # type: ignore[attr-defined]
            except BaseException as exc:  # noqa: BLE001 - listener_failed re-raises what it must
                HUB.listener_failed(listener, exc, rows[0][GRAPH_TASK] if rows else 0)
