"""``cuda`` tensors in the engine: creation, moves, mixed graphs, threads, events, anomaly.

Each test runs on the fake CuPy and, marked ``gpu``, on a real GPU (see ``conftest.py``).
"""

from __future__ import annotations

import re
import threading
import warnings
from typing import Any

import numpy as np
import pytest

import engine
from autograd_viz.sources.summaries import resolve
from autograd_viz.trace.recorder import Recorder
from engine import Tensor, devices, events
from engine.autograd import detect_anomaly
from tests.gpu.conftest import Backend

NUMPY_ERROR = (
    "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to "
    "host memory first."
)


def on_cuda(values: Any, dtype: Any = engine.float64, requires_grad: bool = True) -> Tensor:
    return engine.tensor(values, dtype=dtype, device="cuda", requires_grad=requires_grad)


def host(t: Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


# -- tensors on cuda ---------------------------------------------------------------------


def test_a_cuda_tensor_holds_a_cupy_array(backend: Backend) -> None:
    t = engine.tensor([1.5, -2.0, 3.0], device="cuda")
    assert t.device == engine.device("cuda:0") and t.device.type == "cuda"
    assert isinstance(t.data, backend.xp.ndarray)
    assert t.data.device.id == 0
    assert t.dtype == engine.float32 and t.shape == (3,)
    assert t.tolist() == [1.5, -2.0, 3.0]
    assert t[1].item() == -2.0 and float(t[2]) == 3.0 and int(t[0]) == 1 and bool(t[0])
    assert len(t) == 3 and t.numel() == 3
    assert repr(t) == "tensor([ 1.5000, -2.0000,  3.0000], device='cuda:0')"
    w = on_cuda([[1.0, 2.0]])
    assert (
        repr(w) == "tensor([[1., 2.]], device='cuda:0', dtype=engine.float64, requires_grad=True)"
    )
    assert repr(w * 2) == (
        "tensor([[2., 4.]], device='cuda:0', dtype=engine.float64, grad_fn=<MulBackward0>)"
    )


def test_numpy_of_a_cuda_tensor_is_pytorchs_error(backend: Backend) -> None:
    t = engine.tensor([1.0, 2.0], device="cuda")
    with pytest.raises(TypeError, match=re.escape(NUMPY_ERROR)):
        t.numpy()
    with pytest.raises(TypeError, match=re.escape(NUMPY_ERROR)):
        np.asarray(t)
    np.testing.assert_array_equal(t.cpu().numpy(), [1.0, 2.0])


def test_tensor_from_device_arrays_and_tensors(backend: Backend) -> None:
    array = backend.xp.asarray(np.array([1.0, 2.0]))
    t = engine.tensor(array)
    assert t.device == engine.device("cuda:0") and t.dtype == engine.float64
    array[0] = 7.0
    assert t.tolist() == [1.0, 2.0], "engine.tensor copies its data"
    back = engine.tensor(t, device="cpu")
    assert back.device == engine.device("cpu") and isinstance(back.data, np.ndarray)
    again = engine.tensor(back, dtype=engine.float32, device="cuda")
    assert again.device.type == "cuda" and again.dtype == engine.float32
    assert engine.Tensor(array).device.type == "cuda"


def test_factories_on_cuda(backend: Backend) -> None:
    made = {
        "zeros": engine.zeros(2, 3, device="cuda"),
        "ones": engine.ones((2, 3), dtype=engine.float64, device="cuda"),
        "full": engine.full((2,), 7, device="cuda"),
        "arange": engine.arange(1.0, 4.0, device="cuda"),
        "rand": engine.rand(4, device="cuda"),
        "randn": engine.randn(4, device="cuda", requires_grad=True),
    }
    for name, t in made.items():
        assert t.device.type == "cuda" and isinstance(t.data, backend.xp.ndarray), name
    assert made["zeros"].dtype == engine.float32 and made["full"].dtype == engine.int64
    assert made["arange"].tolist() == [1.0, 2.0, 3.0] and made["randn"].requires_grad
    like = engine.ones_like(made["zeros"])
    assert like.device.type == "cuda" and like.tolist() == [[1.0] * 3] * 2
    to_host = engine.zeros_like(made["ones"], device="cpu")
    assert to_host.device == engine.device("cpu") and isinstance(to_host.data, np.ndarray)
    to_device = engine.ones_like(to_host, device="cuda")
    assert to_device.device.type == "cuda" and isinstance(to_device.data, backend.xp.ndarray)


def test_seeded_random_factories_give_the_same_values_on_every_device(backend: Backend) -> None:
    engine.manual_seed(5)
    on_device = engine.randn(3, 2, device="cuda")
    engine.manual_seed(5)
    np.testing.assert_array_equal(host(on_device), engine.randn(3, 2).numpy())


# -- moving between devices --------------------------------------------------------------


def test_to_cuda_and_back_is_differentiable(backend: Backend) -> None:
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.to("cuda") * engine.tensor([2.0, 3.0, 4.0], device="cuda")
    assert y.device.type == "cuda" and y.grad_fn.name() == "MulBackward0"
    loss = y.to("cpu").sum()
    assert loss.device == engine.device("cpu")
    loss.backward()
    assert x.grad.device == engine.device("cpu") and isinstance(x.grad.data, np.ndarray)
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 3.0, 4.0])


