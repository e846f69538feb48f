"""``python -m autograd_viz``: the same as the ``autograd-viz`` command."""

from __future__ import annotations

import sys

from autograd_viz.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
