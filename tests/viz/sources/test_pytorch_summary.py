"""Summaries of PyTorch tensors shared between tensors over the same memory."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from autograd_viz.sources.pytorch import summary  # noqa: E402
from autograd_viz.sources.pytorch.summary import TorchSummary, summarize_tensor  # noqa: E402


@pytest.mark.parametrize("shape", [(1024, 1024), (256, 1024), (4096, 10), (300, 77)])
@pytest.mark.parametrize("values", ["normal", "zeros of both signs", "relu"])
def test_a_transpose_over_the_same_memory_takes_the_same_summary(
    shape: tuple[int, int], values: str
) -> None:
    generator = torch.Generator().manual_seed(sum(shape))  # large: summarized where it lives
    block = torch.randn(shape, generator=generator)
    if values == "zeros of both signs":
        block[block.abs() < 0.5] = 0.0
        block[:3] = -0.0
    elif values == "relu":
        block = block.relu()
    transposed = block.t()  # the layout AddmmBackward0 makes (a summary holds it weakly)
    first = TorchSummary(transposed).resolve(16)
    second = TorchSummary(block).resolve(16)  # takes the first's numbers
    assert second.shape == shape and first.shape == shape[::-1]
    # Both are what each tensor alone gives, bit for bit (repr tells -0.0 from 0.0).
    assert repr(first) == repr(summarize_tensor(transposed, "cpu", 16))
    assert repr(second) == repr(summarize_tensor(block, "cpu", 16))
    assert repr(dataclasses.replace(first, shape=shape)) == repr(second)


def test_memory_written_in_place_is_summarized_again() -> None:
    block = torch.randn(256, 128)
    before = TorchSummary(block).resolve()
    block.mul_(2)  # bumps the version counter the transpose shares
    transposed = block.t()
    after = TorchSummary(transposed).resolve()
    assert after.max == 2 * before.max


def test_the_memory_is_shared_after_the_first_tensor_over_it_dies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A weight gradient: addmm's transposed output, TBackward0's view of it, then .grad.
    computed: list[tuple[int, ...]] = []
    real = summary._summarize_large

    def counting(values: Any, shape: tuple[int, ...], *rest: Any) -> Any:
        computed.append(shape)
        return real(values, shape, *rest)

    monkeypatch.setattr(summary, "_summarize_large", counting)
    block = torch.randn(512, 256)
    first = block.t()
    view = first.t()  # the same memory, block's layout
    first_summary = TorchSummary(first).resolve(16)
    view_summary = TorchSummary(view).resolve(16)
    del first  # dies before the third alias is summarized
    third = view.view(512, 256)
    third_summary = TorchSummary(third).resolve(16)
    assert computed == [(256, 512)]  # one pass over the memory for all three
    assert repr(view_summary) == repr(third_summary) == repr(summarize_tensor(block, "cpu", 16))
    assert first_summary.shape == (256, 512)
