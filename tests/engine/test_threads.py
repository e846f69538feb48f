"""Device worker threads, cross-device routing, reentrant backward and concurrency."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import engine
from engine import events
from engine.engine import MAX_RECURSION_DEPTH
from tests.graphs import Reentrant


def _two_device_graph() -> tuple[engine.Tensor, engine.Tensor]:
    x = engine.tensor([1.0, 2.0], requires_grad=True, name="x")
    a = (x.to("sim:0") * 2.0).to("cpu")
    b = (x.to("sim:1") * 3.0).to("cpu")
    return x, (a + b).sum()


def test_two_device_graph_runs_each_node_on_its_device_thread(
    recorded: list[events.Event],
) -> None:
    x, loss = _two_device_graph()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 5.0])
    ran = [(e.thread, e.device) for e in recorded if e.kind == "node_start"]
    threads = {t for t, _ in ran}
    assert {"autograd-sim:0", "autograd-sim:1", threading.current_thread().name} <= threads
    for e in recorded:
        if e.kind == "node_start" and e.node_name == "MulBackward0":
            # The multiplications were on sim devices: their gradients ran there.
            assert e.thread == f"autograd-{e.device}" and e.device.startswith("sim:")
        if e.kind == "node_start" and e.node_name in ("SumBackward0", "AddBackward0"):
            assert e.thread == threading.current_thread().name and e.device == "cpu"
    queues = {e.data["queue"] for e in recorded if e.kind == "enqueue"}
    assert {"cpu", "sim:0", "sim:1"} <= queues
    acc = [e for e in recorded if e.kind == "node_start" and e.node_name == "AccumulateGrad"]
    assert len(acc) == 1 and acc[0].device == "cpu", "the leaf is on the CPU: its sink runs there"


def test_sim_leaf_gradient_stays_on_its_device() -> None:
    w = engine.tensor([1.0, 2.0], device="sim:1", requires_grad=True)
    (w * w).sum().backward()
    assert w.grad is not None and w.grad.device == engine.device("sim:1")
    np.testing.assert_allclose(w.grad.data, [2.0, 4.0])


def test_mixing_devices_in_one_op_is_a_clear_error() -> None:
    a = engine.tensor([1.0, 2.0], device="sim:0")
    b = engine.tensor([1.0, 2.0])
    with pytest.raises(
        RuntimeError,
        match="Expected all tensors to be on the same device, but found at least two devices, sim:0 and cpu!",
    ):
        a * b


def test_unknown_device_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda, sim device type"):
        engine.tensor([1.0], device="tpu:0")
    with pytest.raises(RuntimeError, match="sim device index 7 is out of range"):
        engine.tensor([1.0], device="sim:7")


def test_reentrant_backward_150_deep_uses_the_pool(recorded: list[events.Event]) -> None:
    x = engine.tensor([2.0], requires_grad=True)
    Reentrant.apply(x, 150).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0])
    enters = [e for e in recorded if e.kind == "reentrant_enter"]
    exits = [e for e in recorded if e.kind == "reentrant_exit"]
    assert len(enters) == len(exits) == 150
    assert max(e.data["depth"] for e in enters) == 150
    pooled = [e for e in enters if e.data["on_pool"]]
    assert pooled, "past depth 60 the graph task moves to a pool thread"
    assert all(e.data["current_depth"] == MAX_RECURSION_DEPTH for e in pooled)
    assert any(e.thread.startswith("autograd-pool") for e in recorded if e.kind == "node_start")
    starts = {e.graph_task: e for e in recorded if e.kind == "graph_task_start"}
    nested = [s for s in starts.values() if s.data["parent_graph_task"]]
    assert len(nested) == 150 and all(s.data["parent_graph_task"] in starts for s in nested)


def test_reentrant_backward_from_a_device_thread() -> None:
    x = engine.tensor([3.0], device="sim:0", requires_grad=True)
    Reentrant.apply(x, 3).sum().backward()
    np.testing.assert_allclose(x.grad.data, [2.0])


def test_eight_threads_run_backward_at_once() -> None:
    shared = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    barrier = threading.Barrier(8)
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            local = engine.tensor([float(k)] * 3, requires_grad=True)
            barrier.wait()
            for _ in range(20):
                local.grad = None
                y = (local * local * (k + 1.0) + shared.to("sim:0").to("cpu") * 0.0).sum()
                y.backward()
            results[k] = local.grad.numpy().copy()
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    for k in range(8):
        np.testing.assert_allclose(results[k], [2.0 * k * (k + 1.0)] * 3)
    np.testing.assert_allclose(shared.grad.numpy(), [0.0, 0.0, 0.0])


def test_shutdown_leaves_no_engine_thread_and_engine_restarts() -> None:
    _x, loss = _two_device_graph()
    loss.backward()
    eng = engine.get_default_engine()
    assert eng.worker_threads()
    eng.shutdown()
    assert eng.worker_threads() == []
    assert not [t for t in threading.enumerate() if t.name.startswith("autograd-")]
    x2, loss2 = _two_device_graph()
    loss2.backward()
    np.testing.assert_allclose(x2.grad.numpy(), [5.0, 5.0])
