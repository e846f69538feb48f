"""Custom differentiable functions: ``engine.Function``, as ``torch.autograd.Function``.

The ``ctx`` handed to ``forward`` and ``backward`` is the backward node itself
(as in PyTorch), so arbitrary attributes set on it live exactly as long as the
graph does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from engine import grad_mode
from engine.devices import CPU
from engine.graph import InputMetadata, Node
from engine.ops._core import check_inplace, link
from engine.saved import SavedTensor
from engine.tensor import Tensor

__all__ = [
    "BackwardCFunction",
    "Function",
    "FunctionCtx",
    "once_differentiable",
]


class FunctionCtx:
    """What ``forward`` can record for ``backward``; mixed into every backward node."""

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        """Save tensors (inputs or outputs) for ``backward``; read them via ``saved_tensors``."""
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"save_for_backward can only save variables, but argument {tensors.index(t)} "
                    f"is of type {type(t).__name__}"
                )
        self._to_save = tensors

    @property
    def saved_tensors(self) -> tuple[Tensor | None, ...]:
        """The saved tensors, checked for in-place changes and for having been freed."""
        node: Any = self
        return tuple(None if s is None else s.unpack(node) for s in node._saved_or_none)

    def mark_dirty(self, *tensors: Tensor) -> None:
        """Declare inputs that ``forward`` modified in place (they must be returned)."""
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors: Tensor) -> None:
        """Declare outputs that have no gradient (such as indices)."""
        self._non_differentiable = tensors

    def set_materialize_grads(self, value: bool) -> None:
        """Whether ``backward`` gets zeros (``True``, default) or ``None`` for missing grads."""
        self._materialize_grads = value


class BackwardCFunction(FunctionCtx, Node):  # type: ignore[misc]  # ctx.saved_tensors is torch's property
    """The node of one ``Function.apply`` call; ``ctx`` in ``forward``/``backward``."""

    _forward_cls: type[Function]
    skips_undefined_grads = False

    def __init__(self) -> None:
        Node.__init__(self)
        self._to_save: tuple[Tensor | None, ...] = ()
        self._saved_or_none: tuple[SavedTensor | None, ...] = ()
        self._dirty: tuple[Tensor, ...] = ()
        self._non_differentiable: tuple[Tensor, ...] = ()
        self._materialize_grads = True
        self.needs_input_grad: tuple[bool, ...] = ()
        self._is_tensor_input: tuple[bool, ...] = ()
        self._output_info: list[Any] = []

    def name(self) -> str:
        return f"{self._forward_cls.__name__}Backward"

    def release_variables(self) -> None:
        for s in self._saved_or_none:
            if s is not None:
                s.release()

    def apply(self, grads: list[Any]) -> list[Any]:
        from engine.factories import zeros

        if self._materialize_grads:
            # A non-tensor output's gradient stays None (its slot has no dtype), as in PyTorch.
            grads = [
                zeros(meta.shape, dtype=meta.dtype, device=meta.device)
                if g is None and meta.dtype is not None
                else g
                for g, meta in zip(grads, self._input_metadata, strict=True)
            ]
        result = self._forward_cls.backward(self, *grads)
        if not isinstance(result, tuple):
            result = (result,)
        expected = len(self._is_tensor_input)
        if len(result) != expected:
            if len(result) > expected and all(r is None for r in result[expected:]):
                result = result[:expected]
            else:
                raise RuntimeError(
                    f"function {self.name()} returned an incorrect number of gradients (expected "
                    f"{expected}, got {len(result)})"
                )
        for i, (r, is_tensor) in enumerate(zip(result, self._is_tensor_input, strict=True)):
            if r is None:
                continue
            if not is_tensor:
                raise RuntimeError(
                    f"function {self.name()} returned a gradient different than None at position "
                    f"{i + 1}, but the corresponding forward input was not a Variable"
                )
            if not isinstance(r, Tensor):
                raise RuntimeError(f"expected Variable or None (got {type(r).__name__})")
        return list(result)


class _FunctionMeta(type):
    def __init__(cls, name: str, bases: tuple[type, ...], attrs: dict[str, Any]) -> None:
        backward_cls = type(f"{name}Backward", (BackwardCFunction,), {"_forward_cls": cls})
        cls._backward_cls = backward_cls
        super().__init__(name, bases, attrs)


class Function(metaclass=_FunctionMeta):
    """Base class for operations with a hand-written backward.

    Subclass it with static ``forward(ctx, *args)`` and ``backward(ctx,
    *grad_outputs)``, then call ``MyFunction.apply(*args)``. ``backward``
    returns one gradient per ``forward`` argument (``None`` for non-tensors or
    inputs that need none).
    """

    _backward_cls: type[BackwardCFunction]

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        """Compute the outputs (runs without recording a graph)."""
        raise NotImplementedError(
            "You must implement the forward function for custom autograd.Function."
        )

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        """Return the gradient for each input of ``forward``."""
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom "
            "autograd.Function to use it with backward mode AD."
        )

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        """Run ``forward`` and, if any tensor input requires grad, record the node."""
        ctx = cls._backward_cls()
        is_tensor = tuple(isinstance(a, Tensor) for a in args)
        ctx._is_tensor_input = is_tensor
        record = grad_mode._state.enabled and any(
            isinstance(a, Tensor) and a._requires_grad for a in args
        )
        ctx.needs_input_grad = tuple(
            record and isinstance(a, Tensor) and a._requires_grad for a in args
        )
        with grad_mode.no_grad():
            raw = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(raw, tuple)
        outputs = (raw,) if single else raw
        if not record:
            return raw
        link(ctx, [a if isinstance(a, Tensor) else None for a in args])
        wrapped = tuple(_attach_output(ctx, o, args) for o in outputs)
        ctx._saved_or_none = tuple(
            None if t is None else SavedTensor(t, is_output=any(t is w for w in wrapped))
            for t in _resolve_saved(ctx._to_save, outputs, wrapped)
        )
        ctx._to_save = ()
        return wrapped[0] if single else wrapped


def _resolve_saved(
    to_save: tuple[Tensor | None, ...], raw: tuple[Any, ...], wrapped: tuple[Any, ...]
) -> list[Tensor | None]:
    """Saved outputs refer to the wrapped output objects, not the raw ones."""
    return [next((w for r, w in zip(raw, wrapped, strict=True) if t is r), t) for t in to_save]


def _attach_output(ctx: BackwardCFunction, out: Any, args: tuple[Any, ...]) -> Any:
    if not isinstance(out, Tensor):
        # Every output has a gradient slot, so backward gets one gradient per output (None
        # here) and the tensors after it keep their positions as output_nr (PyTorch's
        # undefined input metadata).
        device = next((a.device for a in args if isinstance(a, Tensor)), CPU)
        ctx._input_metadata += (InputMetadata((), None, device),)
        return out
    is_input = any(out is a for a in args)
    if any(out is d for d in ctx._dirty):
        check_inplace(out)
        out._bump_version()
        target = out
    elif is_input:
        # Returning an input unchanged: hand back a new tensor on the same data.
        target = Tensor._make(out.data, out.device)
        target._version_counter = out._shared_version_counter()
    else:
        target = out
    if any(out is n for n in ctx._non_differentiable):
        target._requires_grad = False
        ctx.add_input_metadata(target.data.shape, target.data.dtype, target.device)
        return target
    target.grad_fn = ctx
    target._output_nr = ctx.add_input_metadata(target.data.shape, target.data.dtype, target.device)
    target._requires_grad = True
    return target


class _DelayedError(Node):
    """Raises when differentiated: the output of a ``once_differentiable`` backward."""

    __slots__ = ("msg",)
    msg: str

    def apply(self, grads: list[Any]) -> list[Any]:
        raise RuntimeError(self.msg)

    def name(self) -> str:
        return "DelayedError"


def once_differentiable(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a ``backward`` that is not itself differentiable.

    It runs without recording; with ``create_graph=True`` its results raise a
    clear error if someone tries to differentiate through them.
    """

    @functools.wraps(fn)
    def wrapper(ctx: Any, *args: Any) -> Any:
        with grad_mode.no_grad():
            outputs = fn(ctx, *args)
        if not grad_mode.is_grad_enabled():
            return outputs
        requires = [a for a in args if isinstance(a, Tensor) and a._requires_grad]
        if not requires:
            return outputs
        single = not isinstance(outputs, tuple)
        items = (outputs,) if single else outputs
        err = _DelayedError()
        err.msg = (
            "trying to differentiate twice a function that was marked with @once_differentiable"
        )
        link(err, requires)
        result = []
        for item in items:
            if isinstance(item, Tensor):
                out = item.detach()
                out.grad_fn = err
                out._output_nr = err.add_input_metadata(out.data.shape, out.data.dtype, out.device)
                out._requires_grad = True
                item = out  # noqa: PLW2901 - the wrapped output replaces the raw one
            result.append(item)
        return result[0] if single else tuple(result)

    return wrapper
