"""Saved tensors: what a node keeps from forward, with version checks.

A node saving one of its own outputs must not hold that output tensor (the
tensor holds the node: a reference cycle). As in PyTorch's SavedVariable, an
output is saved as its array and version counter, and a tensor pointing back
at the node is rebuilt on unpack.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.graph import Node
    from engine.tensor import Tensor

__all__ = [
    "ERR_BACKWARD_TWICE",
    "ERR_INFERENCE_SAVED",
    "SavedTensor",
    "type_description",
    "type_name",
]

ERR_BACKWARD_TWICE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
    "graph a second time or if you need to access saved tensors after calling backward."
)

ERR_INFERENCE_SAVED = (
    "Inference tensors cannot be saved for backward. To work around you can make a clone to get a "
    "normal tensor and use it in autograd."
)

_TYPE_NAMES = {
    "float16": "HalfTensor",
    "float32": "FloatTensor",
    "float64": "DoubleTensor",
    "int8": "CharTensor",
    "uint8": "ByteTensor",
    "int16": "ShortTensor",
    "int32": "IntTensor",
    "int64": "LongTensor",
    "bool": "BoolTensor",
}


def type_name(array: Any, device: Any) -> str:
    """``engine.FloatTensor``: PyTorch's ``Tensor.type()``, in the engine's namespace."""
    name = _TYPE_NAMES.get(str(array.dtype), f"{array.dtype}Tensor")
    return f"engine.{name}" if device.type == "cpu" else f"engine.{device.type}.{name}"


def type_description(array: Any, device: Any) -> str:
    """``engine.FloatTensor [2, 3]``, the way PyTorch names a tensor in its errors."""
    return f"{type_name(array, device)} [{', '.join(str(d) for d in array.shape)}]"


def _forward_name(node_name: str) -> str:
    """``TanhBackward0`` -> ``Tanh``; ``MyFnBackward`` -> ``MyFn``."""
    return re.sub(r"Backward\d*$", "", node_name) or node_name


class SavedTensor:
    """A tensor saved for backward by a node."""

    __slots__ = (
        "_device",
        "_output_nr",
        "_producer_name",
        "_requires_grad",
        "_saved_version",
        "_tensor",
        "_version_counter",
        "data",
    )

    def __init__(self, tensor: Tensor, is_output: bool = False) -> None:
        if tensor._is_inference:
            raise RuntimeError(ERR_INFERENCE_SAVED)
        self.data: Any = tensor.data
        self._version_counter = tensor._shared_version_counter()
        self._saved_version: int = self._version_counter[0]
        self._device = tensor.device
        if is_output:
            # The node is this tensor's grad_fn: keep the array, not the tensor (no cycle),
            # and the node's name for the "modified by an inplace operation" message.
            grad_fn = tensor.grad_fn
            self._producer_name: str | None = None if grad_fn is None else grad_fn.name()
            self._tensor: Tensor | None = None
            self._output_nr = tensor._output_nr
            self._requires_grad = tensor._requires_grad
        else:
            self._producer_name = None  # the message names the tensor's grad_fn as it is then
            self._tensor = tensor
            self._output_nr = 0
            self._requires_grad = False

    def release(self) -> None:
        """Drop the saved data; unpacking afterwards raises the "backward twice" error."""
        self.data = None
        self._tensor = None

    @property
    def released(self) -> bool:
        return self.data is None

    def unpack(self, saved_for: Node | None = None) -> Tensor:
        """The saved tensor, after checking it was not freed nor modified in place.

        Raises:
            RuntimeError: PyTorch's "Trying to backward through the graph a second
                time" when freed, or "... modified by an inplace operation" when
                the version moved on.
        """
        if self.data is None:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        current = self._version_counter[0]
        if current != self._saved_version:
            raise RuntimeError(self._modified_message(current))
        if self._tensor is not None:
            return self._tensor
        from engine.tensor import Tensor

        out = Tensor._make(self.data, self._device)
        out._version_counter = self._version_counter
        if saved_for is not None and self._requires_grad:
            out.grad_fn = saved_for
            out._output_nr = self._output_nr
            out._requires_grad = True
        return out

    def _modified_message(self, current: int) -> str:
        from engine import anomaly

        what = type_description(self.data, self._device)
        # PyTorch 2.x names the forward op ("output 0 of Tanh"), not the node: of a saved
        # output, the op that made it; of a saved input, its grad_fn as it is now.
        name, output_nr = self._producer_name, self._output_nr
        if self._tensor is not None:
            grad_fn = self._tensor.grad_fn
            name = None if grad_fn is None else grad_fn.name()
            output_nr = self._tensor._output_nr
        if name is not None:
            name = _forward_name(name)
        producer = f", which is output {output_nr} of {name}," if name is not None else ""
        if anomaly.STATE.enabled:
            hint = (
                "Hint: the backtrace further above shows the operation that failed to compute its "
                "gradient. The variable in question was changed in there or anywhere later. Good "
                "luck!"
            )
        else:
            hint = (
                "Hint: enable anomaly detection to find the operation that failed to compute its "
                "gradient, with engine.set_detect_anomaly(True, check_nan=False)."
            )
        return (
            "one of the variables needed for gradient computation has been modified by an inplace "
            f"operation: [{what}]{producer} is at version {current}; expected version "
            f"{self._saved_version} instead. {hint}"
        )
