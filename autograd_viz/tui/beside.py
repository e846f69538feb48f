"""The TUI on a thread of its own, beside a program that keeps the main thread.

Note [The program keeps the main thread]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
``autograd-viz run SCRIPT`` is ``python SCRIPT`` with a debugger beside it.
Python runs signal handlers only on the main thread, and ``signal.signal``
works only there, so a script that checkpoints on SIGTERM or installs any
handler must run on the main thread, as it would unwatched; the TUI runs on a
thread of its own. Textual's Linux driver installs handlers for SIGTSTP,
SIGCONT, SIGTTOU, SIGTTIN and SIGWINCH, which it cannot do off the main thread
and which would replace the script's own: :class:`BesideDriver` leaves every
handler to the program and learns of a resized terminal by asking its size a
few times a second instead of from SIGWINCH. Ctrl+Z and Ctrl+C reach the TUI
as keys (the terminal is in raw mode), as in any Textual app.

Quitting never waits for the program: the live session is cancelled
(:meth:`~autograd_viz.live.LiveSession.cancel`) and the program is sent
SIGINT, as Ctrl+C would send it; one that still runs a moment later is ended
(:func:`end_program`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from textual import events
from textual.drivers import linux_driver
from textual.geometry import Size

SIZE_POLL_S = 0.25
"""How often the TUI asks the terminal for its size (it gets no SIGWINCH)."""

GRACE_S = 0.6
"""How long a program sent SIGINT at quit may take to end before it is ended."""


class _HandlersStay(ModuleType):
    """``signal`` as Textual's driver sees it: every handler stays the program's."""

    def __init__(self) -> None:
        super().__init__("signal")

    def __getattr__(self, name: str) -> Any:
        return getattr(signal, name)

    @staticmethod
    def signal(signum: int, handler: Any) -> Any:
        return signal.getsignal(signum)


@contextlib.contextmanager
def _handlers_stay() -> Iterator[None]:
    """While Textual's driver runs a call, its ``signal.signal`` installs nothing."""
    real = linux_driver.signal
    linux_driver.signal = _HandlersStay()
    try:
        yield
    finally:
        linux_driver.signal = real


class BesideDriver(linux_driver.LinuxDriver):
    """Textual's Linux driver for an app off the main thread (Note [The program keeps...])."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        with _handlers_stay():
            super().__init__(*args, **kwargs)
        self._stop_polling = threading.Event()

    def start_application_mode(self) -> None:
        with _handlers_stay():
            super().start_application_mode()
        loop = asyncio.get_running_loop()
        self._stop_polling.clear()
        threading.Thread(
            target=self._poll_size, args=(loop,), name="autograd-viz-tui-size", daemon=True
        ).start()

    def stop_application_mode(self) -> None:
        self._stop_polling.set()
        with _handlers_stay():
            super().stop_application_mode()

    def disable_input(self) -> None:
        with _handlers_stay():
            super().disable_input()

    def _poll_size(self, loop: asyncio.AbstractEventLoop) -> None:
        last = self._get_terminal_size()
        while not self._stop_polling.wait(SIZE_POLL_S):
            size = self._get_terminal_size()
            if size != last:
                last = size
                resize = events.Resize(Size(*size), Size(*size))
                with contextlib.suppress(RuntimeError):  # the loop closed: the app is gone
                    asyncio.run_coroutine_threadsafe(self._app._post_message(resize), loop)


def end_program(still_running: Callable[[], bool], status: int = 130) -> None:
    """After quitting: interrupt the program on the main thread, and end it if it goes on.

    SIGINT goes to the main thread as Ctrl+C would (a sleep or a read is cut
    short, ``KeyboardInterrupt`` unwinds the program, its ``finally`` blocks
    run). A program that ignores it is ended :data:`GRACE_S` later with
    ``status``, what it printed flushed first.
    """
    main = threading.main_thread()
    if main.ident is None or not still_running():
        return
    with contextlib.suppress(ProcessLookupError, OSError):
        signal.pthread_kill(main.ident, signal.SIGINT)
    deadline = time.monotonic() + GRACE_S
    while still_running() and time.monotonic() < deadline:
        time.sleep(0.02)
    if still_running():
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)
