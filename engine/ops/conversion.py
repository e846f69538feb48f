"""Moving between devices and dtypes, and copying: ``to``, ``cpu``, ``clone``."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine import devices
from engine.devices import CPU, Device
from engine.graph import Node
from engine.ops._core import make_node, wrap
from engine.tensor import Tensor, is_differentiable_dtype

__all__ = [
    "FUNCTIONS",
    "TENSOR_METHODS",
    "CloneBackward0",
    "CopyBackwards",
    "ToCopyBackward0",
    "clone",
    "copy_for_grad",
    "cpu",
    "cuda",
    "to",
]


class ToCopyBackward0(Node):
    """Backward of a device or dtype move: the gradient goes back where it came from."""

    __slots__ = ("self_device", "self_dtype")
    self_device: Device
    self_dtype: np.dtype[Any]

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        if g.device is not self.self_device:
            g = to(g, self.self_device)
        if g.dtype != self.self_dtype:
            g = to(g, self.self_dtype)
        return (g,)


def _parse_to_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Device | None, Any]:
    device: Device | None = None
    dtype: Any = None
    for arg in (*args, *(v for k, v in kwargs.items() if k in ("device", "dtype"))):
        if arg is None:
            continue
        if isinstance(arg, Device):
            device = arg
        elif isinstance(arg, str):
            try:
                device = Device(arg)
            except RuntimeError:
                dtype = np.dtype(arg)
        elif isinstance(arg, Tensor):
            device, dtype = arg.device, arg.dtype
        else:
            dtype = np.dtype(arg)
    unknown = set(kwargs) - {"device", "dtype", "copy", "non_blocking"}
    if unknown:
        raise TypeError(f"to() got an unexpected keyword argument '{sorted(unknown)[0]}'")
    return device, dtype


def to(input: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """Move to a device and/or cast to a dtype; differentiable; ``self`` if nothing changes.

    Accepts ``to("sim:0")``, ``to(engine.float64)``, ``to(device=..., dtype=...)`` and
    ``to(other_tensor)``.
    """
    device, dtype = _parse_to_args(args, kwargs)
    copy = bool(kwargs.get("copy", False))
    device = input.device if device is None else device
    dtype = input.dtype if dtype is None else np.dtype(dtype)
    if device is input.device and dtype == input.dtype and not copy:
        return input
    data = input.data
    if dtype != data.dtype:
        # Cast where the data is, then move: CuPy runs the cast on the current device.
        with devices.device_context(input.device):
            data = data.astype(dtype)
    if device is not input.device:
        data = devices.move_array(data, input.device, device)
    elif data is input.data:
        with devices.device_context(input.device):
            data = data.copy()
    node = make_node(ToCopyBackward0, input) if is_differentiable_dtype(dtype) else None
    if node is not None:
        node.self_device = input.device
        node.self_dtype = input.data.dtype
    return wrap(data, device, node)


def cpu(input: Tensor) -> Tensor:
    """A copy on the CPU (``self`` if already there)."""
    return to(input, CPU)


def cuda(input: Tensor, device: int | None = None) -> Tensor:
    """A copy on ``cuda:device`` (``cuda:0`` by default)."""
    return to(input, Device("cuda", 0 if device is None else device))


class CloneBackward0(Node):
    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        return (grads[0],)


def clone(input: Tensor) -> Tensor:
    """A copy that owns its data, recorded in the graph."""
    node = make_node(CloneBackward0, input)
    return wrap(input.data.copy(), input.device, node)


class CopyBackwards(Node):
    """The backward of ``dst.copy_(src)``: nothing reaches ``dst``'s old value, all of ``src``.

    Under ``create_graph`` a leaf's first gradient is such a copy of the incoming one
    (PyTorch's AccumulateGrad copies it into a fresh tensor), so ``x.grad.grad_fn`` is a
    ``CopyBackwards`` whose edges are ``(None, the gradient's own history)``.
    """

    __slots__ = ()

    def apply(self, grads: list[Any]) -> tuple[Any, ...]:
        g = grads[0]
        return (
            wrap(g.device.xp.zeros_like(g.data), g.device)
            if self.should_compute_output(0)
            else None,
            g if self.should_compute_output(1) else None,
        )


def copy_for_grad(grad: Tensor) -> Tensor:
    """A copy of ``grad`` that owns its memory; recorded as ``CopyBackwards`` under grad mode."""
    node = make_node(CopyBackwards, None, grad)
    return wrap(grad.data.copy(), grad.device, node)


def _caster(dtype: Any) -> Any:
    def cast(input: Tensor) -> Tensor:
        return to(input, dtype)

    cast.__doc__ = f"``to({np.dtype(dtype).name})``."
    return cast


TENSOR_METHODS = {
    "to": to,
    "cpu": cpu,
    "cuda": cuda,
    "clone": clone,
    "float": _caster(np.float32),
    "double": _caster(np.float64),
    "half": _caster(np.float16),
    "long": _caster(np.int64),
    "int": _caster(np.int32),
    "bool": _caster(np.bool_),
}
FUNCTIONS = {"clone": clone}
