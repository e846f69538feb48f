"""Differentiable operations, one module per family.

Each module lists what it adds to :class:`engine.Tensor` (``TENSOR_METHODS``)
and to the ``engine`` namespace (``FUNCTIONS``); :func:`install` puts them there.
"""

from __future__ import annotations

import importlib
from typing import Any

from engine.tensor import Tensor

__all__ = [
    "FAMILIES",
    "install",
]

FAMILIES = (
    "arithmetic",
    "pointwise",
    "reduction",
    "shape",
    "indexing",
    "selection",
    "scan",
    "sorting",
    "linalg",
    "softmax",
    "comparison",
    "conversion",
)
"""Op modules, in install order."""


def install() -> dict[str, Any]:
    """Attach every family's methods to Tensor; return the public functions."""
    functions: dict[str, Any] = {}
    for family in FAMILIES:
        try:
            module = importlib.import_module(f"engine.ops.{family}")
        except ModuleNotFoundError as exc:
            if exc.name != f"engine.ops.{family}":
                raise
            continue
        for name, fn in getattr(module, "TENSOR_METHODS", {}).items():
            setattr(Tensor, name, fn)
        functions.update(getattr(module, "FUNCTIONS", {}))
    return functions
