"""Checking what flows along edges: node outputs, root gradients and hook results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.graph import Edge, InputMetadata, Node
from engine.tensor import Tensor

__all__ = [
    "check_hook_result",
    "check_hook_results",
    "conform_output",
    "validate_outputs",
]


def validate_outputs(
    edges: Sequence[Edge | None], grads: Sequence[Tensor | None], fn: Node | None
) -> Sequence[Tensor | None]:
    """Check (and conform) the gradients flowing along ``edges``, as PyTorch does.

    Gradients whose shape broadcasts to the expected one are summed down to it
    (so every op's backward gets broadcasting right for free); dtypes are cast;
    0-dim gradients move to the expected device. ``fn`` is the node that
    produced the gradients (named in errors), ``None`` for root gradients.

    Returns ``grads`` itself when every gradient already fits (the common
    case, checked without a call), else a list with the conformed ones.

    Raises:
        RuntimeError: wrong number of gradients, an incompatible shape, or a
            gradient on the wrong device.
    """
    if len(grads) != len(edges):
        raise RuntimeError(
            _message(
                fn, f"invalid number of gradients - expected {len(edges)}, but got {len(grads)}"
            )
        )
    for edge, grad in zip(edges, grads):  # noqa: B905 - lengths checked above; strict is slow
        if grad is None or edge is None:
            continue
        if type(grad) is not Tensor:
            return _validate_each(edges, grads, fn)
        meta = edge.function._input_metadata[edge.input_nr]
        data = grad.data
        if (
            data.shape != meta[0]
            or grad.device is not meta[2]
            or (data.dtype is not meta[1] and data.dtype != meta[1])
        ):
            return _validate_each(edges, grads, fn)
    return grads


def _validate_each(
    edges: Sequence[Edge | None], grads: Sequence[Tensor | None], fn: Node | None
) -> list[Tensor | None]:
    """:func:`validate_outputs` once something does not fit: check and conform each one."""
    conformed = list(grads)
    for i, edge in enumerate(edges):
        grad = grads[i]
        if edge is None or grad is None:
            continue
        conformed[i] = conform_output(i, grad, edge.function._input_metadata[edge.input_nr], fn)
    return conformed


def conform_output(i: int, grad: Any, meta: InputMetadata, fn: Node | None) -> Tensor:
    """Gradient ``i`` summed, cast and moved to what ``meta`` expects, or PyTorch's error.

    Raises:
        TypeError: ``grad`` is not a tensor.
        RuntimeError: an incompatible shape, or a gradient on the wrong device.
    """
    if not isinstance(grad, Tensor):
        raise TypeError(
            _message(
                fn,
                f"invalid gradient at index {i} - expected a Tensor or None, but got "
                f"{type(grad).__name__}",
            )
        )
    shape = grad.data.shape
    if shape != meta.shape:
        if not _expandable_to(meta.shape, shape):
            raise RuntimeError(
                _message(
                    fn,
                    f"invalid gradient at index {i} - got {list(shape)} but expected shape "
                    f"compatible with {list(meta.shape)}",
                )
            )
        grad = grad.sum_to_size(meta.shape)
    if grad.data.dtype != meta.dtype:
        grad = grad.to(meta.dtype)
    if grad.device is not meta.device:
        if grad.data.ndim == 0:
            grad = grad.to(meta.device)
        else:
            raise RuntimeError(
                _message(
                    fn,
                    f"invalid device for value at index {i} - expected device {meta.device} "
                    f"but got {grad.device}",
                )
            )
    return grad


def _message(fn: Node | None, msg: str) -> str:
    return msg if fn is None else f"Function {fn.name()} returned an {msg}"


def _expandable_to(shape: tuple[int, ...], desired: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``desired`` (so a gradient can be summed back)."""
    if len(shape) > len(desired):
        return False
    for have, want in zip(reversed(shape), reversed(desired), strict=False):
        if have not in (want, 1):
            return False
    return True


def check_hook_result(result: Any, grad: Tensor, kind: str) -> Tensor:
    if not isinstance(result, Tensor):
        raise TypeError(
            f"{kind} returned an object of type {type(result).__name__}; expected a Tensor or None"
        )
    if result.shape != grad.shape:
        raise RuntimeError(
            f"{kind} changed the shape of the gradient from {list(grad.shape)} to "
            f"{list(result.shape)}; a hook must return a gradient of the same shape"
        )
    return result


def check_hook_results(result: Any, grads: list[Any], kind: str) -> list[Any]:
    if isinstance(result, Tensor):
        result = (result,)
    result = list(result)
    if len(result) != len(grads):
        raise RuntimeError(
            f"{kind} returned {len(result)} gradients; expected {len(grads)} (one per gradient "
            f"it was given)"
        )
    return result
