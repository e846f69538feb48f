"""Arithmetic: ``+ - * / **`` and unary ``-``, out of place and in place."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine import grad_mode
from engine.factories import get_default_dtype
from engine.graph import Node
from engine.ops._core import (
    check_inplace,
    inplace_source,
    make_node,
    operands,
    rebase_history,
    save,
    scalar_op,
    wrap,
)
from engine.tensor import Tensor, make_tensor

_new_object = object.__new__

__all__ = [
    "FUNCTIONS",
    "TENSOR_METHODS",
    "UNUSED",
    "AddBackward0",
    "DivBackward0",
    "DivBackward1",
    "MulBackward0",
    "MulBackward1",
    "NegBackward0",
    "PowBackward0",
    "PowBackward1",
    "PowBackward2",
    "RsubBackward1",
    "SubBackward0",
    "add",
    "add_",
    "div",
    "div_",
    "div_scalar",
    "mul",
    "mul_",
    "mul_scalar",
    "neg",
    "neg_",
    "pow",
    "sub",
    "sub_",
]


class AddBackward0(Node):
    __slots__ = ("alpha",)
    keeps_metadata = True  # Note [Gradients that keep their metadata] in engine.validation
    alpha: float

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        return (g, g if self.alpha == 1 else g * self.alpha)


def _is_scalar(value: Any) -> bool:
    """A real number, Python's or NumPy's, but not a bool."""
    cls = type(value)
    if cls is float or cls is int:  # the common case first: one type check
        return True
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


def _number(value: Any) -> Any:
    """A NumPy number as the Python number it holds (exactly), anything else as it is.

    PyTorch takes a NumPy scalar operand as a number: ``float32 tensor * np.float64(2)``
    is float32. NumPy 2 would make it float64 (its own scalars are not "weak", NEP 50).
    """
    return value.item() if isinstance(value, np.generic) else value


def _data_for_scalar(t: Tensor, scalar: float) -> Any:
    """``t``'s array, as the default float dtype when a float scalar meets an integer tensor.

    PyTorch gives ``int64 tensor * 0.5`` the default dtype (float32); NumPy would give float64.
    """
    data = t.data
    if isinstance(scalar, float) and data.dtype.kind in "biu":
        return data.astype(get_default_dtype())
    return data


_ONE = 1
"""The default alpha, as the object the default is: ``alpha is not _ONE`` skips the check."""


def _check_alpha(kind: str, alpha: Any) -> None:
    """PyTorch's alpha_check for a result of NumPy dtype kind ``kind``.

    Raises:
        RuntimeError: PyTorch's message for a bool alpha with a non-bool result, a
            non-integer alpha with an integer result, or a complex alpha with a real one.
    """
    if isinstance(alpha, bool | np.bool_):
        if kind != "b":
            raise RuntimeError("Boolean alpha only supported for Boolean results.")
        return
    if kind not in "fc" and not isinstance(alpha, int | np.integer):
        raise RuntimeError(
            "For integral input tensors, argument alpha must not be a floating point number."
        )
    if kind != "c" and isinstance(alpha, complex | np.complexfloating):
        raise RuntimeError(
            "For non-complex input tensors, argument alpha must not be a complex number."
        )


def add(input: Any, other: Any, *, alpha: float = 1) -> Tensor:
    """``input + alpha * other``, broadcasting."""
    kind = type(other)
    if kind is not float and kind is not int and _is_scalar(other):
        other = _number(other)
        kind = type(other)
    if isinstance(input, Tensor) and (kind is float or kind is int):
        # A Python scalar never needs a gradient: no tensor is made for it, no edge.
        data = input.data
        if data.dtype.kind in "biu":
            data = _data_for_scalar(input, other)
        if alpha is not _ONE:
            _check_alpha(data.dtype.kind, alpha)  # a real number keeps data's kind
        out, node = scalar_op(AddBackward0, input, data + alpha * other)
        if node is not None:
            node.alpha = alpha
        return out
    a, b, device = operands(input, other)
    if alpha is not _ONE:
        _check_alpha(a.data.dtype.kind, alpha)
    node = make_node(AddBackward0, a, b)
    if node is not None:
        node.alpha = alpha
    data = a.data + b.data if alpha == 1 else a.data + alpha * b.data
    return wrap(data, device, node)


class SubBackward0(Node):
    __slots__ = ("alpha",)
    keeps_metadata = True  # Note [Gradients that keep their metadata] in engine.validation
    alpha: float

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        return (g, -g if self.alpha == 1 else g * -self.alpha)


def sub(input: Any, other: Any, *, alpha: float = 1) -> Tensor:
    """``input - alpha * other``, broadcasting."""
    if isinstance(input, Tensor) and _is_scalar(other):
        other = _number(other)
        data = _data_for_scalar(input, other)
        if alpha is not _ONE:
            _check_alpha(data.dtype.kind, alpha)  # a real number keeps data's kind
        out, node = scalar_op(SubBackward0, input, data - alpha * other)
        if node is not None:
            node.alpha = alpha
        return out
    a, b, device = operands(input, other)
    if alpha is not _ONE:
        _check_alpha(a.data.dtype.kind, alpha)
    node = make_node(SubBackward0, a, b)
    if node is not None:
        node.alpha = alpha
    data = a.data - b.data if alpha == 1 else a.data - alpha * b.data
    return wrap(data, device, node)


# Note [A number NumPy multiplies fast]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# NumPy 2 gives a Python float a "weak" type (NEP 50): ``array * 1.0001``
# first works out what dtype the number may take, and that costs more than
# the product itself (5,900 instructions a product against 4,100 for the
# same number as a 0-d float64 array, which is "strong"). Against a float64
# array the two give the same dtype and the same bits, so MulBackward0 keeps
# its number twice: ``_scalar`` as given (what every reader sees, and the
# create_graph path multiplies by) and ``_operand``, what NumPy multiplies
# by, forward and backward: the 0-d array where the data is a float64
# ndarray, else the number. Making the array costs about what one product
# saves, so it is made for a number seen twice in a row, as the same
# object: a chain's or a model's constant (``y * STEP``, ``x * self.scale``)
# pays once and saves in every op and every backward, and a program whose
# numbers never repeat pays one identity check an op. The last number met
# is only a hint; a float and its array are one tuple, swapped in one
# store, so two threads never pair a number with another's array. The
# array is read-only: every node of that number shares it.

_FLOAT64 = np.dtype(np.float64)
_ndarray = np.ndarray
_asarray = np.asarray
_last_number: Any = None
"""The last number ``mul`` met with float64 data: a hint that the next may be the same object."""
_last_operand: tuple[Any, Any] = (None, None)
"""The last float met twice in a row, and its 0-d array."""


class MulBackward0(Node):
    __slots__ = ("_operand", "_scalar")
    keeps_metadata = True  # Note [Gradients that keep their metadata] in engine.validation
    _scalar: float | None  # the Python scalar operand, or None for two tensors
    _operand: Any  # what NumPy multiplies by (Note [A number NumPy multiplies fast]); unset for two

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        if self._scalar is not None:
            # A gradient that requires grad (create_graph) goes through the op, which records
            # it when grad mode is on; for any other, the op records nothing in any grad mode
            # and makes exactly this tensor (no thread-local read).
            if g._requires_grad:
                return (g * self._scalar, None)
            # make_tensor written out: a chain of scalar ops is mostly this product, and the
            # call was a twentieth of its node (tests/engine/test_bare_nodes.py compares them).
            out: Tensor = _new_object(Tensor)
            out.data = g.data * self._operand  # Note [A number NumPy multiplies fast]
            out.device = g.device
            out.grad_fn = None
            out._requires_grad = False
            out._output_nr = 0
            out._version_counter = None
            out._base = None
            if grad_mode.inference_threads and grad_mode._state.inference:
                out._is_inference = True
            return (out, None)
        a, b = self.saved_tensors()
        return (
            g * b if self.should_compute_output(0) else None,
            g * a if self.should_compute_output(1) else None,
        )


def mul(input: Any, other: Any) -> Tensor:
    """Elementwise product, broadcasting."""
    global _last_number, _last_operand  # Note [A number NumPy multiplies fast]
    kind = type(other)
    if kind is not float and kind is not int and _is_scalar(other):
        other = _number(other)
        kind = type(other)
    if isinstance(input, Tensor) and (kind is float or kind is int):
        # A Python scalar is kept as a number, not saved as a tensor (PyTorch's MulBackward0
        # also only keeps the scalar here).
        data = input.data
        dtype = data.dtype
        operand = other
        if dtype is _FLOAT64:
            if other is _last_number and type(data) is _ndarray:
                # Met twice in a row: Note [A number NumPy multiplies fast].
                pair = _last_operand
                if pair[0] is other:
                    operand = pair[1]
                elif kind is float:
                    operand = _asarray(other)
                    operand.flags.writeable = False  # shared by every node of this number
                    _last_operand = (other, operand)
            else:
                _last_number = other
        elif dtype.kind in "biu":
            data = _data_for_scalar(input, other)
        out, node = scalar_op(MulBackward0, input, data * operand)
        if node is not None:
            node._scalar = other
            node._operand = operand
        return out
    a, b, device = operands(input, other)
    node = make_node(MulBackward0, a, b)
    if node is not None:
        node._scalar = None
        node.save(
            save(a) if b._requires_grad else UNUSED,
            save(b) if a._requires_grad else UNUSED,
        )
    return wrap(a.data * b.data, device, node)


class DivBackward0(Node):
    __slots__ = ("_scalar",)
    keeps_metadata = True  # Note [Gradients that keep their metadata] in engine.validation
    _scalar: float | None  # the Python scalar operand, or None for two tensors

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        if self._scalar is not None:
            return (g / self._scalar, None)
        a, b = self.saved_tensors()
        return (
            g / b if self.should_compute_output(0) else None,
            -g * a / (b * b) if self.should_compute_output(1) else None,
        )


def div(input: Any, other: Any) -> Tensor:
    """Elementwise true division, broadcasting."""
    if isinstance(input, Tensor) and _is_scalar(other):
        other = _number(other)
        with np.errstate(divide="ignore", invalid="ignore"):
            data = _data_for_scalar(input, float(other)) / other
        out, node = scalar_op(DivBackward0, input, data)
        if node is not None:
            node._scalar = other
        return out
    a, b, device = operands(input, other)
    node = make_node(DivBackward0, a, b)
    if node is not None:
        node._scalar = None
        node.save(save(a) if b._requires_grad else UNUSED, save(b))
    with np.errstate(divide="ignore", invalid="ignore"):  # PyTorch gives inf/nan silently
        data = a.data / b.data
    return wrap(data, device, node)


class NegBackward0(Node):
    __slots__ = ()
    keeps_metadata = True  # Note [Gradients that keep their metadata] in engine.validation

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (-grads[0],)


def neg(input: Tensor) -> Tensor:
    """Elementwise negation."""
    node = make_node(NegBackward0, input)
    return wrap(-input.data, input.device, node)


def neg_(self: Tensor) -> Tensor:
    """In-place :func:`neg`."""
    check_inplace(self)
    return rebase_history(self, neg(inplace_source(self)))


class PowBackward0(Node):
    """Tensor ** scalar."""

    __slots__ = ("exponent",)
    exponent: float

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        (a,) = self.saved_tensors()
        p = self.exponent
        if p == 0:  # PyTorch's zeros, even where the power's own derivative is not finite
            return (make_tensor(a.device.xp.zeros_like(grads[0].data), a.device),)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (grads[0] * (p * a ** (p - 1)),)


class PowBackward1(Node):
    """Tensor ** Tensor.

    At a zero base, PyTorch's formulas: the base's gradient is 0 where the exponent is 0,
    and the exponent's is 0 where the exponent is at least 0, ``result * log(0)`` (``-inf``
    times the sign of the result) where it is negative.
    """

    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        from engine.ops.pointwise import log, where

        g = grads[0]
        a, b = self.saved_tensors()
        grad_a = grad_b = None
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.should_compute_output(0):
                grad_a = where(b == 0, 0.0, g * (b * a ** (b - 1)))
            if self.should_compute_output(1):
                zero = (a == 0) & (b >= 0)
                # log(1) where the gradient is 0 anyway, so a second derivative stays finite.
                grad_b = g * where(zero, 0.0, a**b * log(where(zero, 1.0, a)))
        return (grad_a, grad_b)


class PowBackward2(Node):
    """scalar ** Tensor."""

    __slots__ = ("base",)
    base: float

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        exponent, result = self.saved_tensors()
        with np.errstate(divide="ignore", invalid="ignore"):
            local = result * float(np.log(np.float64(self.base)))
            if self.base == 0:  # 0 where the exponent is at least 0, as in PyTorch
                from engine.ops.pointwise import where

                local = where(exponent >= 0, 0.0, local)
            return (grads[0] * local,)


def pow(input: Any, exponent: Any) -> Tensor:
    """``input ** exponent`` for tensor or scalar exponents and bases."""
    if _is_scalar(exponent):
        exponent = _number(exponent)
    elif _is_scalar(input):
        input = _number(input)
    if isinstance(input, Tensor) and isinstance(exponent, int | float):
        node = make_node(PowBackward0, input)
        if node is not None:
            node.exponent = exponent
            node.save(save(input))
        return wrap(_data_for_scalar(input, exponent) ** exponent, input.device, node)
    if not isinstance(input, Tensor) and isinstance(input, int | float):
        from engine.ops._core import save_output

        node2 = make_node(PowBackward2, exponent)
        out = wrap(input ** _data_for_scalar(exponent, input), exponent.device, node2)
        if node2 is not None:
            node2.base = input
            node2.save(save(exponent), save_output(out))
        return out
    a, b, device = operands(input, exponent)
    node1 = make_node(PowBackward1, a, b)
    if node1 is not None:
        node1.save(save(a), save(b))
    return wrap(a.data**b.data, device, node1)


class MulBackward1(Node):
    """``tensor * number`` as PyTorch's own composite ops record it (``mul.Scalar``): one edge."""

    __slots__ = ("other",)
    other: float

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (grads[0] * self.other,)


