"""``engine.functional``: layers and losses built from differentiable ops."""

from __future__ import annotations
