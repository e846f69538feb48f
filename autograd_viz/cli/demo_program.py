"""The program ``autograd-viz demo`` runs live: an RNN cell and a small MLP on three devices.

It is chosen so that every part of the engine has something to show:

* the RNN cell of PyTorch's dynamic-graph example runs on the CPU;
* an MLP's first layer runs on simulated accelerator ``sim:0`` and its second
  on ``sim:1``, so three engine threads with three ready queues take part and
  gradients cross devices;
* the MLP's second layer is checkpointed: its forward keeps no graph, and its
  backward recomputes the layer and calls :func:`engine.autograd.grad` from
  inside the engine, a reentrant backward with its own graph task;
* both losses meet in one sum, so one ``backward()`` runs it all.
"""

from __future__ import annotations

from typing import Any

import engine
import engine.functional as F
from engine import Tensor


def rnn_cell() -> tuple[list[Tensor], Tensor]:
    """The RNN cell of PyTorch's dynamic-graph example, with named leaves."""
    engine.manual_seed(0)
    W_h = engine.randn(20, 20, requires_grad=True, name="W_h")
    W_x = engine.randn(20, 10, requires_grad=True, name="W_x")
    x = engine.randn(1, 10, requires_grad=True, name="x")
    prev_h = engine.randn(1, 20, requires_grad=True, name="prev_h")

    i2h = W_x @ x.T
    h2h = W_h @ prev_h.T
    next_h = (i2h + h2h).tanh()
    loss = next_h.sum()
    return [W_h, W_x, x, prev_h], loss


class CheckpointedLayer(engine.Function):
    """``tanh(h @ W + b)`` that keeps no graph in forward and rebuilds it in backward.

    This is the reentrant pattern of ``torch.utils.checkpoint``: the backward
    recomputes the layer with grad mode on and differentiates it with a nested
    call into the engine, on the engine's own worker thread.
    """

    @staticmethod
    def forward(ctx: Any, h: Tensor, W: Tensor, b: Tensor) -> Tensor:  # noqa: N803
        ctx.save_for_backward(h, W, b)
        return (h @ W + b).tanh()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        saved = [t.detach().requires_grad_(True) for t in ctx.saved_tensors]
        with engine.enable_grad():
            h, W, b = saved
            out = (h @ W + b).tanh()
        grads = engine.autograd.grad(out, saved, grad)
        return tuple(grads)


def mlp(devices: tuple[str, str] = ("sim:0", "sim:1")) -> tuple[list[Tensor], Tensor]:
    """A two-layer classifier split over two devices, its second layer checkpointed."""
    first, second = devices
    engine.manual_seed(1)
    inputs = engine.randn(4, 3, device=first, name="inputs")
    W1 = engine.randn(3, 5, device=first, requires_grad=True, name="W1")
    b1 = engine.zeros(5, device=first, requires_grad=True, name="b1")
    W2 = engine.randn(5, 2, device=second, requires_grad=True, name="W2")
    b2 = engine.zeros(2, device=second, requires_grad=True, name="b2")
    labels = engine.tensor([0, 1, 1, 0])

    hidden = F.linear(inputs, W1.T, b1).tanh().to(second)
    logits = CheckpointedLayer.apply(hidden, W2, b2).to("cpu")
    loss = F.cross_entropy(logits, labels)
    return [W1, b1, W2, b2], loss


def demo_program() -> dict[str, Tensor]:
    """Build both models, run one backward through both; returns the leaves by name."""
    rnn_leaves, rnn_loss = rnn_cell()
    mlp_leaves, mlp_loss = mlp()
    total = rnn_loss + mlp_loss
    total.backward()
    return {str(t.name): t for t in rnn_leaves + mlp_leaves}
