"""A trace keeps the rows a recorder hands it until they are read (Note [Rows until read])."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from autograd_viz.trace import Trace, TraceEvent
from autograd_viz.trace.recording import record
from autograd_viz.trace.records import new_header

torch = pytest.importorskip("torch")


def _row(kind: str, seq: int, data: Any = None) -> tuple[Any, ...]:
    return (kind, seq, 1000 + seq, "MainThread", "cpu", 1, 7, "MulBackward0", 3, 2,
            data if data is not None else {"n": seq})  # fmt: skip


def test_rows_become_events_numbered_by_position_when_read() -> None:
    trace = Trace(new_header(16))
    trace.add_rows([_row("enqueue", 5), _row("node_start", 6)])
    assert len(trace) == 2 and trace.last_seq() == 6
    assert trace._rows  # nothing read yet: nothing made
    first = trace.events
    assert not trace._rows
    assert [type(e) for e in first] == [TraceEvent, TraceEvent]
    assert [(e.index, e.kind, e.seq, e.data) for e in first] == [
        (0, "enqueue", 5, {"n": 5}),
        (1, "node_start", 6, {"n": 6}),
    ]
    trace.add_rows([_row("node_end", 9)])
    assert len(trace) == 3 and trace.last_seq() == 9
    assert trace.events is first  # the same list, grown
    assert (first[2].index, first[2].kind) == (2, "node_end")


def test_rows_left_half_settled_or_half_added_by_an_exception_read_whole_and_once() -> None:
    trace = Trace(new_header(16))
    trace.add_rows([_row("enqueue", 1), _row("node_start", 2)])
    made = list(trace.events)
    # As if an exception came after the events were made, before the rows went.
    trace._rows = [row[:-1] for row in (_row("enqueue", 1), _row("node_start", 2))]
    trace._data = [{"n": 1}, {"n": 2}]
    assert trace.events == made and not trace._rows  # not made twice
    # As if an exception came after a row's data went in, before the row.
    trace._data.append({"stray": True})
    trace.add_rows([_row("node_end", 3)])
    assert [(e.index, e.seq, e.data) for e in trace.events[2:]] == [(2, 3, {"n": 3})]


def test_rows_in_arrival_order_are_all_read() -> None:
    # A live session records events in the order it lets them through, not by seq.
    trace = Trace(new_header(16))
    trace.add_rows([_row("enqueue", 5)])
    assert [e.seq for e in trace.events] == [5]
    trace.add_rows([_row("node_start", 3)])
    assert [(e.index, e.seq) for e in trace.events] == [(0, 5), (1, 3)]


def test_one_event_goes_after_the_rows_waiting_or_in_at_once() -> None:
    trace = Trace(new_header(16))
    row = _row("graph_task_start", 1)
    trace.add_row(row[:-1], row[-1])  # nothing waiting: made at once
    assert not trace._rows and [e.seq for e in trace._events] == [1]
    trace.add_rows([_row("enqueue", 2)])
    row = _row("node_start", 3)
    trace.add_row(row[:-1], row[-1])  # behind the row waiting
    assert [(e.index, e.seq) for e in trace.events] == [(0, 1), (1, 2), (2, 3)]


def test_assigning_events_drops_rows_not_read() -> None:
    trace = Trace(new_header(16))
    trace.add_rows([_row("enqueue", 1)])
    trace.events = []
    assert len(trace) == 0 and trace.events == [] and trace.last_seq() is None


def test_a_recorded_pytorch_call_reads_as_recorded_whenever_it_is_read(tmp_path: Path) -> None:
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(4, 4)
    with record() as trace:
        h = torch.zeros(2, 4)
        for x in torch.randn(3, 2, 4):
            h = cell(x, h)
        h.sum().backward()
    assert trace._rows and len(trace) == len(trace._rows) + len(trace._events)
    read = trace.events
    assert [e.index for e in read] == list(range(len(read)))
    seqs = [e.seq for e in read]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    (info,) = trace.graph_tasks.values()
    assert read[info.first_event].kind == "graph_task_start"
    assert read[-1].kind == "graph_task_end"
    trace.save(tmp_path / "gru.jsonl")
    assert Trace.load(tmp_path / "gru.jsonl") == trace  # what is saved is what is read


def test_a_reader_on_another_thread_never_sees_half_of_the_rows() -> None:
    trace = Trace(new_header(16))
    stop = threading.Event()
    seen: list[str] = []

    def read() -> None:
        while not stop.is_set():
            got = trace.events
            n = len(got)
            # Every event read is numbered by its position, in seq order, with no gap.
            if any(got[i].index != i or got[i].seq != i for i in range(n)):
                seen.append(f"out of order at {n}")
                return

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for start in range(0, 20_000, 50):
            trace.add_rows([_row("enqueue", seq) for seq in range(start, start + 50)])
    finally:
        stop.set()
        reader.join()
    assert not seen
    assert [e.seq for e in trace.events] == list(range(20_000))


def test_a_flight_recorder_hands_on_each_call_with_its_rows() -> None:
    a = torch.ones(3, requires_grad=True)
    with record(last=2) as trace:
        for k in range(4):
            (a * (k + 1)).sum().backward()
    calls = [info.call for info in trace.graph_tasks.values()]
    assert calls == [2, 3]  # the last two calls, each handed on by its recorder
    read = trace.events
    assert [e.index for e in read] == list(range(len(read)))
    starts = [e for e in read if e.kind == "graph_task_start"]
    assert [trace.graph_tasks[e.graph_task].first_event for e in starts] == [
        e.index for e in starts
    ]
