"""The reentrant pool: it survives any listener, and its threads are reused round after round."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

import engine
from engine import events
from engine.engine import MAX_RECURSION_DEPTH
from tests.graphs import Reentrant

DEPTH = MAX_RECURSION_DEPTH + 2
"""Deep enough that the innermost reentrant backward calls run on a pool thread."""


class Cancelled(RuntimeError):
    """What a debugger raises in a listener to cancel a backward pass."""

    _engine_propagate = True


def _deep_reentrant() -> np.ndarray:
    x = engine.tensor([2.0], requires_grad=True)
    Reentrant.apply(x, DEPTH).sum().backward()
    assert x.grad is not None
    return x.grad.numpy()


@pytest.fixture
def uncaught() -> Iterator[list[str]]:
    """Names of threads that died of an exception during the test."""
    died: list[str] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: died.append(args.thread.name if args.thread else "?")
    yield died
    threading.excepthook = previous
    engine.get_default_engine().shutdown()


def _pool() -> list[threading.Thread]:
    return [t for t in engine.get_default_engine().worker_threads() if "pool" in t.name]


def test_a_listener_cancelling_at_the_end_of_a_pool_task_does_not_kill_the_pool_thread(
    uncaught: list[str],
) -> None:
    pooled: set[int] = set()
    fired: list[int] = []

    def cancel_at_pool_task_end(event: events.Event) -> None:
        if event.kind == "reentrant_enter" and event.data["on_pool"]:
            pooled.add(event.graph_task)
        elif event.kind == "graph_task_end" and event.graph_task in pooled and not fired:
            fired.append(event.graph_task)
            raise Cancelled("stopped at graph_task_end")

    with events.listen(cancel_at_pool_task_end):
        np.testing.assert_allclose(_deep_reentrant(), [2.0])
    assert fired, "no graph task ran on the pool"
    pool = _pool()
    assert uncaught == [] and len(pool) == 1 and pool[0].is_alive()
    np.testing.assert_allclose(_deep_reentrant(), [2.0])  # and it serves the next one
    assert _pool() == pool


def test_pool_threads_are_reused_round_after_round(uncaught: list[str]) -> None:
    sizes = []
    for _ in range(5):
        np.testing.assert_allclose(_deep_reentrant(), [2.0])
        sizes.append(len(_pool()))
    assert sizes == [1] * 5
    # Two users at once need at most two pool threads (one when the first is done before the
    # second hands over: timing decides), and later rounds reuse them instead of adding more.
    for _ in range(3):
        workers = [threading.Thread(target=_deep_reentrant) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        sizes.append(len(_pool()))
    assert max(sizes) <= 2 and sizes == sorted(sizes)
    assert uncaught == []
