"""The package's version, in a module of its own so that every room can read it."""

from __future__ import annotations

__version__ = "0.1.0"
