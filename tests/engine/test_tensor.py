"""Tensor basics: creation, dtypes, metadata, conversion and their errors."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import devices


def test_dtype_inference_follows_pytorch() -> None:
    assert engine.tensor([1.0, 2.0]).dtype == engine.float32
    assert engine.tensor([1, 2]).dtype == engine.int64
    assert engine.tensor([True]).dtype == engine.bool_
    assert engine.tensor(np.array([1.0], dtype=np.float64)).dtype == engine.float64
    assert (
        engine.arange(3).dtype == engine.int64
        and engine.arange(0.0, 1.0, 0.5).dtype == engine.float32
    )
    assert (
        engine.full((2,), 7).dtype == engine.int64
        and engine.full((2,), 0.5).dtype == engine.float32
    )


def test_complex_numbers_take_the_default_complex_dtype() -> None:
    """PyTorch's: complex64 beside float32, complex128 beside float64; arrays keep theirs."""
    assert engine.tensor([1 + 1j]).dtype == engine.complex64
    assert engine.tensor([1.0, 2j]).dtype == engine.complex64
    assert engine.tensor(3j).dtype == engine.complex64
    assert engine.full((2,), 1j).dtype == engine.complex64
    assert engine.tensor(np.array([1j])).dtype == engine.complex128
    assert engine.tensor(np.complex128(1j)).dtype == engine.complex128
    assert engine.tensor([1j], dtype=engine.complex128).dtype == engine.complex128
    engine.set_default_dtype(engine.float64)
    try:
        assert engine.tensor([1j]).dtype == engine.complex128
        assert engine.full((2,), 1j).dtype == engine.complex128
    finally:
        engine.set_default_dtype(engine.float32)
    assert engine.tensor([1.5 - 2.5j]).tolist() == [1.5 - 2.5j]


def test_complex_dtypes_match_pytorch() -> None:
    torch = pytest.importorskip("torch")
    for data in ([1 + 1j], [1.0, 2j], 3j, [[1, 2j]], np.array([1j]), np.complex128(1j)):
        assert engine.tensor(data).dtype.name == str(torch.tensor(data).dtype).split(".")[1]
    assert engine.full((2,), 1j).dtype.name == str(torch.full((2,), 1j).dtype).split(".")[1]


def test_tensor_copies_its_input() -> None:
    source = np.array([1.0, 2.0], dtype=np.float32)
    t = engine.tensor(source)
    source[0] = 100.0
    assert t.tolist() == [1.0, 2.0]


def test_factories_take_requires_grad_shape_and_name() -> None:
    for factory in (engine.zeros, engine.ones, engine.rand, engine.randn):
        t = factory(2, 3, requires_grad=True, name="w")
        assert t.shape == (2, 3) and t.requires_grad and t.is_leaf and t.name == "w"
    z = engine.zeros_like(engine.ones((4,), dtype=engine.float64))
    assert z.dtype == engine.float64 and z.tolist() == [0.0] * 4
    o = engine.ones_like(z, requires_grad=True)
    assert o.requires_grad and o.tolist() == [1.0] * 4
    engine.manual_seed(3)
    a = engine.randn(5)
    engine.manual_seed(3)
    assert a.tolist() == engine.randn(5).tolist()


def test_requires_grad_rules() -> None:
    with pytest.raises(
        RuntimeError,
        match="^Only Tensors of floating point and complex dtype can require gradients$",
    ):
        engine.tensor([1, 2], requires_grad=True)
    x = engine.tensor([1.0], requires_grad=True)
    y = x * 2.0
    assert not y.is_leaf and y.requires_grad and y.grad_fn.name() == "MulBackward0"
    with pytest.raises(
        RuntimeError, match="you can only change requires_grad flags of leaf variables"
    ):
        y.requires_grad = False
    assert engine.tensor([1.0]).requires_grad_().requires_grad


def test_conversions_and_their_errors() -> None:
    x = engine.tensor([[1.5, 2.0]], requires_grad=True)
    with pytest.raises(RuntimeError, match="Use tensor.detach\\(\\).numpy\\(\\) instead"):
        x.numpy()
    assert x.detach().numpy().tolist() == [[1.5, 2.0]]
    with pytest.raises(
        RuntimeError, match="a Tensor with 2 elements cannot be converted to Scalar"
    ):
        x.item()
    assert engine.tensor([[3.0]]).item() == 3.0
    assert x.shape == (1, 2) and x.ndim == 2 and x.numel() == 2 and len(x) == 1
    assert isinstance(x.data, np.ndarray)
    with pytest.raises(
        RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"
    ):
        bool(engine.tensor([1.0, 2.0]))


def test_repr_reads_like_pytorch() -> None:
    x = engine.tensor([0.5, 0.75], requires_grad=True)
    assert repr(x) == "tensor([0.5000, 0.7500], requires_grad=True)"
    assert repr(x * 2.0) == "tensor([1.0000, 1.5000], grad_fn=<MulBackward0>)"
    assert repr(engine.tensor([2.0, 4.0])) == "tensor([2., 4.])"
    assert repr(engine.tensor([1.0], device="sim:1")) == "tensor([1.], device='sim:1')"


def test_grad_setter_validates() -> None:
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="^attempting to assign a gradient of size '\\[1\\]'"):
        x.grad = engine.tensor([1.0])
    x.grad = engine.tensor([1.0, 1.0])
    assert x.grad.tolist() == [1.0, 1.0]


def test_to_moves_between_devices_differentiably() -> None:
    x = engine.tensor([1.0, 2.0], dtype=engine.float64, requires_grad=True)
    y = x.to("sim:0")
    assert y.device == "sim:0" and y.grad_fn.name() == "ToCopyBackward0"
    assert x.to("cpu") is x
    z = y.cpu().to(engine.float32)
    assert z.dtype == engine.float32 and z.device == "cpu"
    assert engine.gradcheck(lambda t: (t.to("sim:1") * t.to("sim:1")).to("cpu"), (x,))


@pytest.mark.skipif(
    devices.cuda_is_available(), reason="checks the error when CuPy or a GPU is missing"
)
def test_cuda_without_cupy_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="cuda devices"):
        engine.tensor([1.0], device="cuda:0")
    # The rest keeps working.
    assert (engine.tensor([1.0], device="sim:0") * 2.0).tolist() == [2.0]