def mul_scalar(input: Tensor, other: float) -> Tensor:
    """``input * other`` recorded as ``MulBackward1`` (``x * 2.0`` from Python is MulBackward0)."""
    node = make_node(MulBackward1, input)
    if node is not None:
        node.other = other
    return wrap(_data_for_scalar(input, other) * other, input.device, node)


class DivBackward1(Node):
    """``tensor / number`` as PyTorch's own composite ops record it (``div.Scalar``): one edge."""

    __slots__ = ("other",)
    other: float

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (grads[0] / self.other,)


def div_scalar(input: Tensor, other: float) -> Tensor:
    """``input / other`` recorded as ``DivBackward1`` (``x / 2.0`` from Python is DivBackward0)."""
    node = make_node(DivBackward1, input)
    if node is not None:
        node.other = other
    with np.errstate(divide="ignore", invalid="ignore"):
        data = _data_for_scalar(input, float(other)) / other
    return wrap(data, input.device, node)


class _UnusedSaved:
    """Stands in for a saved tensor that backward never unpacks."""

    __slots__ = ()
    data = None

    def unpack(self, saved_for: Node | None = None) -> None:
        return None

    def release(self) -> None:
        return None


UNUSED: Any = _UnusedSaved()
"""Stands in for an operand whose value the backward never reads."""


