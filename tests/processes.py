"""What the tests that stop a command with a signal share."""

from __future__ import annotations

import signal


def sigint_as_at_a_terminal() -> None:
    """A ``preexec_fn``: SIGINT back to its default in the child, as a terminal's Ctrl-C finds it.

    A shell without job control starts a background job with SIGINT ignored, and its children
    inherit that; a command that keeps an ignored signal ignored (as ours do, as ``nohup``
    asks) would then never see the SIGINT a test sends, whoever ran the tests in the background.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
