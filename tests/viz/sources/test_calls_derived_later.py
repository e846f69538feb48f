"""A flight recorder at the call level derives only the calls it still holds when written."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autograd_viz.trace import NodeInfo, Trace
from autograd_viz.trace.recording import record
from tests.viz.trace.test_observe_calls import PROGRAMS

torch = pytest.importorskip("torch")

from autograd_viz.sources.pytorch import call_derive  # noqa: E402 - needs torch

_IDS = ("id", "next_edges", "sequence_nr")


def _canonical(trace: Trace) -> tuple[Any, ...]:
    """The trace with node and graph-task ids numbered by first appearance, without ``seq``
    and times (two runs of a program differ only there)."""
    nodes: dict[int, int] = {}
    tasks: dict[int, int] = {}
    # PyTorch's sequence numbers go on from run to run: kept by their order.
    numbers = sorted(
        {n.sequence_nr for i in trace.graph_tasks.values() for n in i.nodes.values()}
        | {e.sequence_nr for e in trace.events if e.sequence_nr is not None}
    )
    rank = {nr: i for i, nr in enumerate(numbers)}

    def node(nid: Any) -> Any:
        return None if nid is None else nodes.setdefault(nid, len(nodes))

    def task(gid: Any) -> Any:
        return gid if not gid else tasks.setdefault(gid, len(tasks) + 1)

    infos = []
    for info in trace.graph_tasks.values():
        infos.append(
            (
                task(info.id),
                task(info.parent),
                info.reentrant_depth,
                info.keep_graph,
                info.create_graph,
                node(info.root),
                tuple((node(n), name, nr) for n, name, nr in info.roots),
                tuple((node(n), nr) for n, nr in info.outputs),
                info.thread,
                info.first_event,
                info.call,
                info.cut,
                info.modules,
                tuple(
                    (
                        node(n.id),
                        tuple(None if e is None else (node(e[0]), e[1]) for e in n.next_edges),
                        rank[n.sequence_nr],
                        *(getattr(n, f) for f in NodeInfo.__slots__ if f not in _IDS),
                    )
                    for n in info.nodes.values()
                ),
            )
        )
    events = []
    for e in trace.events:
        data = dict(e.data)
        for key in ("from_node", "to_node"):
            if key in data:
                data[key] = node(data[key])
        for key in ("roots", "outputs"):
            if e.kind == "graph_task_start":
                data[key] = tuple((node(r[0]), *r[1:]) for r in data[key])
        if "parent_graph_task" in data:
            data["parent_graph_task"] = task(data["parent_graph_task"])
        if str(data.get("queue_owner", "")).startswith("graph_task "):
            data["queue_owner"] = task(int(data["queue_owner"].split()[1]))
        events.append(
            (e.index, e.kind, e.thread, e.device, task(e.graph_task), node(e.node_id),
             e.node_name, rank.get(e.sequence_nr), e.topological_nr, sorted(data.items()))
        )  # fmt: skip
    return tuple(infos), tuple(events)


@pytest.mark.parametrize("name", PROGRAMS)
def test_calls_derived_when_the_ring_is_written_equal_calls_derived_as_they_end(name: str) -> None:
    program = PROGRAMS[name]
    plain = program()
    with record(observe="calls") as now:
        at_once = program()
    with record(observe="calls", last=100) as later:
        held = program()
    for a, b, c in zip(plain, at_once, held, strict=True):
        if a is None:
            assert b is None and c is None
        else:
            assert torch.equal(a, b) and torch.equal(a, c), "results are bit-identical"
    assert later.graph_tasks
    assert _canonical(later) == _canonical(now)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the graph walks of the call level (one per call derived)."""
    walks: list[int] = []
    walk = call_derive.plan_graph_task

    def counted(*args: Any, **kwargs: Any) -> Any:
        walks.append(1)
        return walk(*args, **kwargs)

    monkeypatch.setattr(call_derive, "plan_graph_task", counted)
    return walks


def _trainer() -> Callable[[int], None]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(3, 4)

    def train(steps: int) -> None:
        for _ in range(steps):
            model.zero_grad()
            model(x).sum().backward()

    return train


def test_a_call_is_walked_only_when_the_ring_is_written_and_only_if_still_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    walks = _counting(monkeypatch)
    train = _trainer()
    with record(observe="calls", last=3) as trace:
        train(10)
        assert not walks, "no call is walked while the run goes on"
        assert not trace.graph_tasks
    assert len(walks) == 3, "only the three calls kept are derived"
    assert [i.call for i in trace.graph_tasks.values()] == [7, 8, 9]
    with record(observe="calls") as eager:
        train(2)
        assert len(walks) == 5, "without last, each call is derived as it ends"
    assert len(eager.graph_tasks) == 2


def test_a_call_that_retains_its_graph_is_derived_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    walks = _counting(monkeypatch)
    w = torch.randn(4, requires_grad=True)
    with record(observe="calls", last=5) as trace:
        y = (w * w).exp().sum()
        y.backward(retain_graph=True)  # held, its saved tensors would stay alive: not held
        assert len(walks) == 1
        y.backward()
        assert len(walks) == 1
    assert len(walks) == 2
    assert [i.call for i in trace.graph_tasks.values()] == [0, 1]
    assert [i.keep_graph for i in trace.graph_tasks.values()] == [True, False]


def test_the_ring_holds_no_more_calls_than_it_keeps() -> None:
    train = _trainer()

    def held() -> int:
        gc.collect()
        return sum(type(o) is call_derive.CallSeen for o in gc.get_objects())

    before = held()
    with record(observe="calls", last=2):
        train(5)
        five = held() - before
        train(50)
        fifty_five = held() - before
    assert five == fifty_five == 2
    assert held() == before, "nothing is held once the ring is written"


TORCH_LOOP = """
    import os
    import sys

    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(3, 4)
    fail_at = int(sys.argv[1]) if len(sys.argv) > 1 else -1
    for step in range(10**9):
        if step == fail_at:
            raise RuntimeError("the loss diverged")
        model.zero_grad()
        model(x).sum().backward()
        with open(os.environ["PROGRESS"], "w") as f:
            f.write(str(step))
"""


def _derived_calls(trace: Trace) -> list[int | None]:
    nodes = [e for e in trace.events if e.kind == "node_start"]
    assert nodes and all(e.data.get("derived") for e in nodes)
    return [i.call for i in trace.graph_tasks.values()]


def test_held_calls_are_derived_when_a_signal_stops_the_run(tmp_path: Path) -> None:
    from tests.viz.cli.test_cli_training import _start, _wait_for_steps

    out = tmp_path / "t.jsonl"
    process = _start(tmp_path, ["-o", str(out), "--observe", "calls", "--last", "3"], TORCH_LOOP)
    _wait_for_steps(tmp_path, process, 20)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGTERM, stderr
    calls = _derived_calls(Trace.load(out))
    assert len(calls) == 3 and calls[0] is not None and calls[0] >= 18
    assert calls == list(range(calls[0], calls[0] + 3))


def test_held_calls_are_derived_when_the_script_raises(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TORCH_LOOP), encoding="utf-8")
    env = {**os.environ, "PROGRESS": str(tmp_path / "progress")}
    done = subprocess.run(
        [sys.executable, "-m", "autograd_viz", "record", "-o", str(out), "--observe", "calls",
         "--last", "3", str(script), "10"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "the loss diverged" in done.stderr, done.stderr
    assert _derived_calls(Trace.load(out)) == [7, 8, 9]
