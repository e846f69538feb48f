"""Checking what flows along edges: node outputs, root gradients and hook results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engine.graph import Edge
from engine.tensor import Tensor


def validate_outputs(
    edges: Sequence[Edge | None],
    grads: list[Tensor | None],
    format_error: Callable[[str], str],
) -> list[Tensor | None]:
    """Check (and conform) the gradients flowing along ``edges``, as PyTorch does.

    Gradients whose shape broadcasts to the expected one are summed down to it
    (so every op's backward gets broadcasting right for free); dtypes are cast;
    0-dim gradients move to the expected device.

    Raises:
        RuntimeError: wrong number of gradients, an incompatible shape, or a
            gradient on the wrong device.
    """
    if len(grads) != len(edges):
        raise RuntimeError(
            format_error(
                f"invalid number of gradients - expected {len(edges)}, but got {len(grads)}"
            )
        )
    for i, given in enumerate(grads):
        edge = edges[i]
        grad = given
        if edge is None or grad is None:
            continue
        if not isinstance(grad, Tensor):
            raise TypeError(
                format_error(
                    f"invalid gradient at index {i} - expected a Tensor or None, but got "
                    f"{type(grad).__name__}"
                )
            )
        meta = edge.function._input_metadata[edge.input_nr]
        shape = grad.data.shape
        if shape != meta.shape:
            if not _expandable_to(meta.shape, shape):
                raise RuntimeError(
                    format_error(
                        f"invalid gradient at index {i} - got {list(shape)} but expected shape "
                        f"compatible with {list(meta.shape)}"
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
                    format_error(
                        f"invalid device for value at index {i} - expected device {meta.device} "
                        f"but got {grad.device}"
                    )
                )
        grads[i] = grad
    return grads


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
