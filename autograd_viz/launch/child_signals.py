"""A watched child's signals: SIGTERM and SIGHUP save what it holds, then end it by them.

See Note [A child stopped by a signal]. What each watching command does in its
child is :mod:`autograd_viz.cli.children`'s.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys

# Note [A child stopped by a signal]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# torchrun and torch.multiprocessing.spawn stop the other ranks with SIGTERM
# when one fails, and a scheduler preempts a job with it. Killed by a signal, a
# child never reaches its exit hooks: a flight recorder (--last) would lose
# every call it held, and a streamed trace its `process` record and its rank's
# name. So a watched child takes SIGTERM and SIGHUP, when nobody else did
# (their handler is the default one), as `record` takes them in the watching
# process: one line on stderr, then SystemExit on the main thread, which runs
# the program's `finally` blocks and the exit hooks that save what the process
# holds, without a traceback (multiprocessing and Python exit quietly on it),
# and last, the process ends by the same signal, so the launcher sees the exit
# status it would have seen unwatched. A Python handler runs only once the main
# thread is back in Python: a rank stuck inside a collective saves when the
# collective returns or fails (gloo fails it as soon as a peer has gone), or
# not at all when the launcher's SIGKILL comes first. `kill -9` runs nothing:
# a streamed child keeps the calls it had written, all but the one in flight.

_SAVING_SIGNALS = ("SIGTERM", "SIGHUP")
_stopped_by: list[int] = []
"""The signal that stopped this process, once one did (Note [A child stopped by a signal])."""


def saved_on_signals() -> None:
    """SIGTERM and SIGHUP save what this child holds, then end it by the same signal."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    taken = False
    for name in _SAVING_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) == signal.SIG_DFL:
            signal.signal(signum, _stop)
            taken = True
    if taken:
        # Registered before the hooks that save: exit hooks run last in, first out.
        atexit.register(_end_by_signal)


def _stop(signum: int, frame: object) -> None:
    import signal

    if _stopped_by:
        return  # a second signal while the first one is saving: the save goes on
    _stopped_by.append(signum)
    with contextlib.suppress(Exception):
        sys.stderr.write(
            f"autograd-viz: process {os.getpid()} got {signal.Signals(signum).name}: "
            "saving what it recorded, then ending by it\n"
        )
        sys.stderr.flush()
    raise SystemExit(128 + signum)


def _end_by_signal() -> None:
    """The last exit hook: a process stopped by a signal ends by it, as it would unwatched."""
    import signal

    if not _stopped_by:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(_stopped_by[0], signal.SIG_DFL)
    os.kill(os.getpid(), _stopped_by[0])


__all__ = ["saved_on_signals"]
