"""Every op of the engine's op table on ``cuda``: values and gradients equal the CPU's.

The CPU results are themselves checked against finite differences and PyTorch in
``tests/engine``; here each sample of :mod:`tests.gpu.opsamples` runs once on the CPU
and once on ``cuda:0`` from the same NumPy data, and everything must agree: outputs,
their dtypes and devices, and the gradient of every input (weighted by the same random
weights on both devices), which must land on the input's own device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import engine
from engine import Tensor
from tests.gpu.conftest import Backend
from tests.gpu.opsamples import CASES, SAMPLES, Const, Sample, op_table

TOLERANCES = {"float64": (1e-9, 1e-12), "float32": (1e-5, 1e-6), "float16": (1e-3, 1e-3)}


@dataclass
class Run:
    """What one sample did on one device."""

    inputs: list[Any]
    outputs: list[Tensor]


def _make(inputs: tuple[Any, ...], device: str) -> list[Any]:
    made: list[Any] = []
    for item in inputs:
        if isinstance(item, Const):
            made.append(engine.tensor(item.array, device=device))
        elif isinstance(item, np.ndarray):
            t = engine.tensor(item, device=device)
            made.append(t.requires_grad_() if item.dtype.kind == "f" else t)
        else:
            made.append(item)
    return made


def _outputs(result: Any) -> list[Tensor]:
    if isinstance(result, Tensor):
        return [result]
    return [r for r in result if isinstance(r, Tensor)]


def _run(sample: Sample, device: str, seed: int) -> Run:
    inputs = _make(sample.inputs, device)
    outputs = _outputs(sample.fn(*inputs))
    rng = np.random.default_rng(seed)
    loss = None
    for out in outputs:
        weights = rng.standard_normal(out.shape)
        if out.requires_grad:
            term = (out * engine.tensor(weights, dtype=out.dtype, device=out.device)).sum()
            loss = term if loss is None else loss + term.to(loss.device)
    if loss is not None:
        loss.backward()
    return Run(inputs, outputs)


def _check_array_type(t: Tensor, backend: Backend, what: str) -> None:
    expected = backend.xp.ndarray if t.device.type == "cuda" else np.ndarray
    assert isinstance(t.data, expected), (
        f"{what} on {t.device} holds a {type(t.data).__module__}.{type(t.data).__name__}"
    )


def _assert_same(got: Tensor, expected: Tensor, what: str) -> None:
    assert got.shape == expected.shape, what
    assert got.dtype == expected.dtype, what
    host_got = got.detach().cpu().numpy()
    host_expected = expected.detach().cpu().numpy()
    if got.dtype.kind in "fc":
        rtol, atol = TOLERANCES[got.dtype.name]
        np.testing.assert_allclose(host_got, host_expected, rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(host_got, host_expected, err_msg=what)


def test_every_op_of_the_table_has_samples() -> None:
    table = op_table()
    assert not table - set(SAMPLES), "ops without a cuda sample"
    assert not set(SAMPLES) - table, "samples of ops the engine does not have"


@pytest.mark.parametrize(("name", "index"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_op_on_cuda_matches_cpu(backend: Backend, name: str, index: int) -> None:
    sample = SAMPLES[name][index]
    on_cpu = _run(sample, "cpu", seed=index)
    on_cuda = _run(sample, "cuda", seed=index)
    assert len(on_cuda.outputs) == len(on_cpu.outputs)
    for k, (got, expected) in enumerate(zip(on_cuda.outputs, on_cpu.outputs, strict=True)):
        what = f"{name} sample {index}, output {k}"
        assert got.device == engine.device(sample.moves_to or "cuda:0"), what
        _check_array_type(got, backend, what)
        _assert_same(got, expected, what)
        assert got.requires_grad == expected.requires_grad, what
    for k, (got, expected) in enumerate(zip(on_cuda.inputs, on_cpu.inputs, strict=True)):
        if not isinstance(got, Tensor) or not got.requires_grad:
            continue
        what = f"{name} sample {index}, gradient of input {k}"
        assert (got.grad is None) == (expected.grad is None), what
        if got.grad is not None:
            assert got.grad.device == got.device, what
            _check_array_type(got.grad, backend, what)
            _assert_same(got.grad, expected.grad, what)
