"""What a live session runs, and what it hooks into while it runs.

A :class:`Target` is the user's code: the thread it runs on and what came of
it. :class:`Hooks` are the engine's events, PyTorch's backward calls and the
call watchers a session hooks into, and the engine threads it leaves behind
at stop.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

import engine
from autograd_viz.launch.script import ScriptFailedError, run_script
from autograd_viz.sources import arming
from autograd_viz.sources.tracebacks import trim_traceback
from engine import events
from engine.activity import ACTIVITY
from engine.calls import CALLS, CallWatcher
from engine.events import Event


class Target:
    """The user's code a session runs: on which thread, and what came of it."""

    def __init__(self, run: Callable[[], Any]) -> None:
        self.run = run
        self.thread: threading.Thread | None = None
        self.ident: int | None = None  # the thread's id once it runs the code
        self.result: Any = None
        self.error: BaseException | None = None

    def main(self) -> None:
        """Run the code on this thread; keep what it returned or raised."""
        self.ident = threading.get_ident()
        try:
            self.result = self.run()
        except SystemExit as exc:
            if exc.code not in (None, 0):
                self.error = exc
        except BaseException as exc:  # noqa: BLE001 - handed to whoever drives the session
            trim_traceback(exc)  # Note [A traceback as without us]
            self.error = exc

    @property
    def on_it(self) -> bool:
        """Whether the calling thread is the target's."""
        return threading.get_ident() == self.ident

    def join(self, timeout: float) -> None:
        """Wait for a thread of the session's own; warn if it is still running."""
        thread = self.thread
        if thread is None or thread is threading.current_thread():
            return
        thread.join(timeout)
        if thread.is_alive():
            warnings.warn(
                f"the live session's target still runs {timeout} s after stop(): it is "
                "blocked outside the engine (the session no longer pauses it)",
                RuntimeWarning,
                stacklevel=3,
            )


class Hooks:
    """What a session hooks into while it runs, and how it leaves the engine at stop."""

    def __init__(self) -> None:
        self._workers_before: set[threading.Thread] | None = None
        self._armed = False

    def hook(self, listener: Callable[[Event], None], watcher: CallWatcher | None) -> None:
        """Gate the engine's events (our engine's and PyTorch's) and, given a ``watcher``,
        tell it where the target's backward calls begin and end."""
        self._workers_before = set(engine.get_default_engine().worker_threads())
        ACTIVITY.track(True)
        arming.acquire()  # PyTorch's backward calls are gated too
        self._armed = True
        events.subscribe(listener)
        if watcher is not None:
            CALLS.add(watcher)

    def unhook(self, listener: Callable[[Event], None], watcher: CallWatcher) -> None:
        """Stop hearing of events and calls."""
        events.unsubscribe(listener)
        CALLS.remove(watcher)

    def leave(self, timeout: float) -> None:
        """Disarm, and shut down the engine threads the session started."""
        if self._armed:
            self._armed = False
            arming.release()
        if self._workers_before is not None:
            # backward() raises at the first error while device threads may still be
            # finishing a node of the cancelled task, and routing its gradients restarts a
            # device thread the shutdown just stopped: shut down again what that started.
            # (No wait for quiescence: other threads' backward passes may never pause.)
            engine_ = engine.get_default_engine()
            for _ in range(3):
                if not set(engine_.worker_threads()) - self._workers_before:
                    break
                engine_.shutdown(timeout)
            ACTIVITY.track(False)
            self._workers_before = None


def run_script_raising(path: str, args: list[str]) -> int:
    """Run a script; what it raises comes out as itself, as from a callable target."""
    try:
        return run_script(path, args)
    except ScriptFailedError as exc:
        raise exc.exception from None
