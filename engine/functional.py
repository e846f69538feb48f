"""``engine.functional``: layers and losses built from differentiable ops.

Read it like ``torch.nn.functional``. ``mse_loss`` and ``nll_loss`` are ops of
their own (``MseLossBackward0``, ``NllLossBackward0``); the rest is composed
from the ops in ``engine.ops``, so their graphs show those ops. The op
modules are imported inside the functions: ``engine`` imports this module
before it installs the ops.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from engine.devices import Device, move_array
from engine.graph import Node
from engine.ops._core import check_same_device, make_node, save, wrap
from engine.tensor import Tensor

_REDUCTIONS = ("none", "mean", "sum")


def _check_reduction(reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _data_on(t: Tensor, device: Device) -> Any:
    """``t``'s array on ``device`` (a 0-dim CPU tensor may meet a tensor of any device)."""
    return t.data if t.device is device else move_array(t.data, t.device, device)


def _constant(data: Any, like: Tensor) -> Tensor:
    """An array on ``like``'s device, as a tensor outside the graph."""
    return Tensor._make(like.device.xp.asarray(data), like.device)


# -- layers and activations ---------------------------------------------------------
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias``, with ``weight`` of shape ``(out_features, in_features)``.

    Args:
        input: ``(*, in_features)``.
        weight: ``(out_features, in_features)``, as in ``torch.nn.Linear``.
        bias: ``(out_features,)``, or ``None``.

    Returns:
        ``(*, out_features)``.
    """
    from engine.ops.linalg import matmul

    out = matmul(input, weight.t())
    return out if bias is None else out + bias


def relu(input: Tensor) -> Tensor:
    """Elementwise ``max(input, 0)``."""
    from engine.ops.pointwise import relu as relu_op

    return relu_op(input)


def tanh(input: Tensor) -> Tensor:
    """Elementwise hyperbolic tangent."""
    from engine.ops.pointwise import tanh as tanh_op

    return tanh_op(input)


def log_softmax(input: Tensor, dim: int) -> Tensor:
    """``log(softmax(input, dim))``, computed stably."""
    from engine.ops.softmax import log_softmax as log_softmax_op

    return log_softmax_op(input, dim)


# -- mean squared error -----------------------------------------------------------
class MseLossBackward0(Node):
    __slots__ = ("numel", "reduction")
    numel: int
    reduction: str

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        x, target = self.saved_tensors()
        scale = 2.0 / self.numel if self.reduction == "mean" else 2.0
        grad = grads[0] * (x - target) * scale
        return (
            grad if self.should_compute_output(0) else None,
            -grad if self.should_compute_output(1) else None,
        )


def mse_loss(input: Tensor, target: Tensor, *, reduction: str = "mean") -> Tensor:
    """Squared differences, averaged (``"mean"``), summed (``"sum"``) or kept (``"none"``).

    Raises:
        ValueError: for an unknown ``reduction``.
    """
    _check_reduction(reduction)
    if input.shape != target.shape:
        warnings.warn(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}). This will likely lead to incorrect results due to broadcasting. "
            "Please ensure they have the same size.",
            UserWarning,
            stacklevel=2,
        )
    device = check_same_device(input, target)
    diff = _data_on(input, device) - _data_on(target, device)
    losses = diff * diff
    node = make_node(MseLossBackward0, input, target)
    if node is not None:
        node.reduction, node.numel = reduction, losses.size
        node.save(save(input), save(target))
    if reduction == "none":
        return wrap(losses, device, node)
    with np.errstate(invalid="ignore"):
        # An empty mean is NaN, as in PyTorch.
        total = losses.sum() if reduction == "sum" else losses.sum() / losses.size
    return wrap(device.xp.asarray(total, dtype=losses.dtype), device, node)


# -- negative log likelihood ----------------------------------------------------------
class NllLossBackward0(Node):
    """Scatters ``-weight * grad`` (over the total weight for ``"mean"``) to the targets."""

    __slots__ = ("coefficients", "self_sym_sizes", "target")
    coefficients: Any  # array (NumPy or CuPy, the input's device): gradient factor per row
    self_sym_sizes: tuple[int, ...]
    target: Any  # integer array of class indices (ignored ones replaced by 0)

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        xp = g.device.xp
        rows = _constant(xp.arange(self.self_sym_sizes[0]), g)
        values = g * _constant(self.coefficients.astype(g.dtype, copy=False), g)
        zeros = _constant(xp.zeros(self.self_sym_sizes, dtype=g.dtype), g)
        return (zeros.index_put((rows, _constant(self.target, g)), values, accumulate=True),)


def _nll_loss_2d(
    input: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int, reduction: str
) -> Tensor:
    """``nll_loss`` for input ``(N, C)`` and target ``(N,)``."""
    xp = input.device.xp
    n, classes = input.shape
    labels = _data_on(target, input.device)
    valid = labels != ignore_index
    out_of_range = valid & ((labels < 0) | (labels >= classes))
    if out_of_range.any():
        raise IndexError(f"Target {int(labels[out_of_range].reshape(-1)[0])} is out of bounds.")
    safe = xp.where(valid, labels, 0)
    w = valid.astype(input.dtype)
    if weight is not None:
        w = w * weight.data[safe].astype(input.dtype, copy=False)
    losses = -input.data[xp.arange(n), safe] * w
    node = make_node(NllLossBackward0, input)
    if reduction == "none":
        data, coefficients = losses, -w
    else:
        total = w.sum() if reduction == "mean" else 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            # Every target ignored: 0 / 0 is NaN, as in PyTorch.
            data, coefficients = losses.sum() / total, -w / total
    if node is not None:
        node.self_sym_sizes, node.target, node.coefficients = input.shape, safe, coefficients
    return wrap(xp.asarray(data, dtype=input.dtype), input.device, node)


def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> Tensor:
    """Negative log likelihood of class ``target`` under log-probabilities ``input``.

    Args:
        input: log-probabilities, ``(N, C)``, ``(C,)`` or ``(N, C, d1, ...)``.
        target: class indices (an integer tensor), ``(N,)``, ``()`` or ``(N, d1, ...)``.
        weight: a constant weight per class, ``(C,)`` (no gradient flows to it).
        ignore_index: targets equal to it add nothing (nor to the mean's denominator).
        reduction: ``"mean"`` (weighted), ``"sum"`` or ``"none"``.

    Raises:
        ValueError: an unknown ``reduction``, or batch sizes that differ.
        RuntimeError: a non-integer target, a target or weight of the wrong shape.
        IndexError: a target outside ``[0, C)``.
    """
    from engine.ops.pointwise import dtype_name

    _check_reduction(reduction)
    if not np.issubdtype(target.dtype, np.integer):
        raise RuntimeError(
            f"expected target dtype to be Long or Byte, but got {dtype_name(target.dtype)}"
        )
    check_same_device(input, target, *(() if weight is None else (weight,)))
    if input.ndim == 1:
        if target.numel() != 1:
            raise ValueError(
                f"For 1D input, 1D target must have size 1, but got target size: {target.numel()}"
            )
        loss = _nll_loss_2d(input.unsqueeze(0), target.reshape(1), weight, ignore_index, reduction)
        return loss.reshape(target.shape) if reduction == "none" else loss
    if input.shape[0] != (target.shape[0] if target.ndim else 1):
        raise ValueError(
            f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
            f"({target.shape[0] if target.ndim else 1})."
        )
    classes = input.shape[1]
    if weight is not None and weight.shape != (classes,):
        raise RuntimeError(
            f"weight tensor should be defined either for all {classes} classes or no classes but "
            f"got weight tensor of shape: [{', '.join(map(str, weight.shape))}]"
        )
    if input.ndim == 2:
        return _nll_loss_2d(input, target, weight, ignore_index, reduction)
    expected = (input.shape[0], *input.shape[2:])
    if target.shape != expected:
        raise RuntimeError(
            f"Expected target size [{', '.join(map(str, expected))}], got "
            f"[{', '.join(map(str, target.shape))}]"
        )
    # Classes last, then one row per position: the 2-D case.
    order = (0, *range(2, input.ndim), 1)
    rows = input.permute(order).reshape(-1, classes)
    loss = _nll_loss_2d(rows, target.reshape(-1), weight, ignore_index, reduction)
    return loss.reshape(target.shape) if reduction == "none" else loss


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> Tensor:
    """Cross entropy of logits ``input``: ``nll_loss(log_softmax(input, class_dim), target)``.

    ``target`` holds class indices (see :func:`nll_loss`) or, as a floating tensor shaped
    like ``input``, class probabilities.

    Raises:
        ValueError: for an unknown ``reduction``, and as :func:`nll_loss`.
    """
    _check_reduction(reduction)
    class_dim = 0 if input.ndim == 1 else 1
    log_probs = log_softmax(input, class_dim)
    if np.issubdtype(target.dtype, np.integer):
        return nll_loss(log_probs, target, weight, ignore_index=ignore_index, reduction=reduction)
    if target.shape != input.shape:
        raise RuntimeError(
            "Expected floating point type target to have the same shape as the input, got "
            f"[{', '.join(map(str, target.shape))}] and [{', '.join(map(str, input.shape))}]"
        )
    if weight is not None:
        shape = [1] * input.ndim
        shape[class_dim] = -1
        log_probs = log_probs * weight.detach().reshape(shape)
    losses = -(log_probs * target).sum(class_dim)
    if reduction == "none":
        return losses
    return losses.sum() if reduction == "sum" else losses.sum() / max(losses.numel(), 1)
