"""``autograd_viz.name``: the name every view shows for a leaf, on either engine."""

from __future__ import annotations

import sys
from typing import TypeVar

import engine

T = TypeVar("T")


def name(tensor: T, label: str) -> T:
    """Name a tensor for every view: ``x`` instead of ``tensor[3, 4]``.

    Works on our engine's tensors (it sets ``tensor.name``) and on PyTorch's
    (kept beside the tensor, forgotten when it is freed; the tensor is not
    changed).

    Example:
        >>> x = autograd_viz.name(torch.randn(3, 4, requires_grad=True), "x")

    Args:
        tensor: an ``engine.Tensor`` or a ``torch.Tensor``.
        label: its name.

    Returns:
        ``tensor``, so that the call can wrap the tensor's creation.

    Raises:
        TypeError: ``tensor`` is neither kind of tensor, or ``label`` is not a string.
    """
    if not isinstance(label, str):
        raise TypeError(f"a tensor's name must be a string, got {type(label).__name__}")
    if isinstance(tensor, engine.Tensor):
        tensor.name = label
        return tensor
    torch = sys.modules.get("torch")  # never imported here: a torch tensor means it is loaded
    if torch is not None and isinstance(tensor, torch.Tensor):
        from autograd_viz.sources.pytorch.leaf_names import name as name_torch_tensor

        return name_torch_tensor(tensor, label)  # type: ignore[return-value]
    raise TypeError(f"name() names an engine.Tensor or a torch.Tensor, got {type(tensor).__name__}")
