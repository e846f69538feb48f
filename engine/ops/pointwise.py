"""Elementwise functions: ``exp log sqrt abs sin cos tanh sigmoid relu reciprocal clamp``,
``maximum minimum where masked_fill``, their in-place forms (``exp_`` ...) and ``zero_ fill_``."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.factories import as_array, get_default_dtype
from engine.graph import Node
from engine.ops._core import (
    check_inplace,
    check_same_device,
    dtype_name,
    inplace_source,
    make_node,
    operands,
    rebase_history,
    save,
    save_output,
    wrap,
)
from engine.tensor import Tensor

__all__ = [
    "FUNCTIONS",
    "TENSOR_METHODS",
    "AbsBackward0",
    "ClampBackward1",
    "CosBackward0",
    "ExpBackward0",
    "FillBackward2",
    "FillBackward3",
    "LogBackward0",
    "MaskedFillBackward0",
    "MaximumBackward0",
    "MinimumBackward0",
    "ReciprocalBackward0",
    "ReluBackward0",
    "SigmoidBackward0",
    "SinBackward0",
    "SqrtBackward0",
    "TanhBackward0",
    "WhereBackward0",
    "ZeroBackward0",
    "abs",
    "abs_",
    "clamp",
    "clamp_",
    "cos",
    "cos_",
    "exp",
    "exp_",
    "fill_",
    "log",
    "log_",
    "masked_fill",
    "masked_fill_",
    "maximum",
    "minimum",
    "reciprocal",
    "reciprocal_",
    "relu",
    "relu_",
    "sigmoid",
    "sigmoid_",
    "sin",
    "sin_",
    "sqrt",
    "sqrt_",
    "tanh",
    "tanh_",
    "where",
    "zero_",
]


def _floating(input: Tensor) -> Any:
    """``input``'s array, promoted to the default dtype if integral (as PyTorch's unary floats)."""
    data = input.data
    if not np.issubdtype(data.dtype, np.inexact):
        return data.astype(get_default_dtype())
    return data


def _constant(data: Any, like: Tensor) -> Tensor:
    """A tensor outside the graph on ``like``'s device (masks and signs, whose derivative is 0)."""
    return wrap(data, like.device)


# -- unary ---------------------------------------------------------------------
def _unary(input: Tensor, node_cls: type[Node], data: Any, keep: str) -> Tensor:
    """Wrap an elementwise result; its node saves the ``"input"`` or the ``"output"``."""
    node = make_node(node_cls, input)
    out = wrap(data, input.device, node)
    if node is not None:
        node.save(save(input) if keep == "input" else save_output(out))
    return out


class ExpBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (result,) = self.saved_tensors()
        return (grads[0] * result,)


def exp(input: Tensor) -> Tensor:
    """Elementwise ``e ** input``."""
    return _unary(input, ExpBackward0, input.device.xp.exp(_floating(input)), "output")


class LogBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (x,) = self.saved_tensors()
        return (grads[0] / x,)


