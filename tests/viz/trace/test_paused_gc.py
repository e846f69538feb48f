"""The collector's pause: counted across threads, so overlapping pauses never undo each other."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from autograd_viz.trace import paused_gc


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def _pause_in_thread(entered: threading.Event, leave: threading.Event) -> threading.Thread:
    def hold() -> None:
        with paused_gc():
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    assert entered.wait(10)
    return thread


@pytest.mark.parametrize("first_out", ["first in", "last in"])
def test_overlapping_pauses_in_two_threads_keep_the_collector_off_until_both_end(
    collector_on: None, first_out: str
) -> None:
    entered = [threading.Event(), threading.Event()]
    leave = [threading.Event(), threading.Event()]
    threads = [_pause_in_thread(entered[i], leave[i]) for i in range(2)]
    assert not gc.isenabled()
    out, still = (0, 1) if first_out == "first in" else (1, 0)
    leave[out].set()
    threads[out].join(10)
    assert not threads[out].is_alive()
    assert not gc.isenabled(), "one thread's pause ended while the other's goes on"
    leave[still].set()
    threads[still].join(10)
    assert gc.isenabled(), "the last pause to end switches the collector back on"


def test_a_pause_inside_a_pause_on_one_thread_keeps_it_off(collector_on: None) -> None:
    with paused_gc():
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_switched_off_before_stays_off(collector_on: None) -> None:
    gc.disable()
    entered, leave = threading.Event(), threading.Event()
    thread = _pause_in_thread(entered, leave)
    with paused_gc():
        leave.set()
        thread.join(10)
    assert not gc.isenabled()


def test_a_pause_ended_by_an_exception_still_counts_down(collector_on: None) -> None:
    with pytest.raises(ValueError, match="inside"), paused_gc():
        raise ValueError("inside")
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
