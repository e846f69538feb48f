"""Summaries of PyTorch tensors shared between tensors over the same memory."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from autograd_viz.sources.pytorch import summary  # noqa: E402
from autograd_viz.sources.pytorch.summary import TorchSummary, summarize_tensor  # noqa: E402
from tests.viz.sources.summary_numbers import count_large_summaries  # noqa: E402


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


@pytest.mark.parametrize("shape", [(2, 64, 300), (4, 32, 10, 30), (38400,)])
@pytest.mark.parametrize("pieces", [False, True])
def test_a_reshaped_view_of_the_same_memory_takes_the_same_summary(
    shape: tuple[int, ...], pieces: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A logits gradient (batch × length, vocabulary) and the (batch, length, vocabulary) view
    # a ViewBackward0 hands on: one pass over the memory, each its own shape.
    if pieces:  # small pieces: the piece by piece path on a tensor this size
        monkeypatch.setattr(summary, "_PIECE", 4096)
    generator = torch.Generator().manual_seed(3)
    flat = torch.randn(128, 300, generator=generator)
    flat[5, 7] = -0.0
    view = flat.view(shape)
    alone = [repr(summarize_tensor(t, "cpu", 16)) for t in (flat, view)]
    computed = count_large_summaries(monkeypatch)
    first = TorchSummary(flat).resolve(16)
    second = TorchSummary(view).resolve(16)
    assert computed == [(128, 300)]
    assert second.shape == shape
    # Each is what the tensor alone gives, bit for bit.
    assert [repr(first), repr(second)] == alone


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
    computed = count_large_summaries(monkeypatch)
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


def _marked(block: torch.Tensor, kind: str, transposed: bool) -> torch.Tensor:
    """``block`` with the non-finite values ``kind`` names, transposed if asked."""
    marks = {
        "nan": [((3, 5), "nan"), ((7, 9), "inf")],
        "inf": [((0, 0), "inf"), ((-1, -1), "-inf"), ((1, 1), "inf")],
        "nan_last_piece": [((-1, -1), "nan")],
        "inf_first_piece": [((0, 1), "inf"), ((500, 3), "-inf")],
    }
    for (row, col), value in marks.get(kind, ()):
        block[row, col] = float(value)
    if kind == "overflow":
        block.fill_(3e38)  # finite values whose float32 sum is not
    return block.t() if transposed else block


def _large(kind: str, transposed: bool = False) -> torch.Tensor:
    generator = torch.Generator().manual_seed(11)
    # 24,000 elements: summarized where it lives
    return _marked(torch.randn(300, 80, generator=generator), kind, transposed)


@pytest.mark.parametrize("kind", ["finite", "nan", "inf", "overflow"])
@pytest.mark.parametrize("transposed", [False, True])
def test_a_large_tensor_off_the_cpu_gets_the_numbers_it_gets_on_the_cpu(
    kind: str, transposed: bool
) -> None:
    # The device path, one transfer for four numbers, run on a CPU tensor: the same reductions,
    # but for the norm, which the CPU takes from a dot product (Note [Summaries of large
    # tensors]): it agrees to float32 rounding, and both are nearer the float64 norm.
    values = _large(kind, transposed)
    shape = tuple(values.shape)
    here = summary._summarize_large(values, shape, "float32", "cpu")
    there = summary._summarize_on_device(values, shape, "float32", "cpu")
    assert repr(dataclasses.replace(there, norm=0.0)) == repr(dataclasses.replace(here, norm=0.0))
    if kind == "finite":
        wide = float(values.double().norm())
        assert here.norm == pytest.approx(wide, rel=1e-6)
        assert abs(here.norm - wide) <= abs(there.norm - wide)
    else:
        assert repr(there.norm) == repr(here.norm)
    if kind == "nan":
        assert (there.nan_count, there.inf_count) == (1, 1) and there.mean != there.mean
    elif kind == "inf":
        assert (there.nan_count, there.inf_count, there.min, there.max) == (
            0,
            3,
            float("-inf"),
            float("inf"),
        )
    elif kind == "overflow":
        assert there.min == there.max == pytest.approx(3e38) and there.nan_count == 0
    else:
        wide = values.double()
        assert there.min == float(values.min()) and there.max == float(values.max())
        assert there.mean == pytest.approx(float(wide.mean()), rel=1e-6)
        assert there.norm == pytest.approx(float(wide.norm()), rel=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs PyTorch with a CUDA GPU")
@pytest.mark.parametrize("kind", ["finite", "nan", "inf"])
def test_a_large_cuda_tensor_is_summarized_where_it_lives(kind: str) -> None:
    values = _large(kind)
    on_gpu = summarize_tensor(values.cuda(), "cuda:0")
    on_cpu = summarize_tensor(values, "cpu")
    assert (on_gpu.min, on_gpu.max, on_gpu.nan_count, on_gpu.inf_count) == (
        on_cpu.min,
        on_cpu.max,
        on_cpu.nan_count,
        on_cpu.inf_count,
    )
    if kind == "finite":  # float32 sums in another order: equal to float32 rounding
        assert on_gpu.mean == pytest.approx(on_cpu.mean, rel=1e-5, abs=1e-7)
        assert on_gpu.norm == pytest.approx(on_cpu.norm, rel=1e-5)


def _in_pieces_case(kind: str, transposed: bool) -> torch.Tensor:
    generator = torch.Generator().manual_seed(5)
    # Four pieces and a part (Note [Summaries of large tensors]).
    block = torch.randn(1100, 1000, generator=generator) * 1e-3 + 2e-4
    return _marked(block, kind, transposed)


@pytest.mark.parametrize("kind", ["finite", "nan_last_piece", "inf_first_piece", "overflow"])
@pytest.mark.parametrize("transposed", [False, True])
def test_a_large_cpu_tensor_summarized_in_pieces_gets_its_exact_extremes_and_counts(
    kind: str, transposed: bool
) -> None:
    values = _in_pieces_case(kind, transposed)
    assert values.numel() >= 4 * summary._PIECE  # the pieces' path
    shape = tuple(values.shape)
    got = summary._summarize_large(values, shape, "float32", "cpu")
    wide = values.double()
    if kind == "nan_last_piece":
        assert (got.nan_count, got.inf_count) == (1, 0) and got.mean != got.mean
    elif kind == "inf_first_piece":
        assert (got.nan_count, got.inf_count) == (0, 2)
        assert (got.min, got.max) == (float("-inf"), float("inf"))
    elif kind == "overflow":
        assert got.min == got.max == pytest.approx(3e38) and got.nan_count == 0
    else:
        assert (got.min, got.max) == (float(values.min()), float(values.max()))  # exact
        # Gathered in float64, the pieces' sum and norm stay close to the float64 ones
        # (a float32 norm of the whole is 1.3e-5 away here).
        assert got.mean == pytest.approx(float(wide.mean()), rel=1e-6)
        assert got.norm == pytest.approx(float(wide.norm()), rel=5e-6)
        assert (got.nan_count, got.inf_count) == (0, 0)
