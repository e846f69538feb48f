"""A fused attention kernel's own state (its padded ``log_sumexp``) is not a NaN finding.

On a GPU, ``_scaled_dot_product_efficient_attention`` returns ``log_sumexp`` padded
to a multiple of 32 queries with ``inf`` by design, so every transformer step was
reported as an Inf born in attention. The returns are told apart by their schema
names (Note on ``KERNEL_STATE_RETURNS``); here a CPU op with the same return names
stands in for the GPU kernel, and PyTorch's real attention schemas are checked too.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")

from autograd_viz.nan.forward.checks import TorchNanChecker  # noqa: E402
from autograd_viz.nan.watch import watch_nan  # noqa: E402


@pytest.fixture(scope="module")
def attention_like() -> Iterator[object]:
    """``avt_kernel::attn(q) -> (output, log_sumexp, philox_seed)``: log_sumexp padded with inf."""
    lib = torch.library.Library("avt_kernel", "DEF")
    lib.define(
        "attn(Tensor q, bool nan_out) -> (Tensor output, Tensor log_sumexp, Tensor philox_seed)"
    )

    def attn(q: torch.Tensor, nan_out: bool) -> tuple[torch.Tensor, ...]:
        out = q * 2 if not nan_out else q * float("nan")
        lse = torch.full((q.shape[0], 32), float("inf"))
        lse[:, : q.shape[1]] = q.logsumexp(0, keepdim=True)
        return out, lse, torch.full((), float("nan"))

    lib.impl("attn", attn, "CPU")
    yield torch.ops.avt_kernel.attn
    del lib


def test_padding_of_log_sumexp_is_not_a_birth(attention_like: object) -> None:
    q = torch.randn(3, 4)
    with watch_nan() as watch:
        _out, lse, _ = attention_like(q, False)  # type: ignore[operator]
    assert not lse.isfinite().all()  # the kernel really made inf there
    assert not watch.found


def test_the_attention_output_is_still_checked(attention_like: object) -> None:
    q = torch.randn(3, 4)
    with watch_nan() as watch:
        attention_like(q, True)  # type: ignore[operator]
    # Its output is thrown away: contained (Note [Lineage]), and still checked and counted.
    first = watch.report.first_contained
    assert first is not None and watch.report.contained == 1
    assert first.aten_op == "avt_kernel.attn.default"
    # the output, not the (3, 32) state beside it
    assert [tuple(s.shape) for s in first.outputs if s is not None] == [(3, 4)]


@pytest.mark.parametrize(
    "name",
    [
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_cudnn_attention",
        "_efficient_attention_forward",
        "_flash_attention_forward",
    ],
)
def test_pytorch_attention_kernels_check_their_output_only(name: str) -> None:
    op = getattr(torch.ops.aten, name).default
    info = TorchNanChecker()._ops._op_info(op)
    returns = op._schema.returns
    assert [i for i in info.fresh if str(returns[i].type) == "Tensor"] == [0]