def test_a_cuda_leaf_gets_its_gradient_on_cuda(backend: Backend) -> None:
    w = on_cuda([1.0, -2.0])
    (w.cpu() * w.detach().cpu() * 3.0).sum().backward()
    assert w.grad.device == engine.device("cuda:0")
    assert isinstance(w.grad.data, backend.xp.ndarray)
    np.testing.assert_array_equal(host(w.grad), [3.0, -6.0])
    (w * w).sum().backward()
    np.testing.assert_array_equal(host(w.grad), [5.0, -10.0], err_msg="accumulated in place")


def test_cuda_and_cpu_methods_and_dtype_moves(backend: Backend) -> None:
    x = engine.tensor([0.5, 1.5], requires_grad=True)
    y = x.cuda().double()
    assert y.device == engine.device("cuda:0") and y.dtype == engine.float64
    z = x.to(device="cuda", dtype=engine.float64)
    assert z.device == y.device and z.dtype == y.dtype
    assert y.cuda() is y and x.cpu() is x
    (y * z).sum().cpu().backward()
    assert x.grad.dtype == engine.float32
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 3.0])


def test_mixed_cpu_and_cuda_graph(backend: Backend) -> None:
    x = engine.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=engine.float64, requires_grad=True)
    w = on_cuda([[0.5, -1.0], [2.0, 0.25]])
    b = engine.tensor([0.1, 0.2], dtype=engine.float64, requires_grad=True)
    h = (x.cuda() @ w).tanh()
    loss = (h.cpu() + b).pow(2).sum() + (x * 2).sum()
    loss.backward()

    xs, ws, bs = (t.detach().numpy() for t in (x, w.cpu(), b))
    hs = np.tanh(xs @ ws)
    dh = 2 * (hs + bs) * (1 - hs**2)
    # The expected values come from NumPy's tanh. A GPU's tanh can differ in the last
    # bit, and 1 - h² cancels where h is near 1 (h[0, 0] = tanh(4.5)), which magnifies
    # that bit to ~1e-12 relative on a real H200: the tolerance allows it.
    rtol = 1e-12 if backend.name == "fake" else 1e-10
    np.testing.assert_allclose(x.grad.numpy(), dh @ ws.T + 2, rtol=rtol)
    np.testing.assert_allclose(host(w.grad), xs.T @ dh, rtol=rtol)
    np.testing.assert_allclose(b.grad.numpy(), (2 * (hs + bs)).sum(0), rtol=rtol)
    assert (x.grad.device, w.grad.device, b.grad.device) == (x.device, w.device, b.device)


def test_cuda_and_sim_graph(backend: Backend) -> None:
    x = engine.tensor([1.0, -1.0], dtype=engine.float64, device="sim:0", requires_grad=True)
    w = on_cuda([3.0, 4.0])
    y = (x.to("cuda") * w).to("sim:1")
    assert y.device == engine.device("sim:1") and isinstance(y.data, np.ndarray)
    (y * y).sum().backward()
    assert x.grad.device == engine.device("sim:0") and w.grad.device == engine.device("cuda:0")
    np.testing.assert_array_equal(x.grad.data, [18.0, -32.0])
    np.testing.assert_array_equal(host(w.grad), [6.0, 8.0])


def test_a_zero_dim_cpu_tensor_goes_with_a_cuda_tensor(backend: Backend) -> None:
    scale = engine.tensor(3.0)
    x = on_cuda([1.0, 2.0])
    y = x * scale
    assert y.device.type == "cuda"
    y.sum().backward()
    np.testing.assert_array_equal(host(x.grad), [3.0, 3.0])