def log(input: Tensor) -> Tensor:
    """Elementwise natural logarithm (``-inf`` at 0, ``nan`` below, as in PyTorch)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        data = input.device.xp.log(_floating(input))
    return _unary(input, LogBackward0, data, "input")


class SqrtBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (result,) = self.saved_tensors()
        return (grads[0] / (2 * result),)


def sqrt(input: Tensor) -> Tensor:
    """Elementwise square root (``nan`` for negative inputs, as in PyTorch)."""
    with np.errstate(invalid="ignore"):
        data = input.device.xp.sqrt(_floating(input))
    return _unary(input, SqrtBackward0, data, "output")


class AbsBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (x,) = self.saved_tensors()
        # sign(x) is piecewise constant, so it enters the graph as a constant.
        return (grads[0] * _constant(x.device.xp.sign(x.data), x),)


def abs(input: Tensor) -> Tensor:
    """Elementwise absolute value (gradient 0 at 0, as in PyTorch)."""
    return _unary(input, AbsBackward0, input.device.xp.abs(input.data), "input")


class SinBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (x,) = self.saved_tensors()
        return (grads[0] * cos(x),)


def sin(input: Tensor) -> Tensor:
    """Elementwise sine."""
    return _unary(input, SinBackward0, input.device.xp.sin(_floating(input)), "input")


class CosBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (x,) = self.saved_tensors()
        return (grads[0] * -sin(x),)


def cos(input: Tensor) -> Tensor:
    """Elementwise cosine."""
    return _unary(input, CosBackward0, input.device.xp.cos(_floating(input)), "input")


class TanhBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (result,) = self.saved_tensors()
        return (grads[0] * (1 - result * result),)


def tanh(input: Tensor) -> Tensor:
    """Elementwise hyperbolic tangent."""
    return _unary(input, TanhBackward0, input.device.xp.tanh(_floating(input)), "output")


class SigmoidBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (result,) = self.saved_tensors()
        return (grads[0] * result * (1 - result),)


def sigmoid(input: Tensor) -> Tensor:
    """Elementwise logistic function ``1 / (1 + exp(-input))``, without overflow."""
    xp = input.device.xp
    x = _floating(input)
    # exp(-|x|) never overflows; the two branches are the same function rearranged.
    e = xp.exp(-xp.abs(x))
    data = xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)
    return _unary(input, SigmoidBackward0, data, "output")


class ReluBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (result,) = self.saved_tensors()
        return (where(_constant(result.data > 0, result), grads[0], 0.0),)


def relu(input: Tensor) -> Tensor:
    """Elementwise ``max(input, 0)`` (gradient 0 at 0, as in PyTorch)."""
    xp = input.device.xp
    data = xp.maximum(input.data, xp.zeros((), input.data.dtype))
    return _unary(input, ReluBackward0, data, "output")


class ReciprocalBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (result,) = self.saved_tensors()
        return (grads[0] * -(result * result),)


def reciprocal(input: Tensor) -> Tensor:
    """Elementwise ``1 / input`` (``inf`` at 0, as in PyTorch)."""
    with np.errstate(divide="ignore"):
        data = 1 / _floating(input)
    return _unary(input, ReciprocalBackward0, data, "output")


# -- in place ------------------------------------------------------------------
def _unary_(self: Tensor, op: Any) -> Tensor:
    """``self`` overwritten with ``op(self)``, recorded as PyTorch records the in-place op.

    An op whose node saves its output saves ``self`` after the write, as PyTorch does: a
    later in-place change of ``self`` then fails backward with the version-counter error.
    An op that saves its input keeps a copy of the old values (PyTorch's ``original_self``).
    """
    check_inplace(self)
    out = op(inplace_source(self))
    node: Node | None = out.grad_fn
    rebase_history(self, out)
    if node is not None and self.grad_fn is node and node._saved[0]._tensor is None:
        node._saved = (save_output(self),)  # the output was saved: now it is self
    return self


def exp_(self: Tensor) -> Tensor:
    """In-place :func:`exp`."""
    return _unary_(self, exp)


def log_(self: Tensor) -> Tensor:
    """In-place :func:`log`."""
    return _unary_(self, log)


def sqrt_(self: Tensor) -> Tensor:
    """In-place :func:`sqrt`."""
    return _unary_(self, sqrt)


def abs_(self: Tensor) -> Tensor:
    """In-place :func:`abs`."""
    return _unary_(self, abs)


def sin_(self: Tensor) -> Tensor:
    """In-place :func:`sin`."""
    return _unary_(self, sin)


def cos_(self: Tensor) -> Tensor:
    """In-place :func:`cos`."""
    return _unary_(self, cos)


def tanh_(self: Tensor) -> Tensor:
    """In-place :func:`tanh`."""
    return _unary_(self, tanh)


def sigmoid_(self: Tensor) -> Tensor:
    """In-place :func:`sigmoid`."""
    return _unary_(self, sigmoid)


def relu_(self: Tensor) -> Tensor:
    """In-place :func:`relu`."""
    return _unary_(self, relu)


def reciprocal_(self: Tensor) -> Tensor:
    """In-place :func:`reciprocal`."""
    return _unary_(self, reciprocal)


# -- clamp ---------------------------------------------------------------------
class ClampBackward1(Node):
    """Backward of ``clamp`` with number bounds: the gradient passes where no bound was hit."""

    __slots__ = ("max", "min")
    max: float | None
    min: float | None

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (x,) = self.saved_tensors()
        inside = x.device.xp.ones(x.shape, dtype=bool)
        if self.min is not None:
            inside &= x.data >= self.min
        if self.max is not None:
            inside &= x.data <= self.max
        return (where(_constant(inside, x), grads[0], 0.0),)


def _check_bound(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise TypeError(
            f"clamp(): argument '{name}' must be a number or None, not {type(value).__name__} "
            f"(for tensor bounds use engine.maximum / engine.minimum)"
        )


def _clamp(input: Tensor, min: float | None, max: float | None) -> Tensor:
    """Clamp ``input`` (recording the node that reads it)."""
    _check_bound("min", min)
    _check_bound("max", max)
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    xp = input.device.xp
    data = input.data
    if not np.issubdtype(data.dtype, np.inexact) and any(
        isinstance(bound, float | np.floating) for bound in (min, max)
    ):
        # A float bound makes an integer tensor float (PyTorch's type promotion).
        data = data.astype(get_default_dtype())
    # maximum then minimum: NaN propagates and min > max gives max everywhere, as in PyTorch.
    if min is not None:
        data = xp.maximum(data, xp.asarray(min, dtype=data.dtype))
    if max is not None:
        data = xp.minimum(data, xp.asarray(max, dtype=data.dtype))
    node = make_node(ClampBackward1, input)
    if node is not None:
        node.min = min
        node.max = max
        node.save(save(input))
    return wrap(data, input.device, node)


def clamp(input: Tensor, min: float | None = None, max: float | None = None) -> Tensor:
    """Limit each element to ``[min, max]`` (either bound may be ``None``).

    Raises:
        RuntimeError: if both bounds are ``None``.
        TypeError: if a bound is not a number.
    """
    return _clamp(input, min, max)


def clamp_(self: Tensor, min: float | None = None, max: float | None = None) -> Tensor:
    """In-place :func:`clamp`."""
    check_inplace(self)
    return rebase_history(self, _clamp(inplace_source(self), min, max))


# -- binary --------------------------------------------------------------------
class MaximumBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return _select_backward(self, grads[0], greater=True)


class MinimumBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return _select_backward(self, grads[0], greater=False)


def _select_backward(node: Node, g: Tensor, greater: bool) -> tuple[Any, ...]:
    """Gradient of maximum/minimum: to the selected operand; split in half on ties."""
    a, b = node.saved_tensors()
    tie = _constant(a.data == b.data, g)
    a_wins = _constant(a.data > b.data if greater else a.data < b.data, g)
    half = g * 0.5
    grad_a = grad_b = None
    if node.should_compute_output(0):
        grad_a = where(tie, half, where(a_wins, g, 0.0))
    if node.should_compute_output(1):
        b_wins = _constant(~(a_wins.data | tie.data), g)
        grad_b = where(tie, half, where(b_wins, g, 0.0))
    return (grad_a, grad_b)


def maximum(input: Any, other: Any) -> Tensor:
    """Elementwise maximum of two tensors (or a tensor and a number), broadcasting.

    NaN propagates; on ties the gradient is split evenly, as in PyTorch.
    """
    a, b, device = operands(input, other)
    node = make_node(MaximumBackward0, a, b)
    if node is not None:
        node.save(save(a), save(b))
    return wrap(device.xp.maximum(a.data, b.data), device, node)


def minimum(input: Any, other: Any) -> Tensor:
    """Elementwise minimum of two tensors (or a tensor and a number), broadcasting.

    NaN propagates; on ties the gradient is split evenly, as in PyTorch.
    """
    a, b, device = operands(input, other)
    node = make_node(MinimumBackward0, a, b)
    if node is not None:
        node.save(save(a), save(b))
    return wrap(device.xp.minimum(a.data, b.data), device, node)


class WhereBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        (condition,) = self.saved_tensors()
        return (
            where(condition, g, 0.0) if self.should_compute_output(0) else None,
            where(condition, 0.0, g) if self.should_compute_output(1) else None,
        )


def where(condition: Any, input: Any, other: Any) -> Tensor:
    """``input`` where ``condition`` holds, else ``other``; all three broadcast together.

    ``input`` and ``other`` may be tensors or numbers; ``condition`` must be a bool tensor.

    Raises:
        RuntimeError: if ``condition`` is not boolean, or the devices differ.
    """
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        if not isinstance(condition, Tensor):
            raise TypeError("where(): expected at least one of the arguments to be a Tensor")
        # Two numbers share PyTorch's dtype for the pair (float if either is a float).
        pair, _ = as_array([input, other], None, condition.device)
        input = wrap(pair[0], condition.device)
        other = wrap(pair[1], condition.device)
    a, b, device = operands(input, other)
    if not isinstance(condition, Tensor):
        condition = wrap(device.xp.asarray(condition), device)
    if condition.dtype != np.bool_:
        raise RuntimeError(
            f"where expected condition to be a boolean tensor, but got a tensor with dtype "
            f"{dtype_name(condition.dtype)}"
        )
    check_same_device(condition, a, b)
    if condition.device is not device:
        condition = wrap(device.xp.asarray(condition.data), device)
    data = device.xp.where(condition.data, a.data, b.data)
    node = make_node(WhereBackward0, a, b)
    if node is not None:
        node.save(save(condition))
    return wrap(data, device, node)


class MaskedFillBackward0(Node):
    """Backward of ``masked_fill`` with a number: no gradient where the mask put it."""

    __slots__ = ("mask",)
    mask: Any  # bool array on the input's device

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        return (where(_constant(self.mask, g), 0.0, g),)


def masked_fill(input: Tensor, mask: Tensor, value: float) -> Tensor:
    """``input`` with ``value`` where ``mask`` (a bool tensor broadcastable to it) holds.

    Raises:
        RuntimeError: PyTorch's message for a mask that is not boolean.
        TypeError: for a ``value`` that is not a number.
    """
    if not isinstance(mask, Tensor) or mask.dtype != np.bool_:
        got = dtype_name(mask.dtype) if isinstance(mask, Tensor) else type(mask).__name__
        raise RuntimeError(
            f"masked_fill_ only supports boolean masks, but got mask with dtype {got}"
        )
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise TypeError(
            f"masked_fill(): argument 'value' must be a number, not {type(value).__name__}"
        )
    check_same_device(input, mask)
    xp = input.device.xp
    full_mask = xp.broadcast_to(mask.data, input.shape)
    data = xp.where(full_mask, xp.asarray(value, dtype=input.data.dtype), input.data)
    node = make_node(MaskedFillBackward0, input)
    if node is not None:
        node.mask = full_mask
    return wrap(data, input.device, node)


def masked_fill_(self: Tensor, mask: Tensor, value: float) -> Tensor:
    """In-place :func:`masked_fill`."""
    check_inplace(self)
    return rebase_history(self, masked_fill(inplace_source(self), mask, value))


# -- in place ------------------------------------------------------------------
def _zeros_like(g: Tensor) -> Tensor:
    return _constant(g.device.xp.zeros_like(g.data), g)


class ZeroBackward0(Node):
    """Backward of ``zero_``: the old value no longer matters."""

    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (_zeros_like(grads[0]),)


class FillBackward2(Node):
    """Backward of ``fill_`` with a number: the old value no longer matters."""

    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (_zeros_like(grads[0]),)


class FillBackward3(Node):
    """Backward of ``fill_`` with a 0-dim tensor: every element came from ``value``."""

    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        return (
            _zeros_like(g) if self.should_compute_output(0) else None,
            g.sum() if self.should_compute_output(1) else None,
        )


def zero_(self: Tensor) -> Tensor:
    """Fill with zeros in place."""
    check_inplace(self)
    node = make_node(ZeroBackward0, self)
    return rebase_history(self, wrap(self.device.xp.zeros_like(self.data), self.device, node))


def fill_(self: Tensor, value: Any) -> Tensor:
    """Fill with ``value`` (a number or a 0-dim tensor) in place.

    Raises:
        RuntimeError: if ``value`` is a tensor with dimensions.
    """
    xp = self.device.xp
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(
                f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} "
                f"dimensions."
            )
        check_inplace(self, value)
        check_same_device(self, value)
        node3 = make_node(FillBackward3, self, value)
        data = xp.full_like(self.data, xp.asarray(value.data).item())
        return rebase_history(self, wrap(data, self.device, node3))
    check_inplace(self)
    node2 = make_node(FillBackward2, self)
    return rebase_history(self, wrap(xp.full_like(self.data, value), self.device, node2))


def _where_method(self: Tensor, condition: Any, other: Any) -> Tensor:
    return where(condition, self, other)


TENSOR_METHODS = {
    "exp": exp,
    "log": log,
    "sqrt": sqrt,
    "abs": abs,
    "sin": sin,
    "cos": cos,
    "tanh": tanh,
    "sigmoid": sigmoid,
    "relu": relu,
    "reciprocal": reciprocal,
    "clamp": clamp,
    "masked_fill": masked_fill,
    "maximum": maximum,
    "minimum": minimum,
    "where": _where_method,
    "exp_": exp_,
    "log_": log_,
    "sqrt_": sqrt_,
    "abs_": abs_,
    "sin_": sin_,
    "cos_": cos_,
    "tanh_": tanh_,
    "sigmoid_": sigmoid_,
    "relu_": relu_,
    "reciprocal_": reciprocal_,
    "masked_fill_": masked_fill_,
    "clamp_": clamp_,
    "zero_": zero_,
    "fill_": fill_,
    "__abs__": abs,
}
"""Installed on :class:`engine.Tensor` by ``engine.ops``."""

FUNCTIONS = {
    **{k: v for k, v in TENSOR_METHODS.items() if not k.startswith("_") and not k.endswith("_")},
    **{k: v for k, v in TENSOR_METHODS.items() if k.endswith("_") and k != "masked_fill_"},
    "where": where,  # the method form takes (condition, other); the function (condition, a, b)
}
"""Exported as ``engine.<name>`` by ``engine.ops``."""
