"""The bridge on CUDA tensors (needs PyTorch with a GPU; skipped elsewhere).

PyTorch runs CUDA nodes on one engine thread per device. While the bridge
watches a call, it turns multithreading off for that call (one warning says
so), so every node runs on the calling thread in the order the queue model
predicts, recorded or stepped.
"""

from __future__ import annotations

import pytest

import autograd_viz
from autograd_viz.live import LiveSession

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs PyTorch with a CUDA GPU"),
]


def _step() -> torch.Tensor:
    torch.manual_seed(0)
    w = torch.randn(16, 16, device="cuda", requires_grad=True)
    x = torch.randn(8, 16, device="cuda")
    ((x @ w).tanh().cpu() * 2).sum().backward()
    assert w.grad is not None
    return w.grad.cpu()


def test_a_recording_runs_device_nodes_on_the_calling_thread_and_says_so() -> None:
    expected = _step()
    with (
        pytest.warns(RuntimeWarning, match="set_multithreading_enabled"),
        autograd_viz.record() as trace,
    ):
        got = _step()
    assert torch.equal(got, expected)
    assert torch._C._is_multithreading_enabled()
    assert "derived_mismatch" not in {e.kind for e in trace.events}


def test_with_multithreading_off_a_recording_watches_every_node() -> None:
    expected = _step()
    with torch.autograd.set_multithreading_enabled(False), autograd_viz.record() as trace:
        got = _step()
    assert torch.equal(got, expected)
    kinds = [e.kind for e in trace.events]
    assert "derived_mismatch" not in kinds and kinds.count("node_start") >= 5
    devices = {n.device for t in trace.graph_tasks.values() for n in t.nodes.values()}
    assert "cuda:0" in devices


def test_a_live_session_steps_a_cuda_backward_in_order() -> None:
    expected = _step()
    with LiveSession(_step) as session:
        while session.step(timeout=30) is not None:
            pass
    assert session.error is None
    assert torch.equal(session.result, expected)
    assert "derived_mismatch" not in {e.kind for e in session.trace.events}
