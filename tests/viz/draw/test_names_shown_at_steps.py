"""Names a view shows that only appear at a step, or only in the TUI, read back.

A folded loop split at a step into the steps done and those not started
(``(emb:{0..7}, cell:{0..7}, head:{0..7})``), and a node as the TUI writes it
(``Add#12`` in the drawn DAG, ``Add #12`` or ``Acc(head.bias) #3`` in the node
list), are names a user sees and types back into ``--around`` or ``/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from textual.widgets import Input

import autograd_viz
from autograd_viz.draw.model import select, showing
from autograd_viz.draw.model.graph_view import GraphViewError, from_state
from autograd_viz.draw.model.targets import node_name
from autograd_viz.trace import Trace
from autograd_viz.tui.listing import row_name
from autograd_viz.tui.styled import short_name
from tests.viz.tui.tuiting import replay_app, run_app, status

if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = pytest.importorskip("torch")
    nn = torch.nn

pytestmark = pytest.mark.oracle


class CellLM(nn.Module):
    """An unrolled language model: embedding, cell and head called in turn at each step."""

    def __init__(self, vocab: int = 20, width: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.cell = nn.GRUCell(width, width)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: Any) -> Any:
        h = torch.zeros(ids.shape[0], self.cell.hidden_size)
        outs = []
        for t in range(ids.shape[1]):
            h = self.cell(self.emb(ids[:, t]), h)
            outs.append(self.head(h))
        return torch.stack(outs, 1)


def cell_lm() -> Trace:
    torch.manual_seed(0)
    ids = torch.randint(0, 20, (2, 8))
    with autograd_viz.record() as trace:
        CellLM()(ids).sum().backward()
    return trace


def test_a_loop_folds_parts_at_a_step_read_back_at_that_step() -> None:
    trace = cell_lm()
    parts = 0
    for step in range(len(trace) // 10, len(trace), len(trace) // 10):
        view = from_state(trace.state_at(step))
        names = select.names_of_view(view)
        picture = showing.show(view)
        for node in picture.nodes.values():
            if node.box is None or not node.box.name.startswith("("):
                continue
            parts += 1
            target = names.resolve(node.box.name)
            assert set(target.nodes) == set(node.box.members), (step, node.box.name)
            graph = autograd_viz.to_dot(trace, step=step, around=node.box.name, depth=1).source
            assert "within 1 edge" in graph
    assert parts > 5  # the loop was split at the steps chosen: its parts were tried


def test_every_node_as_the_tui_writes_it_reads_back() -> None:
    trace = cell_lm()
    view = from_state(trace.state_at(len(trace)))
    names = select.names_of_view(view)
    for key, node in view.nodes.items():
        info = node.info
        for shown in (
            f"{short_name(info)}#{info.id}",  # the drawn DAG
            f"{short_name(info)} #{info.id}",  # the node list, short names
            f"{row_name(info, False)} #{info.id}",  # the node list, whole names
            node_name(info),  # dot
        ):
            assert names.resolve(shown).nodes == (key,), shown
    some = next(iter(view.nodes.values())).info
    with pytest.raises(GraphViewError, match=f"node {some.id} is .*, not 'Nothing'"):
        names.resolve(f"Nothing #{some.id}")


def test_find_takes_a_node_as_the_drawn_dag_writes_it() -> None:
    trace = cell_lm()
    task = next(iter(trace.graph_tasks.values()))
    info = next(n for n in task.nodes.values() if n.name == "AddmmBackward0")
    leaf = next(n for n in task.nodes.values() if n.leaf is not None and n.leaf.name)
    app = replay_app(trace)

    async def actions(pilot: Any) -> None:
        await pilot.press("v", "v")
        for shown in (f"{short_name(info)}#{info.id}", f"{short_name(leaf)} #{leaf.id}"):
            await pilot.press("slash")
            app.screen.query_one("#prompt-input", Input).value = shown
            await pilot.press("enter")
            for _ in range(20):
                await pilot.pause(0.05)
            assert "1 node" in status(app), (shown, status(app))

    run_app(app, actions, size=(120, 40))
