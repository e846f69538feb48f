"""A listener that cancels at graph_task_end on a device thread leaves no owner asleep."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import engine
from engine import events
from engine.devices import set_sim_device_count, sim_device_count


class Cancelled(RuntimeError):
    """What a debugger raises in a listener to cancel a backward pass."""

    _engine_propagate = True


@pytest.fixture
def sim1() -> Iterator[None]:
    before = sim_device_count()
    set_sim_device_count(max(before, 2))
    yield
    engine.get_default_engine().shutdown()
    set_sim_device_count(before)


def test_the_owner_wakes_when_a_listener_raises_at_graph_task_end_on_a_device_thread(
    sim1: None,
) -> None:
    # The sim:1 worker finishes the graph task and must wake the owner, asleep in its
    # queue; a raise at graph_task_end skipped the wake-up and the owner slept forever.
    def cancel_at_end(event: events.Event) -> None:
        if event.kind == "graph_task_end" and event.thread == "autograd-sim:1":
            raise Cancelled("cancelled at graph_task_end")

    out: list[Any] = []

    def owner() -> None:
        w = engine.tensor([1.0, 2.0], requires_grad=True, device="sim:1")
        (w * w).sum().backward()
        out.append(w.grad)

    with events.listen(cancel_at_end):
        thread = threading.Thread(target=owner, name="owner", daemon=True)
        thread.start()
        thread.join(5.0)
    assert not thread.is_alive(), "the owner of the graph task never woke"
    np.testing.assert_allclose(out[0].to("cpu").numpy(), [2.0, 4.0])