def test_a_zero_dim_cpu_tensor_with_a_cuda_tensor_gets_its_gradient(backend: Backend) -> None:
    scale = engine.tensor(3.0, dtype=engine.float64, requires_grad=True)
    (on_cuda([1.0, 2.0]) * scale).sum().backward()
    assert scale.grad is not None and scale.grad.device == engine.device("cpu")
    assert scale.grad.item() == 3.0


def test_mixing_cuda_with_a_cpu_tensor_is_pytorchs_error(backend: Backend) -> None:
    with pytest.raises(
        RuntimeError,
        match="Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!",
    ):
        on_cuda([1.0, 2.0]) + engine.tensor([1.0, 2.0], dtype=engine.float64)


def test_indexing_with_a_cuda_index_into_a_cpu_tensor_is_pytorchs_error(backend: Backend) -> None:
    index = engine.tensor([0, 1], device="cuda")
    with pytest.raises(
        RuntimeError,
        match=re.escape("indices should be either on cpu or on the same device as the indexed "),
    ):
        engine.tensor([1.0, 2.0])[index]


def test_higher_order_gradients_on_cuda(backend: Backend) -> None:
    x = on_cuda([1.0, 2.0])
    (g,) = engine.grad((x**3).sum(), x, create_graph=True)
    assert g.device.type == "cuda" and g.grad_fn is not None
    np.testing.assert_array_equal(host(g), [3.0, 12.0])
    g.sum().backward()
    np.testing.assert_array_equal(host(x.grad), [6.0, 12.0])


def test_hooks_and_retain_grad_see_cuda_gradients(backend: Backend) -> None:
    x = on_cuda([1.0, 2.0])
    y = x * 2
    y.retain_grad()
    seen: list[Tensor] = []
    x.register_hook(lambda g: seen.append(g) or g * 10)
    (y * y).sum().backward()
    assert y.grad.device.type == "cuda"
    np.testing.assert_array_equal(host(y.grad), [4.0, 8.0])
    assert seen and seen[0].device.type == "cuda"
    np.testing.assert_array_equal(host(x.grad), [80.0, 160.0])


def test_gradcheck_on_cuda(backend: Backend) -> None:
    x = on_cuda([[0.3, -0.7], [1.1, 0.2]])
    w = on_cuda([0.5, -1.5])
    assert engine.gradcheck(lambda x, w: (x * w).tanh().sum(1), (x, w))
    assert engine.gradgradcheck(lambda x: (x**3).sum(), (x,))
    with pytest.raises(engine.GradcheckError, match="Jacobian mismatch"):
        engine.gradcheck(_WrongGradient.apply, (x,))


