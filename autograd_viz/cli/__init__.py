"""The ``autograd-viz`` command line (see :mod:`autograd_viz.cli.main`)."""

from __future__ import annotations

from autograd_viz.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
