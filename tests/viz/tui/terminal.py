"""A program run in a pseudo-terminal, as a user runs it: keys in, the screen's bytes out."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


class Terminal:
    """``autograd-viz ARGS`` on a pseudo-terminal of ``size`` (columns, rows)."""

    def __init__(
        self,
        args: Sequence[str],
        env: dict[str, str] | None = None,
        size: tuple[int, int] = (120, 36),
        stderr: int | None = None,
    ) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
        environ = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", **(env or {})}
        environ.pop("TEXTUAL_ALLOW_SIGNALS", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "autograd_viz", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave if stderr is None else stderr,  # a file: `2>FILE`
            env=environ,
            cwd=ROOT,
            start_new_session=True,
        )
        os.close(slave)
        self._master = master
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # the program closed the terminal
                return
            if not chunk:
                return
            self._chunks.append(chunk)

    @property
    def output(self) -> str:
        """Everything written to the terminal so far, escapes included."""
        return b"".join(self._chunks).decode("utf-8", "replace")

    def wait_for(self, text: str, timeout: float = 30.0) -> None:
        """Wait until ``text`` has been written (the TUI draws it in one piece)."""
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise AssertionError(f"{text!r} never came; the screen ends {self.output[-800:]!r}")
            time.sleep(0.05)

    def resize(self, size: tuple[int, int]) -> None:
        """Make the terminal ``size`` (columns, rows), as a window resized by its user."""
        fcntl.ioctl(self._master, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))

    def press(self, keys: str) -> None:
        os.write(self._master, keys.encode())

    def wait(self, timeout: float = 30.0) -> int:
        """The exit status (the program is killed if it runs past ``timeout``)."""
        try:
            return self.process.wait(timeout)
        finally:
            self.close()

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._reader.join(5)
        with contextlib.suppress(OSError):
            os.close(self._master)
