"""The terminal UI: step through a backward pass live or from a recorded trace."""

from __future__ import annotations

from autograd_viz.tui.app import VizApp
from autograd_viz.tui.driver import ContinueStops, Driver, LiveDriver, ReplayDriver

__all__ = ["ContinueStops", "Driver", "LiveDriver", "ReplayDriver", "VizApp"]