class _WrongGradient(engine.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> Tensor:
        return g * 3


# -- the cuda worker thread --------------------------------------------------------------


def test_cuda_work_runs_on_its_own_worker_thread(
    backend: Backend, recorded: list[events.Event]
) -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    w = on_cuda([3.0, 4.0], dtype=engine.float32)
    ((x.cuda() * w).exp().cpu() * 2).sum().backward()

    names = {t.name for t in engine.get_default_engine().worker_threads()}
    assert "autograd-cuda:0" in names
    main = threading.current_thread().name
    ran = {e.node_name: (e.thread, e.device) for e in recorded if e.kind == "node_start"}
    cuda_side = ("autograd-cuda:0", "cuda:0")
    assert ran["ExpBackward0"] == ran["MulBackward0"] == cuda_side
    assert ran["SumBackward0"] == (main, "cpu")
    accumulated = [e for e in recorded if e.kind == "accumulate" and e.data["target"] == "leaf"]
    assert {(e.thread, e.device) for e in accumulated} == {cuda_side, (main, "cpu")}
    assert {"cpu", "cuda:0"} <= {e.data["queue"] for e in recorded if e.kind == "enqueue"}
    for e in recorded:
        if e.kind == "node_end" and e.node_name == "ExpBackward0":
            (summary,) = e.data["outputs"]
            assert summary.device == "cuda:0" and resolve(summary).norm is not None


def test_a_recorder_traces_a_cuda_backward(backend: Backend) -> None:
    w = on_cuda([3.0, -4.0])
    recorder = Recorder(max_values=8)
    with events.listen(recorder):
        (w * w).sum().backward()
    trace = recorder.trace
    leaf = [e for e in trace.events if e.kind == "accumulate" and e.data["target"] == "leaf"]
    assert len(leaf) == 1 and leaf[0].thread == "autograd-cuda:0"
    grad = leaf[0].data["grad"]
    assert grad.device == "cuda:0" and grad.values == (6.0, -8.0)
    assert (grad.min, grad.max, grad.norm) == (-8.0, 6.0, 10.0)
    (info,) = trace.graph_tasks.values()
    devices_of = {node.name: node.device for node in info.nodes.values()}
    assert devices_of["MulBackward0"] == "cuda:0"
    saved = next(n for n in info.nodes.values() if n.name == "MulBackward0").saved
    assert saved[0] is not None and saved[0].device == "cuda:0" and saved[0].values == (3.0, -4.0)


def test_leaf_gradients_are_synchronized_before_backward_returns(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = on_cuda([1.0, 2.0])
    x = engine.tensor([5.0, 6.0], dtype=engine.float64, requires_grad=True)
    calls: list[tuple[str, bool]] = []
    synchronize = devices.synchronize

    def recording(device: engine.Device) -> None:
        calls.append((str(device), w.grad is not None))
        synchronize(device)

    monkeypatch.setattr(devices, "synchronize", recording)
    (w * x.cuda()).sum().backward()
    assert calls == [("cuda:0", True)], "once, for the cuda leaf, after its gradient was written"
    calls.clear()
    (x * 2).sum().backward()
    assert calls == [], "a graph without cuda leaves does not wait for the GPU"


# -- anomaly mode and errors -------------------------------------------------------------


def test_anomaly_mode_raises_on_a_nan_made_on_cuda(backend: Backend) -> None:
    x = on_cuda([-1.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with detect_anomaly():
            y = x.sqrt().sum()
            with pytest.raises(
                RuntimeError, match=re.escape("Function 'SqrtBackward0' returned nan values")
            ):
                y.backward()


def test_anomaly_forward_check_on_cuda(backend: Backend) -> None:
    x = on_cuda([0.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with (
            detect_anomaly(check_inf=True, check_forward=True),
            pytest.raises(
                RuntimeError,
                match=re.escape(
                    "Function 'LogBackward0' produced inf values in its 0th forward output "
                    "(op 'log')."
                ),
            ),
        ):
            engine.log(x)


def test_anomaly_collect_mode_reports_from_the_cuda_thread(
    backend: Backend, recorded: list[events.Event]
) -> None:
    x = on_cuda([-1.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with detect_anomaly(mode="collect"):
            x.sqrt().sum().backward()
    (found,) = [e for e in recorded if e.kind == "anomaly"]
    assert found.thread == "autograd-cuda:0" and found.node_name == "SqrtBackward0"
    grad = resolve(found.data["grad"])
    assert grad.device == "cuda:0" and grad.nan_count == 1
    assert np.isnan(host(x.grad)[0])


class _Boom(engine.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x * 1

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> Tensor:
        raise ValueError("boom on the GPU")


class _GradientOnTheCpu(engine.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x * 1

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> Tensor:
        return g.cpu()


def test_an_error_in_a_cuda_node_reaches_the_caller_and_the_engine_goes_on(
    backend: Backend, recorded: list[events.Event]
) -> None:
    x = on_cuda([1.0, 2.0])
    with pytest.raises(ValueError, match="boom on the GPU"):
        _Boom.apply(x).sum().backward()
    (error,) = [e for e in recorded if e.kind == "error"]
    assert error.thread == "autograd-cuda:0" and error.node_name == "_BoomBackward"
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            "Function _GradientOnTheCpuBackward returned an invalid device for value at index 0 - "
            "expected device cuda:0 but got cpu"
        ),
    ):
        _GradientOnTheCpu.apply(x).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_array_equal(host(x.grad), [2.0, 4.0])


# -- several GPUs (the fake has as many as asked) ------------------------------------------


def test_each_cuda_device_has_its_own_worker_thread(two_fake_gpus: Any) -> None:
    cp = two_fake_gpus
    current_devices: dict[str, int] = {}

    class Where(engine.Function):
        @staticmethod
        def forward(ctx: Any, x: Tensor) -> Tensor:
            return x * 1

        @staticmethod
        def backward(ctx: Any, g: Tensor) -> Tensor:
            current_devices[threading.current_thread().name] = cp.current_device_id()
            return g

    a = on_cuda([1.0, 2.0])
    b = Where.apply(a).to("cuda:1")
    assert b.device == engine.device("cuda:1") and b.data.device.id == 1
    cast = a.to("cuda:1", dtype=engine.float32)  # cast on cuda:0, then moved
    assert cast.data.device.id == 1 and cast.dtype == engine.float32
    with cp.cuda.Device(1):  # CuPy computes on the current device (as a CuPy user writes)
        loss = (Where.apply(b) * 3.0).sum()
    loss.backward()
    assert current_devices == {"autograd-cuda:0": 0, "autograd-cuda:1": 1}
    np.testing.assert_array_equal(host(a.grad), [3.0, 3.0])
    assert a.grad.data.device.id == 0


def test_a_cuda_index_past_the_last_gpu_is_a_clear_error(fake_cupy: Any) -> None:
    with pytest.raises(
        RuntimeError, match=re.escape("cuda:1 does not exist: CuPy sees 1 GPU (cuda:0)")
    ):
        engine.tensor([1.0], device="cuda:1")
    with pytest.raises(RuntimeError, match="cuda:3 does not exist"):
        engine.tensor([1.0]).to("cuda:3")


# -- without CuPy or without a GPU -------------------------------------------------------


def test_without_cupy_cuda_is_a_clear_error_and_the_rest_works(cupy_missing: None) -> None:
    assert not engine.cuda_is_available()
    message = re.escape("cuda devices need CuPy, which is not installed: install it with")
    with pytest.raises(RuntimeError, match=message):
        engine.tensor([1.0], device="cuda")
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=message):
        x.cuda()
    with pytest.raises(RuntimeError, match=message):
        engine.zeros(2, device="cuda:0")
    (x.to("sim:0") * x.to("sim:0")).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


def test_cupy_without_a_gpu_is_a_clear_error(
    fake_cupy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    fake_cupy.reset(device_count=0)
    monkeypatch.setattr(devices, "_cupy_module", None)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    assert not engine.cuda_is_available()
    with pytest.raises(RuntimeError, match="cuda devices are not usable here: cudaErrorNoDevice"):
        engine.ones(3, device="cuda")
    assert engine.ones(3).sum().item() == 3.0


# -- host values meeting cuda tensors ----------------------------------------------------


def test_zero_dim_cpu_values_go_into_cuda_tensors(backend: Backend) -> None:
    x = on_cuda([1.0, 2.0, 3.0], requires_grad=False)
    x[0:2] = engine.tensor(5.0)
    x[2] = 7
    np.testing.assert_array_equal(host(x), [5.0, 5.0, 7.0])
    x.fill_(engine.tensor(-1.0))
    np.testing.assert_array_equal(host(x), [-1.0, -1.0, -1.0])
    value = engine.tensor(2.0, dtype=engine.float64, requires_grad=True)
    y = on_cuda([1.0, 2.0, 3.0]).index_put((np.array([0, 2]),), value)
    assert y.device.type == "cuda"
    (y * on_cuda([1.0, 10.0, 100.0], requires_grad=False)).sum().backward()
    assert value.grad.device == engine.device("cpu") and value.grad.item() == 101.0
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        x[0:2] = engine.tensor([1.0, 2.0], dtype=engine.float64)


def test_losses_take_a_zero_dim_cpu_target(backend: Backend) -> None:
    x = on_cuda([1.0, 3.0])
    with pytest.warns(UserWarning, match="Using a target size"):
        loss = engine.functional.mse_loss(x, engine.tensor(2.0, dtype=engine.float64))
    assert loss.device.type == "cuda" and loss.item() == 1.0
    loss.backward()
    np.testing.assert_array_equal(host(x.grad), [-1.0, 1.0])
    logits = on_cuda([0.0, 1.0, 2.0])
    nll = engine.functional.cross_entropy(logits, engine.tensor(2))
    assert nll.device.type == "cuda"
    expected = -np.log(np.exp(2.0) / np.exp([0.0, 1.0, 2.0]).sum())
    assert abs(nll.item() - expected) < 1e-12
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        engine.functional.nll_loss(
            on_cuda([[0.0, 1.0]]), engine.tensor([1], device="cuda"), engine.tensor([1.0, 2.0])
        )


def test_per_thread_default_streams_are_refused(
    fake_cupy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setattr(devices, "_cupy_module", None)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setenv("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", "1")
    with pytest.raises(RuntimeError, match="need CuPy's legacy default stream"):
        engine.tensor([1.0], device="cuda")
    monkeypatch.delenv("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM")
    assert engine.tensor([1.0], device="cuda").device.type == "cuda"
