"""The flow of parameters a reentrant checkpoint's nested backward call reached (Note [Nested
backward calls] in ``autograd_viz/grads/torch_calls.py``)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from autograd_viz.grads import watch_grads


def _model(torch: Any, checkpointed: bool) -> tuple[Any, Any]:
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Linear(4, 8)
            self.block = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))
            self.head = nn.Linear(8, 1)

        def forward(self, x: Any) -> Any:
            h = torch.tanh(self.stem(x))
            h = checkpoint(self.block, h, use_reentrant=True) if checkpointed else self.block(h)
            return self.head(h)

    torch.manual_seed(0)
    return Net(), torch.randn(5, 4)


def _flow(torch: Any, checkpointed: bool, steps: int = 1) -> tuple[dict[str, float], int]:
    net, x = _model(torch, checkpointed)
    with watch_grads() as watch:
        for _ in range(steps):  # no zero_grad: the second call adds to the .grad of the first
            net(x).pow(2).mean().backward()
    last = watch.report.last
    assert last is not None
    return {row.module: row.grad_norm for row in last.flow}, last.flow_left_out


def test_a_checkpointed_block_is_in_the_flow_as_without_the_checkpoint(torch: Any) -> None:
    plain, left_out = _flow(torch, checkpointed=False)
    assert left_out == 0
    nested, left_out = _flow(torch, checkpointed=True)
    assert left_out == 0
    assert set(nested) == set(plain) == {"stem", "block.0", "block.2", "head"}
    for module, norm in plain.items():
        assert math.isclose(nested[module], norm, rel_tol=1e-6), module


def test_a_nested_gradient_added_to_an_earlier_grad_is_left_out_and_counted(
    torch: Any,
) -> None:
    plain, left_out = _flow(torch, checkpointed=False, steps=2)
    assert left_out == 0 and set(plain) == {"stem", "block.0", "block.2", "head"}
    nested, left_out = _flow(torch, checkpointed=True, steps=2)
    assert left_out == 4  # block.0's and block.2's weight and bias
    assert set(nested) == {"stem", "head"}
    for module in nested:
        assert math.isclose(nested[module], plain[module], rel_tol=1e-6), module


def test_the_command_says_how_many_parameters_the_flow_leaves_out(
    torch: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from autograd_viz.cli.main import main

    script = tmp_path / "accumulate.py"
    script.write_text(
        "import torch\n"
        "from torch import nn\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "torch.manual_seed(0)\n"
        "model = nn.Sequential(nn.Linear(4, 8), nn.Tanh())\n"
        "head = nn.Linear(8, 1)\n"
        "x = torch.randn(5, 4)\n"
        "for _ in range(2):\n"
        "    head(checkpoint(model, x.requires_grad_(), use_reentrant=True)).sum().backward()\n"
    )
    trace = tmp_path / "t.jsonl"
    said = "2 parameters are left out of the flow: the gradients nested backward calls"
    assert main(["grads", "-o", str(trace), str(script)]) == 0
    assert said in " ".join(capsys.readouterr().out.split())
    assert main(["grads", str(trace)]) == 0  # the count is kept in the trace, and read back
    assert said in " ".join(capsys.readouterr().out.split())


def test_a_recorded_checkpointed_block_is_in_the_trace_s_flow(torch: Any) -> None:
    from autograd_viz.grads.trace_report import recorded_calls
    from autograd_viz.trace.recording import record

    plain, _ = _flow(torch, checkpointed=False)
    net, x = _model(torch, checkpointed=True)
    with record() as trace:
        net(x).pow(2).mean().backward()
    assert sum(1 for t in trace.graph_tasks.values() if t.parent) == 1  # the nested call
    (call,) = recorded_calls(trace)
    assert call.flow_left_out == 0  # the checkpoint's own input is no parameter
    recorded = {row.module: row.grad_norm for row in call.flow}
    assert set(recorded) == set(plain)
    for module, norm in plain.items():
        assert math.isclose(recorded[module], norm, rel_tol=1e-5), module
