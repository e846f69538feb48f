"""Summaries read a tensor's values without pinning its storage (FSDP2 frees it after use)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from autograd_viz.sources import deferred  # noqa: E402
from autograd_viz.sources.pytorch import summary  # noqa: E402
from autograd_viz.sources.pytorch.host_view import FreedStorageError, host_view  # noqa: E402
from autograd_viz.sources.pytorch.summary import LARGE, TorchSummary, summarize_tensor  # noqa: E402

# Small (summarized at once), mid-size (deferred), large (reduced by PyTorch), odd dtypes.
SIZES = [(7,), (3, 5), (40, 30), (130, 130), (5, 4000)]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.bool]


def sample(shape: tuple[int, ...], dtype: Any) -> Any:
    generator = torch.Generator().manual_seed(sum(shape))
    values = torch.randn(shape, generator=generator, dtype=torch.float64) * 3
    values[tuple(0 for _ in shape)] = -0.0
    return values.to(dtype)


@pytest.mark.parametrize("shape", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("max_values", [0, 64])
def test_a_summarized_tensor_can_still_be_freed(
    shape: tuple[int, ...], dtype: Any, max_values: int
) -> None:
    tensor = sample(shape, dtype)
    summarize_tensor(tensor, "cpu", max_values)
    TorchSummary(tensor.t() if tensor.dim() == 2 else tensor).resolve(max_values)
    deferred.settle_waiting()
    assert tensor.untyped_storage().resizable()
    tensor.untyped_storage().resize_(0)  # what FSDP2 does to a gathered parameter
    assert tensor.untyped_storage().nbytes() == 0


@pytest.mark.parametrize("shape", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided", "offset"])
def test_the_view_is_what_numpy_gives_bit_for_bit(
    shape: tuple[int, ...], dtype: Any, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tensor = sample(shape, dtype)
    if layout == "transposed" and tensor.dim() == 2:
        tensor = tensor.t()
    elif layout == "strided":
        tensor = tensor[..., ::2]
    elif layout == "offset":
        tensor = tensor[..., 1:]
    pinned = tensor.clone()  # the numpy() path on the same values, in a storage of its own
    array = pinned.numpy() if dtype is not torch.bfloat16 else None  # NumPy lacks bfloat16
    if array is not None:
        view = host_view(tensor)
        assert tensor.untyped_storage().resizable()
        assert view.dtype == array.dtype and view.shape == array.shape
        assert view.tobytes() == array.tobytes()
        assert not view.flags.writeable
    # The summary of the same tensor is the same whichever way its values were read
    # (repr tells -0.0 from 0.0): through the view, or through numpy() as before.
    ours = summarize_tensor(tensor, "cpu", 16)
    deferred.settle_waiting()
    assert tensor.untyped_storage().resizable()
    read: list[Any] = []

    def numpy(values: Any) -> np.ndarray:
        read.append(values)
        return values.numpy()

    monkeypatch.setattr(summary, "host_view", numpy)
    theirs = summarize_tensor(tensor, "cpu", 16)
    deferred.settle_waiting()
    assert read  # the numpy() path did run
    assert repr(ours) == repr(theirs)


def test_the_numpy_path_and_the_view_give_the_same_summary_of_one_tensor() -> None:
    for shape in SIZES:
        tensor = sample(shape, torch.float32)
        ours = repr(summarize_tensor(tensor, "cpu", 0))
        tensor.numpy()  # now pinned: the summary must not depend on it
        assert not tensor.untyped_storage().resizable()
        assert repr(summarize_tensor(tensor, "cpu", 0)) == ours


def test_a_freed_storage_is_described_without_values() -> None:
    for count in (10, 1000, LARGE + 1):
        tensor = torch.randn(count)
        tensor.untyped_storage().resize_(0)
        with pytest.raises(FreedStorageError):
            host_view(tensor)
        summary = summarize_tensor(tensor, "cpu", 0)
        assert summary.shape == (count,) and summary.dtype == "float32"
        assert summary.min is None and summary.norm is None


def test_the_view_keeps_its_tensor_alive_and_reads_negative_views_as_numpy_does() -> None:
    view = host_view(torch.arange(5.0))  # the tensor has no other owner
    assert view.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    with pytest.raises(RuntimeError):
        host_view(torch.arange(3.0)._neg_view())
    summary = summarize_tensor(torch.arange(100.0)._neg_view(), "cpu", 0)
    assert (summary.min, summary.max) == (-99.0, 0.0)
    assert summary.mean is not None and np.isclose(summary.mean, -49.5)
