"""autograd-viz: see, step through and debug a backward pass."""

from __future__ import annotations

__version__ = "0.1.0"
