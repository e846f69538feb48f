"""Saving a trace while threads are inside backward: during recording and right after it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import engine
from autograd_viz import record
from autograd_viz.trace import Trace
from engine.devices import set_sim_device_count, sim_device_count


@pytest.fixture
def busy_threads() -> Iterator[None]:
    """Four threads running backward passes (two across devices) until the test ends."""
    before = sim_device_count()
    set_sim_device_count(max(before, 2))
    stop = threading.Event()

    def work(i: int) -> None:
        while not stop.is_set():
            x = engine.tensor([1.0, 2.0], requires_grad=True, name=f"x{i}")
            a = (x.to("sim:0") * 2.0).to("sim:1").to("cpu") if i % 2 else x * 2.0
            (a * x).sum().backward()

    workers = [threading.Thread(target=work, args=(i,), name=f"busy-{i}") for i in range(4)]
    for w in workers:
        w.start()
    yield
    stop.set()
    for w in workers:
        w.join()
    engine.get_default_engine().shutdown()
    set_sim_device_count(before)


def test_saving_while_the_recorder_fills_the_trace_writes_a_valid_file(
    busy_threads: None, tmp_path: Path
) -> None:
    for i in range(15):
        with record() as trace:
            time.sleep(0.002)
            trace.save(tmp_path / f"{i}.jsonl")
        loaded = Trace.load(tmp_path / f"{i}.jsonl")
        assert len(loaded) <= len(trace)


def test_saving_right_after_recording_stops_writes_the_whole_trace(
    busy_threads: None, tmp_path: Path
) -> None:
    for i in range(15):
        with record() as trace:
            time.sleep(0.002)
        size = len(trace)
        trace.save(tmp_path / f"{i}.jsonl")
        time.sleep(0.001)
        assert len(trace) == size, "a thread recorded into the trace after the block ended"
        assert Trace.load(tmp_path / f"{i}.jsonl") == trace
