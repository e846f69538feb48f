"""Live sessions on PyTorch's real backward: step, break, go back, stop mid-backward."""

from __future__ import annotations

import os
import traceback
from pathlib import Path

import pytest

from autograd_viz.live import LiveSession, SessionCancelled, non_finite
from tests.viz.live.test_live import no_new_threads  # noqa: F401 - the fixture, with its checks

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("no_new_threads")

TIMEOUT = 10.0
ROOT = Path(__file__).resolve().parents[3]


def _mlp_step() -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    loss = model(torch.randn(5, 4)).pow(2).mean()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _expected() -> torch.Tensor:
    return _mlp_step()


def _pytorch_node_order() -> list[str]:
    """The nodes PyTorch runs for _mlp_step, seen by an independent set of pre-hooks."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    loss = model(torch.randn(5, 4)).pow(2).mean()
    order: list[str] = []
    seen: set[int] = set()
    stack, handles = [loss.grad_fn], []
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        name = fn.name().replace("torch::autograd::", "")
        handles.append(fn.register_prehook(lambda grads, name=name: order.append(name)))
        stack += [f for f, _ in fn.next_functions]
    loss.backward()
    for handle in handles:
        handle.remove()
    return order


def test_stepping_event_by_event_runs_pytorchs_nodes_in_its_order() -> None:
    expected = _expected()
    with LiveSession(_mlp_step) as session:
        starts = []
        while (event := session.step(timeout=TIMEOUT)) is not None:
            if event.kind == "node_start":
                starts.append(event.node_name)
                # Paused between two nodes: the next one has not run yet.
                assert session.state.nodes()[event.node_id].status.value in ("running",)
        assert session.error is None
        assert torch.equal(session.result, expected)
    assert starts == _pytorch_node_order()


def test_a_breakpoint_stops_at_the_node_and_back_in_time_replays() -> None:
    with LiveSession(_mlp_step) as session:
        at_tanh = session.add_breakpoint(node="TanhBackward0", kind="node_start")
        hit = session.continue_(timeout=TIMEOUT)
        assert hit is not None and hit.node_name == "TanhBackward0"
        frontier = session.frontier
        session.back(3)
        assert session.position == frontier - 3
        assert session.frontier == frontier  # going back never touches PyTorch
        session.remove_breakpoint(at_tanh)
        session.add_breakpoint(predicate=non_finite)
        assert session.continue_(timeout=TIMEOUT) is None  # a clean step has no NaN
        assert session.finished and session.error is None


@pytest.mark.parametrize("steps", [1, 3, 8, 15])
def test_stopping_mid_backward_cancels_it_and_leaves_pytorch_usable(
    steps: int,
) -> None:
    session = LiveSession(_mlp_step).start()
    for _ in range(steps):
        assert session.step(timeout=TIMEOUT) is not None
    session.stop()
    assert isinstance(session.error, SessionCancelled)
    # Raised on purpose: its traceback goes from the program's frame into torch's, and ends
    # there, without ours (Note [A traceback as without us]).
    frames = traceback.extract_tb(session.error.__traceback__)
    assert frames[0].name == "_mlp_step" and frames[0].filename == __file__
    assert all(os.sep + "torch" + os.sep in f.filename for f in frames[1:]), frames
    # PyTorch is untouched: the same step, unwatched, gives the same gradients.
    assert torch.equal(_mlp_step(), _expected())


def test_a_pytorch_script_runs_live() -> None:
    with LiveSession(ROOT / "examples" / "torch_mlp.py") as session:
        session.run_to_end(timeout=60)
        assert session.error is None and session.result == 0
        tasks = session.trace.graph_tasks
        assert len(tasks) == 3  # three training steps
        assert session.trace.header["sources"] == [f"torch {torch.__version__}"]