# -- in place ------------------------------------------------------------------
def _tensor_or_none(value: Any) -> Tensor | None:
    return value if isinstance(value, Tensor) else None


def add_(self: Tensor, other: Any, *, alpha: float = 1) -> Tensor:
    """In-place ``self += alpha * other``."""
    check_inplace(self, _tensor_or_none(other))
    return rebase_history(
        self, add(inplace_source(self, _tensor_or_none(other)), other, alpha=alpha)
    )


def sub_(self: Tensor, other: Any, *, alpha: float = 1) -> Tensor:
    """In-place ``self -= alpha * other``."""
    check_inplace(self, _tensor_or_none(other))
    return rebase_history(
        self, sub(inplace_source(self, _tensor_or_none(other)), other, alpha=alpha)
    )


def mul_(self: Tensor, other: Any) -> Tensor:
    """In-place ``self *= other``."""
    check_inplace(self, _tensor_or_none(other))
    return rebase_history(self, mul(inplace_source(self, _tensor_or_none(other)), other))


def div_(self: Tensor, other: Any) -> Tensor:
    """In-place ``self /= other``."""
    check_inplace(self, _tensor_or_none(other))
    return rebase_history(self, div(inplace_source(self, _tensor_or_none(other)), other))


def _radd(self: Tensor, other: Any) -> Tensor:
    return add(other, self)


