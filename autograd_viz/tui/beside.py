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

The program's streams are its own too: Textual's driver draws on and reads
keys from copies of the terminal's descriptors while the program's are taken
(Note [The program writes to a terminal of its own] in
:mod:`~autograd_viz.tui.streams`), and Textual leaves ``sys.stdout`` and
``sys.stderr`` alone (:func:`streams_stay`).

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
import termios
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import textual.app
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


@contextlib.contextmanager
def streams_stay() -> Iterator[None]:
    """While the app runs, Textual leaves ``sys.stdout`` and ``sys.stderr`` as they are.

    Textual swaps them for its own capture while an app runs, process-wide: the
    program beside it would print into an object whose ``fileno()`` is -1, and
    whatever the program set them to meanwhile would be undone when the app ends.
    The program's descriptors are taken instead (Note [The program writes to a
    terminal of its own]).
    """
    names = ("redirect_stdout", "redirect_stderr")
    real = {name: getattr(textual.app, name) for name in names}
    for name in names:
        setattr(textual.app, name, _as_they_are)
    try:
        yield
    finally:
        for name, redirect in real.items():
            setattr(textual.app, name, redirect)


def _as_they_are(_: object) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


class BesideDriver(linux_driver.LinuxDriver):
    """Textual's Linux driver for an app off the main thread (Note [The program keeps...])."""

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        with _handlers_stay():
            super().__init__(app, *args, **kwargs)
        self._stop_polling = threading.Event()
        self._streams = getattr(app, "streams", None)
        if self._streams is not None and self._streams.screen is not None:
            # The program's descriptors are its own: the terminal is reached through copies.
            self._file = self._streams.screen
            self.fileno = self._streams.keys
            self.input_tty = os.isatty(self.fileno)

    def _get_terminal_size(self) -> tuple[int, int]:
        screen = self._streams.screen if self._streams is not None else None
        if screen is not None:
            with contextlib.suppress(OSError, ValueError):
                columns, rows = os.get_terminal_size(screen.fileno())
                if columns and rows:
                    return columns, rows
        return super()._get_terminal_size()

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
                if self._streams is not None:
                    self._streams.resize(*size)
                resize = events.Resize(Size(*size), Size(*size))
                with contextlib.suppress(RuntimeError):  # the loop closed: the app is gone
                    asyncio.run_coroutine_threadsafe(self._app._post_message(resize), loop)


LEAVE_SCREEN = (
    "\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1015l\x1b[?2004l\x1b[?1049l\x1b[?25h"
)
"""Mouse and paste reports off, the alternate screen left, the cursor shown."""


def leave_screen(app: Any) -> None:
    """Give the terminal back when the app could not: its screen left, its keys cooked.

    For a TUI that did not end when asked (Note [A signal ends the TUI first] in
    :mod:`autograd_viz.cli.tui`); what the driver set is undone from what it saved.
    """
    driver = getattr(app, "_driver", None)
    streams = getattr(app, "streams", None)
    screen = streams.screen if streams is not None else None
    fd = screen.fileno() if screen is not None and not screen.closed else 1
    with contextlib.suppress(OSError):
        os.write(fd, LEAVE_SCREEN.encode())
    attrs = getattr(driver, "attrs_before", None)
    keys = getattr(driver, "fileno", None)
    if attrs is not None and isinstance(keys, int):
        with contextlib.suppress(OSError, termios.error):
            termios.tcsetattr(keys, termios.TCSANOW, attrs)


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
