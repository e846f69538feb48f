"""The terminal UI: step through a backward pass live or from a recorded trace."""

from __future__ import annotations

from autograd_viz.tui.app import VizApp
from autograd_viz.tui.driver import Breakpoints, Driver, LiveDriver, ReplayDriver

__all__ = ["Breakpoints", "Driver", "LiveDriver", "ReplayDriver", "VizApp"]
