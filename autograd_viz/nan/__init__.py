"""Where a NaN or Inf was born, and why.

:mod:`~autograd_viz.nan.report` finds the first non-finite values in a trace
and the path from the loss to them; :mod:`~autograd_viz.nan.cause` explains,
from the recorded numbers alone, how an op produced one.
"""

from __future__ import annotations

from autograd_viz.nan.report import Finding, NanReport
from autograd_viz.nan.scan import find_nans

__all__ = ["Finding", "NanReport", "find_nans"]