class RsubBackward1(Node):
    """``number - tensor`` (PyTorch's ``rsub.Scalar``): one edge, the tensor's."""

    __slots__ = ("alpha",)
    keeps_metadata = True  # Note [Gradients that keep their metadata] in engine.validation
    alpha: float

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        return (-g if self.alpha == 1 else g * -self.alpha,)


def _rsub(self: Tensor, other: Any) -> Tensor:
    """``other - self``; a number on the left records PyTorch's ``RsubBackward1``."""
    if _is_scalar(other):
        other = _number(other)
        out, node = scalar_op(RsubBackward1, self, other - _data_for_scalar(self, other))
        if node is not None:
            node.alpha = 1
            node._next_edges = node._next_edges[:1]  # no edge for the number
        return out
    return sub(other, self)


def _rmul(self: Tensor, other: Any) -> Tensor:
    return mul(self, other) if _is_scalar(other) else mul(other, self)


def _rtruediv(self: Tensor, other: Any) -> Tensor:
    if _is_scalar(other):
        # PyTorch computes ``number / tensor`` as ``reciprocal(tensor) * number``.
        from engine.ops.pointwise import reciprocal

        return mul(reciprocal(self), other)
    return div(other, self)


def _rpow(self: Tensor, other: Any) -> Tensor:
    return pow(other, self)


TENSOR_METHODS = {
    "add": add,
    "sub": sub,
    "mul": mul,
    "div": div,
    "neg": neg,
    "pow": pow,
    "neg_": neg_,
    "add_": add_,
    "sub_": sub_,
    "mul_": mul_,
    "div_": div_,
    "__add__": add,
    "__radd__": _radd,
    "__iadd__": add_,
    "__sub__": sub,
    "__rsub__": _rsub,
    "__isub__": sub_,
    "__mul__": mul,
    "__rmul__": _rmul,
    "__imul__": mul_,
    "__truediv__": div,
    "__rtruediv__": _rtruediv,
    "__itruediv__": div_,
    "__neg__": neg,
    "__pow__": pow,
    "__rpow__": _rpow,
}
"""Installed on :class:`engine.Tensor` by ``engine.ops``."""

FUNCTIONS = {
    "add": add,
    "sub": sub,
    "mul": mul,
    "div": div,
    "neg": neg,
    "pow": pow,
    "neg_": neg_,
}
"""Exported as ``engine.<name>`` by ``engine.ops``."""
