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

__all__ = [
    "MseLossBackward0",
    "NllLoss2DBackward0",
    "NllLossBackward0",
    "cross_entropy",
    "linear",
    "log_softmax",
    "mse_loss",
    "nll_loss",
    "relu",
    "sigmoid",
    "softmax",
    "tanh",
]

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

    Recorded as PyTorch records it: with a bias, one ``AddmmBackward0`` for 2-D input, and
    for other contiguous input a ``ViewBackward0`` to rows and back around it; otherwise
    ``matmul``'s nodes (``MmBackward0``, ``TBackward0``, ...), then an in-place add of the bias.

    Args:
        input: ``(*, in_features)``.
        weight: ``(out_features, in_features)``, as in ``torch.nn.Linear``.
        bias: ``(out_features,)``, or ``None``.

    Returns:
        ``(*, out_features)``.
    """
    from engine.ops.linalg import addmm, matmul

    if bias is not None:
        if input.ndim == 2:
            return addmm(bias, input, weight.t())
        if input.data.flags.c_contiguous and (input.ndim == 3 or bias.ndim == 1):
            rows = addmm(bias, input.view(-1, input.shape[-1]), weight.t())
            return rows.view(*input.shape[:-1], weight.shape[0])
    out = matmul(input, weight.t())
    return out if bias is None else out.add_(bias)


def sigmoid(input: Tensor) -> Tensor:
    """Elementwise logistic function ``1 / (1 + exp(-input))``."""
    from engine.ops.pointwise import sigmoid as sigmoid_op

    return sigmoid_op(input)


def softmax(input: Tensor, dim: int) -> Tensor:
    """``exp(input)`` normalized to sum to 1 along ``dim``."""
    from engine.ops.softmax import softmax as softmax_op

    return softmax_op(input, dim)


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
    """Scatters ``-weight * grad`` (over the total weight for ``"mean"``) to the targets.

    For input ``(C,)`` or ``(N, C)``; :class:`NllLoss2DBackward0` has the same formula for
    ``(N, C, H, W)``.
    """

    __slots__ = ("coefficients", "self_sym_sizes", "target")
    coefficients: Any  # array (NumPy or CuPy, the input's device): gradient factor per row
    self_sym_sizes: tuple[int, ...]
    target: Any  # integer array of class indices, one per row (ignored ones replaced by 0)

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        xp = g.device.xp
        sizes = self.self_sym_sizes
        classes = sizes[0] if len(sizes) == 1 else sizes[1]
        n = self.target.shape[0]
        rows = _constant(xp.arange(n), g)
        coefficients = _constant(self.coefficients.astype(g.dtype, copy=False), g)
        values = (g.reshape(-1) if g.ndim > 1 else g) * coefficients
        zeros = _constant(xp.zeros((n, classes), dtype=g.dtype), g)
        grad = zeros.index_put((rows, _constant(self.target, g)), values, accumulate=True)
        if len(sizes) == 1:
            return (grad.reshape(classes),)
        if len(sizes) == 2:
            return (grad,)
        # Rows back to (N, C, H, W): classes last, then moved to dimension 1.
        ndim = len(sizes)
        grad = grad.reshape(sizes[0], *sizes[2:], classes)
        return (grad.permute(0, ndim - 1, *range(1, ndim - 1)),)


class NllLoss2DBackward0(NllLossBackward0):
    """:class:`NllLossBackward0` for input ``(N, C, H, W)`` (PyTorch's ``nll_loss2d``)."""

    __slots__ = ()


def _nll(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None,
    ignore_index: int,
    reduction: str,
    node_cls: type[NllLossBackward0],
) -> Tensor:
    """``nll_loss`` of input ``(C,)``, ``(N, C)`` or ``(N, C, H, W)``, as one node."""
    xp = input.device.xp
    classes = input.shape[0] if input.ndim == 1 else input.shape[1]
    data = input.data
    rows = data.reshape(1, classes) if input.ndim == 1 else xp.moveaxis(data, 1, -1)
    rows = rows.reshape(-1, classes)
    labels = _data_on(target, input.device).reshape(-1)
    valid = labels != ignore_index
    out_of_range = valid & ((labels < 0) | (labels >= classes))
    if out_of_range.any():
        raise IndexError(f"Target {int(labels[out_of_range].reshape(-1)[0])} is out of bounds.")
    safe = xp.where(valid, labels, 0)
    w = valid.astype(input.dtype)
    if weight is not None:
        w = w * weight.data[safe].astype(input.dtype, copy=False)
    losses = -rows[xp.arange(rows.shape[0]), safe] * w
    node = make_node(node_cls, input)
    if reduction == "none":
        out, coefficients = losses.reshape(target.shape), -w
    else:
        total = w.sum() if reduction == "mean" else 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            # Every target ignored: 0 / 0 is NaN, as in PyTorch.
            out, coefficients = losses.sum() / total, -w / total
    if node is not None:
        node.self_sym_sizes, node.target, node.coefficients = input.shape, safe, coefficients
    return wrap(xp.asarray(out, dtype=input.dtype), input.device, node)


def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> Tensor:
    """Negative log likelihood of class ``target`` under log-probabilities ``input``.

    Recorded as PyTorch records it: ``NllLossBackward0`` for ``(C,)`` and ``(N, C)`` input,
    ``NllLoss2DBackward0`` for ``(N, C, H, W)``, and for other ranks ``NllLoss2DBackward0``
    on a ``(N, C, 1, -1)`` view of the input.

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
        return _nll(input, target, weight, ignore_index, reduction, NllLossBackward0)
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
        return _nll(input, target, weight, ignore_index, reduction, NllLossBackward0)
    expected = (input.shape[0], *input.shape[2:])
    if target.shape != expected:
        raise RuntimeError(
            f"Expected target size [{', '.join(map(str, expected))}], got "
            f"[{', '.join(map(str, target.shape))}]"
        )
    if input.ndim == 4:
        return _nll(input, target, weight, ignore_index, reduction, NllLoss2DBackward0)
    n = input.shape[0]
    flat = input.contiguous().view(n, classes, 1, -1)
    loss = _nll(flat, target.reshape(n, 1, -1), weight, ignore_index, reduction, NllLoss2DBackward0)
    return loss.view(*expected) if reduction == "none" else loss


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    *,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross entropy of logits ``input``: ``nll_loss(log_softmax(input, class_dim), target)``.

    ``target`` holds class indices (see :func:`nll_loss`) or, as a floating tensor shaped
    like ``input``, class probabilities. With ``label_smoothing`` the target is mixed with
    the uniform distribution over the classes. The graph is PyTorch's, node for node.

    Raises:
        ValueError: for an unknown ``reduction``, and as :func:`nll_loss`.
        RuntimeError: a ``label_smoothing`` outside ``[0, 1]``, a probability target of
            another shape.
    """
    _check_reduction(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    class_dim = 0 if input.ndim == 1 else 1
    log_probs = log_softmax(input, class_dim)
    if np.issubdtype(target.dtype, np.integer):
        loss = nll_loss(log_probs, target, weight, ignore_index=ignore_index, reduction=reduction)
        if label_smoothing > 0.0:
            return _smoothed(
                loss, log_probs, target, weight, ignore_index, reduction, label_smoothing
            )
        return loss
    if target.shape != input.shape:
        raise RuntimeError(
            "Expected floating point type target to have the same shape as the input, got "
            f"[{', '.join(map(str, target.shape))}] and [{', '.join(map(str, input.shape))}]"
        )
    from engine.ops.arithmetic import div_scalar

    classes = input.shape[class_dim]
    if label_smoothing > 0.0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    products = log_probs * target
    if weight is not None:
        products = products * _class_weights(weight, input.ndim, class_dim)
    if reduction == "none":
        return -products.sum(class_dim)
    total = -products.sum()
    if reduction == "sum":
        return total
    if input.numel() == 0:
        return total.fill_(float("nan"))
    return div_scalar(total, input.numel() / classes)


def _class_weights(weight: Tensor, ndim: int, class_dim: int) -> Tensor:
    """``weight`` shaped to broadcast along the class dimension of an ``ndim`` input."""
    shape = [1] * ndim
    shape[class_dim] = -1
    return weight.detach().view(*shape)


def _smoothed(
    nll: Tensor,
    log_probs: Tensor,
    target: Tensor,
    weight: Tensor | None,
    ignore_index: int,
    reduction: str,
    label_smoothing: float,
) -> Tensor:
    """PyTorch's ``cross_entropy_loss_label_smoothing`` from the class-index loss ``nll``."""
    from engine.ops.arithmetic import mul_scalar

    class_dim = 0 if log_probs.ndim == 1 else 1
    classes = log_probs.shape[class_dim]
    if weight is None:
        smooth = -log_probs.sum(class_dim)
    else:
        smooth = -(log_probs * _class_weights(weight, log_probs.ndim, class_dim)).sum(class_dim)
    ignored = target == ignore_index
    smooth.masked_fill_(ignored, 0.0)
    if reduction == "mean":
        if weight is None:
            denominator = (~ignored).sum()
        else:
            kept = target.data[~ignored.data].reshape(-1)
            denominator = Tensor._make(weight.data[kept].sum(), weight.device)
        smooth = smooth.sum() / denominator
    elif reduction == "sum":
        smooth = smooth.sum()
    return mul_scalar(nll, 1 - label_smoothing) + mul_scalar(smooth, label_smoothing / classes)
