"""The backward calls ``nan --every``/``--steps`` leave out run unwatched, checked at the parameters.

Note [Calls no listener wants] in ``autograd_viz/sources/pytorch/chokepoint.py``:
a call that the recorder leaves out, and that no other listener wants, runs
as PyTorch runs it unwatched; only the check at the parameters (Note
[Checking calls not recorded]) and the call's gate see it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz import cli  # noqa: E402
from autograd_viz.nan.watch import watch_nan  # noqa: E402
from autograd_viz.sources.pytorch.chokepoint import wanted  # noqa: E402
from engine import events  # noqa: E402
from engine.events import Event  # noqa: E402


class Probe:
    """A listener that follows the others' calls and notes the graph tasks whose nodes it saw."""

    follows_calls = True

    def __init__(self) -> None:
        self.graph_tasks: list[int] = []

    def __call__(self, event: Event) -> None:
        if event.kind == "node_start" and event.graph_task not in self.graph_tasks:
            self.graph_tasks.append(event.graph_task)


@contextmanager
def probing() -> Iterator[Probe]:
    probe = Probe()
    with events.listen(probe):
        yield probe


def _checkpointed_steps(steps: int, nan_at: int | None = None) -> list[Any]:
    """A reentrant checkpoint in each step; at ``nan_at`` a NaN is born in the backward."""
    torch.manual_seed(0)
    inner, head = torch.nn.Linear(3, 3), torch.nn.Linear(3, 1)
    x = torch.randn(2, 3, requires_grad=True)  # a reentrant checkpoint needs one
    for step in range(steps):
        y = torch.utils.checkpoint.checkpoint(lambda v: inner(v).tanh(), x, use_reentrant=True)
        out = head(y).sum()
        if step == nan_at:
            out = torch.sqrt(out * 0)  # finite forward; 0 * inf = NaN born in backward
        out.backward()
    return [p.grad.clone() for p in (*inner.parameters(), *head.parameters())]


def test_a_call_left_out_is_not_watched_node_by_node_and_results_stay_bit_identical() -> None:
    plain = _checkpointed_steps(4)
    with watch_nan(every=2) as watch, probing() as probe:
        got = _checkpointed_steps(4)
    assert [g.numpy().tobytes() for g in got] == [p.numpy().tobytes() for p in plain]
    infos = list(watch.trace.graph_tasks.values())
    # Calls 0 and 2, each with its checkpoint's graph task inside: watched whole.
    assert [(i.call, i.reentrant_depth) for i in infos] == [(0, 0), (None, 1), (2, 0), (None, 1)]
    # Nothing of calls 1 and 3 (nor of their checkpoints) was watched: no node hook fired.
    assert probe.graph_tasks == [i.id for i in infos]
    assert watch.missed is None and not watch.found


def test_a_call_left_out_is_checked_at_the_parameters_without_its_nodes() -> None:
    with watch_nan(every=2) as watch, probing() as probe:
        _checkpointed_steps(4, nan_at=3)
    assert watch.missed is not None
    assert (watch.missed.value, watch.missed.call) == ("nan", 3)
    assert len(probe.graph_tasks) == 4  # calls 0 and 2 and their checkpoints
    assert watch.report.first is None


def test_every_call_is_watched_when_every_call_is_recorded() -> None:
    with watch_nan() as watch, probing() as probe:
        _checkpointed_steps(3, nan_at=1)
    assert len(watch.trace.graph_tasks) == len(probe.graph_tasks) == 6
    first = watch.report.first
    assert first is not None and first.phase == "backward"


class _Says:
    def __init__(self, wants: bool | None = None, follows: bool = False) -> None:
        if wants is not None:
            self.wants_call = lambda: wants
        if follows:
            self.follows_calls = True

    def __call__(self, event: Event) -> None:
        pass


@pytest.mark.parametrize(
    ("listeners", "watched"),
    [
        ([_Says()], True),  # a listener that says nothing wants every call
        ([_Says(follows=True)], True),  # followers alone: as before, every call
        ([_Says(wants=False)], False),
        ([_Says(wants=False), _Says(follows=True)], False),
        ([_Says(wants=False), _Says()], True),
        ([_Says(wants=False), _Says(wants=True), _Says(follows=True)], True),
    ],
)
def test_a_call_is_watched_unless_a_listener_declines_it_and_none_wants_it(
    listeners: list[_Says], watched: bool
) -> None:
    for listener in listeners:
        events.subscribe(listener)
    try:
        assert wanted() is watched
    finally:
        for listener in listeners:
            events.unsubscribe(listener)


LATE_NAN = (
    "import torch\n"
    "torch.manual_seed(0)\n"
    "model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))\n"
    "for i in range(10):\n"
    "    out = model(torch.randn(4, 3))\n"
    "    if i == 5:\n"
    "        out = torch.sqrt(out * 0)  # finite forward; 0 * inf = NaN born in backward\n"
    "    out.sum().backward()\n"
    "    model.zero_grad()\n"
    "print('ran to the end')\n"
)


def test_first_reports_a_nan_of_a_call_left_out_and_lets_the_script_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, the backward check stopped the script in call 5, whose events were not kept,
    and the report said no NaN was found (exit 0)."""
    script = tmp_path / "late.py"
    script.write_text(LATE_NAN)
    assert cli.main(["nan", "--first", "--every", "4", str(script)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "ran to the end" in out
    assert (
        "NaN reached 2.bias (and 3 more) in backward call 5 (not recorded: --every 4); "
        "record that call to see where it was born: --steps 5"
    ) in out
    assert "no NaN or Inf found" not in out
