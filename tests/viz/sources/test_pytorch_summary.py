"""Summaries of PyTorch tensors shared between tensors over the same memory."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

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
