"""Checking what flows along edges: node outputs, root gradients and hook results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.graph import EdgeLike, InputMetadata, Node
from engine.saved import type_name
from engine.tensor import Tensor

__all__ = [
    "check_hook_result",
    "check_hook_results",
    "conform_output",
    "hook_name",
    "validate_outputs",
]


def validate_outputs(
    edges: Sequence[EdgeLike | None], grads: Sequence[Tensor | None], fn: Node | None
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
    edges: Sequence[EdgeLike | None], grads: Sequence[Tensor | None], fn: Node | None
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


def hook_name(hook: Any) -> str:
    """How PyTorch names a hook in its errors: its ``__name__``, else ``<unknown>``."""
    name = getattr(hook, "__name__", None)
    return name if isinstance(name, str) else "<unknown>"


def check_hook_result(result: Any, grad: Tensor | None, hook: Any) -> Tensor:
    """A hook's replacement for ``grad``, checked as PyTorch checks it.

    Raises:
        RuntimeError: ``grad`` was ``None``, or the replacement changed its type or size.
        TypeError: the replacement is not a tensor.
    """
    if grad is None:
        raise RuntimeError("can't replace a None gradient with a non-None value")
    if not isinstance(result, Tensor):
        raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")
    if result.data.dtype != grad.data.dtype or result.device.type != grad.device.type:
        raise RuntimeError(
            f"hook '{hook_name(hook)}' has changed the type of value (was "
            f"{type_name(grad.data, grad.device)} got {type_name(result.data, result.device)})"
        )
    if result.data.shape != grad.data.shape:
        raise RuntimeError(f"hook '{hook_name(hook)}' has changed the size of value")
    return result


def check_hook_results(result: Any, grads: Sequence[Any], hook: Any) -> list[Any]:
    """A node hook's replacement tuple for ``grads``, each item checked as PyTorch does.

    Raises:
        TypeError: the result is not a tuple, or holds something other than tensors and None.
        RuntimeError: the wrong number of values, or a value of another type or size.
    """
    if not isinstance(result, tuple):
        raise TypeError(f"expected tuple, but hook returned '{type(result).__name__}'")
    if len(result) != len(grads):
        raise RuntimeError(
            f"hook '{hook_name(hook)}' has returned an incorrect number of values (got "
            f"{len(result)}, but expected {len(grads)})"
        )
    # None replaces a gradient with None, as in PyTorch: the tuple is taken as it is.
    return [
        None if new is None else check_hook_result(new, grad, hook)
        for new, grad in zip(result, grads, strict=True)
    ]


# Note [Gradients that keep their metadata]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# PyTorch checks every gradient against the metadata of the input it
# goes to (validate_outputs), and so does the plain path. In Python the
# check was a tenth of a chain's node: ``data.shape`` builds a tuple and
# ``data.dtype`` is a descriptor call, for every edge. But a gradient in
# a node's input buffer always fits that node's own output metadata (the
# root gradient is validated, every routed one is checked or passes this
# rule, a sum of two fitting ones fits, and a node with hooks goes the
# general way, whose validate_outputs checks what it passes on). A node
# class with ``keeps_metadata`` returns tensors of the shape, dtype and
# device of the gradient it got (``g``, ``-g``, ``g * 2.0``, ``g * b``
# with ``b`` promoted and broadcast into the output's shape). So where
# the receiving input's metadata is the very object of the node's own
# output metadata (Note [Shared input metadata] shares one per shape,
# dtype and device), the gradient fits it without looking. Any other
# edge is checked in full (a CPU scalar operand's among them: its
# metadata names another device), and conform_output sums a broadcast
# gradient down, casts or moves it as before.
# tests/engine/test_keeps_metadata.py holds every class that sets the
# flag to it, over dtypes, broadcasts and numbers.
