"""Element types that print as PyTorch's (``engine.float32``) and work as NumPy's.

A :class:`dtype` wraps a NumPy dtype. It compares equal to that dtype, to its
scalar type and to its name (``engine.float32 == np.float32 == "float32"``),
hashes like it, and NumPy and CuPy accept it wherever they take a dtype (they
read its ``.dtype``). ``Tensor.dtype`` returns one of these, the same object
for the same element type, so ``t.dtype is engine.float32`` holds too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "bool_",
    "complex64",
    "complex128",
    "dtype",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "of",
    "uint8",
]


class dtype:  # noqa: N801 - torch.dtype
    """An element type, e.g. ``engine.float32``."""

    __slots__ = ("dtype", "name")

    dtype: np.dtype[Any]
    """The NumPy dtype it stands for (what NumPy reads when given this object as a dtype)."""
    name: str
    """NumPy's name for it: ``float32``, ``int64``, ``bool``."""

    def __init__(self, numpy_dtype: Any) -> None:
        self.dtype = np.dtype(numpy_dtype)
        self.name = self.dtype.name

    def __repr__(self) -> str:
        return f"engine.{self.name}"

    def __str__(self) -> str:
        # The bare name: text built with f"{t.dtype}" (the visualizer's labels) reads as before.
        return self.name

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if isinstance(other, dtype):
            return self.dtype == other.dtype
        if other is None:  # np.dtype(None) is float64
            return False
        try:
            return bool(self.dtype == np.dtype(other))  # type: ignore[call-overload]
        except TypeError:
            return NotImplemented

    def __hash__(self) -> int:
        return hash(self.dtype)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (of, (self.name,))

    @property
    def __numpy_dtype__(self) -> np.dtype[Any]:
        """The NumPy dtype, for NumPy 2.4+'s dtype protocol.

        NumPy asks any object given as a dtype for this first: without it, every
        ``np.ones(shape, engine.float32)`` raised and caught an AttributeError
        before reading ``.dtype``, the fallback older NumPy uses.
        """
        return self.dtype

    def __getattr__(self, name: str) -> Any:
        # NumPy's attributes (kind, itemsize, type, char) for code written against NumPy dtypes;
        # not its protocols (NumPy probes for ``__numpy_dtype__``, then reads ``.dtype``).
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dtype, name)

    @property
    def is_floating_point(self) -> bool:
        """Whether it is a floating point type, as ``torch.dtype.is_floating_point``."""
        return bool(self.dtype.kind == "f")

    @property
    def is_complex(self) -> bool:
        """Whether it is a complex type."""
        return bool(self.dtype.kind == "c")

    @property
    def is_signed(self) -> bool:
        """Whether it holds negative values."""
        return bool(self.dtype.kind in "fic")


_BY_NUMPY: dict[np.dtype[Any], dtype] = {}


def of(numpy_dtype: Any) -> dtype:
    """The :class:`dtype` for a NumPy dtype (or anything ``np.dtype`` accepts), always the same."""
    key = np.dtype(numpy_dtype)
    found = _BY_NUMPY.get(key)
    if found is None:
        found = _BY_NUMPY[key] = dtype(key)
    return found


float16 = of(np.float16)
float32 = of(np.float32)
float64 = of(np.float64)
complex64 = of(np.complex64)
complex128 = of(np.complex128)
int8 = of(np.int8)
int16 = of(np.int16)
int32 = of(np.int32)
int64 = of(np.int64)
uint8 = of(np.uint8)
bool_ = of(np.bool_)
